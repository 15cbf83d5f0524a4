// Secured client links: the handshake and the per-frame encryption that let a client link
// (link.hpp) serve a cluster that authenticates with CURVE, without giving up authentication,
// confidentiality or integrity. Pure code: no sockets, no clocks (the callers bound time).
//
// The handshake follows the shape of CurveZMQ (RFC 26: HELLO, WELCOME, INITIATE, READY) over
// the link's framing (a 4-byte little-endian length, then the payload); each line below is one
// frame's payload. C/c and S/s are the client's and the server's long-term CURVE key pairs (the
// ones their ZeroMQ sockets use), C'/c' and S'/s' fresh ephemeral pairs of this connection,
// Box[X](A->B) a crypto_box of X made with A's secret key for B's public key:
//
//   HELLO    "AL1H" | C' | Box[64 zero bytes](C'->S)            nonce "AnnaLinkHELLO-----------"
//   WELCOME  "AL1W" | N16 | Box[S'](S->C')                       nonce "WELCOME-" | N16 (random)
//   INITIATE "AL1I" | Box[C | V16 | Box[C' | S](C->S)](C'->S')   nonces "AnnaLinkINITIATE" | 0^8,
//                                                                 "VOUCH---" | V16 (random)
//   READY    "AL1R" | Box[](S'->C')                              nonce "AnnaLinkREADY---" | 0^8
//   ERROR    "AL1E" | reason (plain text, then the server closes the connection)
//
//   * The client proves it holds c (the "vouch" binds C' and S to C) and the server decides on
//     C exactly as its ZAP handler would (zap.hpp, zap_decision), so a link's sender has the
//     key's role and rights as over ZeroMQ. The server proves it holds s (only it can make
//     WELCOME for C'); the client takes S from the worker address it already trusts for
//     ZeroMQ, so a peer that does not hold s cannot complete a handshake with it.
//   * Forward secrecy: the session key is crypto_box_beforenm(S', c') = (C', s'); c' and s'
//     are wiped as soon as it is computed, and the key when the link closes.
//   * A HELLO is longer than a WELCOME (no amplification), and a server answers a HELLO only
//     when its box opens (a peer without S learns nothing).
//
// After READY every frame in either direction is a MESSAGE:
//   counter (8 bytes, little-endian) | Box_k[payload]   nonce "AnnaLinkMSG C->S" or
//                                                        "AnnaLinkMSG S->C" | counter
// with k the session key. Counters start at 1 and go up by exactly one per frame and
// direction (the stream is ordered), so a replayed, reordered, dropped or tampered frame fails
// LinkCipher::open and the caller closes the link.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace anna {

using RawKey = std::array<unsigned char, 32>;

constexpr std::size_t kSealOverhead = 8 + 16;      // the counter and the box's MAC
constexpr std::size_t kHandshakeFrameMax = 256;    // the largest handshake frame either side reads

// libsodium's one-time initialisation (thread-safe); false when it cannot start.
bool secure_links_available();
// A Z85 key (curve.hpp) as raw bytes; false when malformed.
bool raw_key(const std::string& z85, RawKey* out);

// One direction's counter and the shared session key; belongs to one connection.
class LinkCipher {
 public:
  enum class Open { kOk, kOutOfOrder, kForged };
  LinkCipher() = default;
  ~LinkCipher();
  LinkCipher(const LinkCipher&) = delete;
  LinkCipher& operator=(const LinkCipher&) = delete;
  void init(const unsigned char key[32], bool client_side);
  // Appends a whole link frame (length header included) carrying `plain` sealed.
  void seal(std::string_view plain, std::string* out);
  // Opens one MESSAGE payload into *plain; kOutOfOrder when its counter is not the next one,
  // kForged when it is malformed or its box does not open.
  Open open(std::string_view frame, std::string* plain);

 private:
  unsigned char key_[32] = {};
  const char* send_prefix_ = nullptr;
  const char* recv_prefix_ = nullptr;
  std::uint64_t sent_ = 0, received_ = 0;
};

// The server's side of one connection's handshake.
class LinkServerHandshake {
 public:
  enum class Step {
    kReply,          // *reply is the WELCOME to send; feed the next frame
    kAuthenticated,  // the client proved client_key(): decide, then ready() or refusal()
    kFailed,         // not a handshake, or a box that does not open: close without answer
  };
  LinkServerHandshake(const RawKey& server_public, const RawKey& server_secret);
  ~LinkServerHandshake();
  LinkServerHandshake(const LinkServerHandshake&) = delete;
  LinkServerHandshake& operator=(const LinkServerHandshake&) = delete;

  Step on_frame(std::string_view frame, std::string* reply, std::string* why);
  const RawKey& client_key() const { return client_; }
  // The READY payload; *cipher starts sealing and opening for the server side.
  std::string ready(LinkCipher* cipher);
  static std::string refusal(const std::string& reason);

 private:
  enum class State { kHello, kInitiate, kDone };
  const RawKey& server_public_;
  const RawKey& server_secret_;
  State state_ = State::kHello;
  RawKey client_ephemeral_{}, client_{};
  unsigned char session_[32] = {};
};

// The client's side: hello(), then on_welcome() and on_ready() with the frames the server sent.
class LinkClientHandshake {
 public:
  LinkClientHandshake(const RawKey& client_public, const RawKey& client_secret,
                      const RawKey& server_public);
  ~LinkClientHandshake();
  LinkClientHandshake(const LinkClientHandshake&) = delete;
  LinkClientHandshake& operator=(const LinkClientHandshake&) = delete;

  std::string hello();
  // false with *why set (a refusal's reason, or why the frame is not the server's answer).
  bool on_welcome(std::string_view frame, std::string* initiate, std::string* why);
  bool on_ready(std::string_view frame, LinkCipher* cipher, std::string* why);

 private:
  const RawKey& client_public_;
  const RawKey& client_secret_;
  const RawKey& server_public_;
  RawKey ephemeral_public_{};
  unsigned char ephemeral_secret_[32] = {};
  unsigned char session_[32] = {};
};

}  // namespace anna
