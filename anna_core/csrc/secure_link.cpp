// Secured client links: handshake and frame sealing. See secure_link.hpp for the protocol.
#include "secure_link.hpp"

#include <sodium.h>

#include <cstring>

#include "curve.hpp"
#include "link.hpp"

namespace anna {

namespace {

constexpr std::size_t kBox = crypto_box_MACBYTES;  // 16
constexpr std::size_t kHelloBytes = 4 + 32 + 64 + kBox;
constexpr std::size_t kWelcomeBytes = 4 + 16 + 32 + kBox;
constexpr std::size_t kInitiatePlain = 32 + 16 + 64 + kBox;
constexpr std::size_t kInitiateBytes = 4 + kInitiatePlain + kBox;
constexpr std::size_t kReadyBytes = 4 + kBox;
static_assert(kWelcomeBytes < kHelloBytes, "a WELCOME must be smaller than its HELLO");
static_assert(kInitiateBytes <= kHandshakeFrameMax, "handshake frames fit the handshake bound");

constexpr char kHello[] = "AL1H", kWelcome[] = "AL1W", kInitiate[] = "AL1I", kReady[] = "AL1R",
               kError[] = "AL1E";
constexpr char kClientToServer[] = "AnnaLinkMSG C->S";
constexpr char kServerToClient[] = "AnnaLinkMSG S->C";

using Nonce = unsigned char[crypto_box_NONCEBYTES];

void fixed_nonce(Nonce n, const char* prefix16) {
  std::memcpy(n, prefix16, 16);
  std::memset(n + 16, 0, 8);
}

void nonce_with(Nonce n, const char* prefix8, const unsigned char* random16) {
  std::memcpy(n, prefix8, 8);
  std::memcpy(n + 8, random16, 16);
}

bool tagged(std::string_view frame, const char* tag, std::size_t size) {
  return frame.size() == size && std::memcmp(frame.data(), tag, 4) == 0;
}

const unsigned char* bytes(std::string_view s) {
  return reinterpret_cast<const unsigned char*>(s.data());
}

// The reason of an ERROR frame, printable and short.
std::string refusal_reason(std::string_view frame) {
  std::string why = "the worker refused the link: ";
  for (char c : frame.substr(4, 120)) why.push_back(c >= 32 && c < 127 ? c : '?');
  return why;
}

}  // namespace

bool secure_links_available() {
  static const bool ok = sodium_init() >= 0;
  return ok;
}

bool raw_key(const std::string& z85, RawKey* out) {
  std::string raw;
  if (!z85_to_raw(z85, &raw) || raw.size() != out->size()) return false;
  std::memcpy(out->data(), raw.data(), out->size());
  return true;
}

// ---- LinkCipher ---------------------------------------------------------------------------

LinkCipher::~LinkCipher() { sodium_memzero(key_, sizeof key_); }

void LinkCipher::init(const unsigned char key[32], bool client_side) {
  std::memcpy(key_, key, sizeof key_);
  send_prefix_ = client_side ? kClientToServer : kServerToClient;
  recv_prefix_ = client_side ? kServerToClient : kClientToServer;
  sent_ = received_ = 0;
}

void LinkCipher::seal(std::string_view plain, std::string* out) {
  const std::uint64_t counter = ++sent_;
  const std::size_t payload = 8 + plain.size() + kBox;
  const std::uint32_t n = static_cast<std::uint32_t>(payload);
  const std::size_t at = out->size();
  out->resize(at + kLinkHeaderBytes + payload);
  auto* p = reinterpret_cast<unsigned char*>(&(*out)[at]);
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>((n >> (8 * i)) & 0xff);
  for (int i = 0; i < 8; ++i) p[4 + i] = static_cast<unsigned char>((counter >> (8 * i)) & 0xff);
  Nonce nonce;
  std::memcpy(nonce, send_prefix_, 16);
  std::memcpy(nonce + 16, p + 4, 8);
  crypto_box_easy_afternm(p + 12, bytes(plain), plain.size(), nonce, key_);
}

LinkCipher::Open LinkCipher::open(std::string_view frame, std::string* plain) {
  if (frame.size() < kSealOverhead) return Open::kForged;
  const unsigned char* p = bytes(frame);
  std::uint64_t counter = 0;
  for (int i = 0; i < 8; ++i) counter |= static_cast<std::uint64_t>(p[i]) << (8 * i);
  if (counter != received_ + 1) return Open::kOutOfOrder;
  Nonce nonce;
  std::memcpy(nonce, recv_prefix_, 16);
  std::memcpy(nonce + 16, p, 8);
  plain->resize(frame.size() - kSealOverhead);
  if (crypto_box_open_easy_afternm(reinterpret_cast<unsigned char*>(&(*plain)[0]), p + 8,
                                   frame.size() - 8, nonce, key_) != 0) {
    plain->clear();
    return Open::kForged;
  }
  received_ = counter;
  return Open::kOk;
}

// ---- the server's handshake ---------------------------------------------------------------

LinkServerHandshake::LinkServerHandshake(const RawKey& server_public, const RawKey& server_secret)
    : server_public_(server_public), server_secret_(server_secret) {}

LinkServerHandshake::~LinkServerHandshake() { sodium_memzero(session_, sizeof session_); }

LinkServerHandshake::Step LinkServerHandshake::on_frame(std::string_view frame, std::string* reply,
                                                        std::string* why) {
  if (state_ == State::kHello) {
    if (!tagged(frame, kHello, kHelloBytes)) {
      *why = "not a link HELLO (" + std::to_string(frame.size()) + " bytes)";
      return Step::kFailed;
    }
    std::memcpy(client_ephemeral_.data(), frame.data() + 4, 32);
    Nonce nonce;
    fixed_nonce(nonce, "AnnaLinkHELLO---");
    unsigned char zeros[64];
    if (crypto_box_open_easy(zeros, bytes(frame) + 36, 64 + kBox, nonce, client_ephemeral_.data(),
                             server_secret_.data()) != 0 ||
        !sodium_is_zero(zeros, sizeof zeros)) {
      *why = "a HELLO not made for this worker's key";
      return Step::kFailed;
    }
    // Our ephemeral pair: only the session key outlives this call.
    unsigned char eph_public[32], eph_secret[32];
    crypto_box_keypair(eph_public, eph_secret);
    int rc = crypto_box_beforenm(session_, client_ephemeral_.data(), eph_secret);
    sodium_memzero(eph_secret, sizeof eph_secret);
    if (rc != 0) {
      *why = "a HELLO with a degenerate ephemeral key";
      return Step::kFailed;
    }
    unsigned char random16[16];
    randombytes_buf(random16, sizeof random16);
    nonce_with(nonce, "WELCOME-", random16);
    reply->resize(kWelcomeBytes);
    auto* out = reinterpret_cast<unsigned char*>(&(*reply)[0]);
    std::memcpy(out, kWelcome, 4);
    std::memcpy(out + 4, random16, 16);
    if (crypto_box_easy(out + 20, eph_public, 32, nonce, client_ephemeral_.data(),
                        server_secret_.data()) != 0) {
      *why = "a HELLO with a degenerate ephemeral key";
      return Step::kFailed;
    }
    state_ = State::kInitiate;
    return Step::kReply;
  }
  if (state_ == State::kInitiate) {
    if (!tagged(frame, kInitiate, kInitiateBytes)) {
      *why = "not a link INITIATE (" + std::to_string(frame.size()) + " bytes)";
      return Step::kFailed;
    }
    Nonce nonce;
    fixed_nonce(nonce, "AnnaLinkINITIATE");
    unsigned char plain[kInitiatePlain];
    if (crypto_box_open_easy_afternm(plain, bytes(frame) + 4, kInitiatePlain + kBox, nonce,
                                     session_) != 0) {
      *why = "an INITIATE that does not open with the session key";
      return Step::kFailed;
    }
    std::memcpy(client_.data(), plain, 32);
    nonce_with(nonce, "VOUCH---", plain + 32);
    unsigned char vouch[64];
    if (crypto_box_open_easy(vouch, plain + 48, 64 + kBox, nonce, client_.data(),
                             server_secret_.data()) != 0 ||
        sodium_memcmp(vouch, client_ephemeral_.data(), 32) != 0 ||
        sodium_memcmp(vouch + 32, server_public_.data(), 32) != 0) {
      *why = "an INITIATE whose key " + raw_to_z85(std::string_view(
                                            reinterpret_cast<const char*>(client_.data()), 32)) +
             " does not vouch for this connection";
      return Step::kFailed;
    }
    state_ = State::kDone;
    return Step::kAuthenticated;
  }
  *why = "a handshake frame after the handshake";
  return Step::kFailed;
}

std::string LinkServerHandshake::ready(LinkCipher* cipher) {
  std::string out(kReadyBytes, '\0');
  auto* p = reinterpret_cast<unsigned char*>(&out[0]);
  std::memcpy(p, kReady, 4);
  Nonce nonce;
  fixed_nonce(nonce, "AnnaLinkREADY---");
  crypto_box_easy_afternm(p + 4, p, 0, nonce, session_);
  cipher->init(session_, /*client_side=*/false);
  sodium_memzero(session_, sizeof session_);
  return out;
}

std::string LinkServerHandshake::refusal(const std::string& reason) {
  return std::string(kError, 4) + reason.substr(0, 120);
}

// ---- the client's handshake ---------------------------------------------------------------

LinkClientHandshake::LinkClientHandshake(const RawKey& client_public, const RawKey& client_secret,
                                         const RawKey& server_public)
    : client_public_(client_public), client_secret_(client_secret),
      server_public_(server_public) {}

LinkClientHandshake::~LinkClientHandshake() {
  sodium_memzero(ephemeral_secret_, sizeof ephemeral_secret_);
  sodium_memzero(session_, sizeof session_);
}

std::string LinkClientHandshake::hello() {
  crypto_box_keypair(ephemeral_public_.data(), ephemeral_secret_);
  std::string out(kHelloBytes, '\0');
  auto* p = reinterpret_cast<unsigned char*>(&out[0]);
  std::memcpy(p, kHello, 4);
  std::memcpy(p + 4, ephemeral_public_.data(), 32);
  unsigned char zeros[64] = {};
  Nonce nonce;
  fixed_nonce(nonce, "AnnaLinkHELLO---");
  // A degenerate server key makes no box: an empty HELLO, which the caller never sends.
  if (crypto_box_easy(p + 36, zeros, sizeof zeros, nonce, server_public_.data(),
                      ephemeral_secret_) != 0)
    return std::string();
  return out;
}

bool LinkClientHandshake::on_welcome(std::string_view frame, std::string* initiate,
                                     std::string* why) {
  if (frame.size() >= 4 && std::memcmp(frame.data(), kError, 4) == 0) {
    *why = refusal_reason(frame);
    return false;
  }
  if (!tagged(frame, kWelcome, kWelcomeBytes)) {
    *why = "not a link WELCOME (" + std::to_string(frame.size()) + " bytes)";
    return false;
  }
  Nonce nonce;
  nonce_with(nonce, "WELCOME-", bytes(frame) + 4);
  unsigned char server_ephemeral[32];
  if (crypto_box_open_easy(server_ephemeral, bytes(frame) + 20, 32 + kBox, nonce,
                           server_public_.data(), ephemeral_secret_) != 0) {
    *why = "a WELCOME not made with the worker's key";
    return false;
  }
  int rc = crypto_box_beforenm(session_, server_ephemeral, ephemeral_secret_);
  sodium_memzero(ephemeral_secret_, sizeof ephemeral_secret_);
  if (rc != 0) {
    *why = "a WELCOME with a degenerate ephemeral key";
    return false;
  }
  // The vouch: C' and S boxed with our long-term key, so the server knows C holds c.
  unsigned char vouched[64], random16[16];
  std::memcpy(vouched, ephemeral_public_.data(), 32);
  std::memcpy(vouched + 32, server_public_.data(), 32);
  randombytes_buf(random16, sizeof random16);
  unsigned char plain[kInitiatePlain];
  std::memcpy(plain, client_public_.data(), 32);
  std::memcpy(plain + 32, random16, 16);
  nonce_with(nonce, "VOUCH---", random16);
  if (crypto_box_easy(plain + 48, vouched, sizeof vouched, nonce, server_public_.data(),
                      client_secret_.data()) != 0) {
    *why = "the worker's server key is degenerate";
    return false;
  }
  initiate->resize(kInitiateBytes);
  auto* p = reinterpret_cast<unsigned char*>(&(*initiate)[0]);
  std::memcpy(p, kInitiate, 4);
  fixed_nonce(nonce, "AnnaLinkINITIATE");
  crypto_box_easy_afternm(p + 4, plain, sizeof plain, nonce, session_);
  return true;
}

bool LinkClientHandshake::on_ready(std::string_view frame, LinkCipher* cipher, std::string* why) {
  if (frame.size() >= 4 && std::memcmp(frame.data(), kError, 4) == 0) {
    *why = refusal_reason(frame);
    return false;
  }
  if (!tagged(frame, kReady, kReadyBytes)) {
    *why = "not a link READY (" + std::to_string(frame.size()) + " bytes)";
    return false;
  }
  Nonce nonce;
  fixed_nonce(nonce, "AnnaLinkREADY---");
  unsigned char empty[1];
  if (crypto_box_open_easy_afternm(empty, bytes(frame) + 4, kBox, nonce, session_) != 0) {
    *why = "a READY that does not open with the session key";
    return false;
  }
  cipher->init(session_, /*client_side=*/true);
  sodium_memzero(session_, sizeof session_);
  return true;
}

}  // namespace anna
