// CURVE credentials and keyed addresses. See curve.hpp for the contract.
#include "curve.hpp"

#include <cstdint>
#include <stdexcept>

// Implemented by libzmq 4.3 without the draft API; only its #define is a draft one.
#ifndef ZMQ_ZAP_ENFORCE_DOMAIN
#define ZMQ_ZAP_ENFORCE_DOMAIN 93
#endif

namespace anna {

namespace {

constexpr std::size_t kZ85KeyChars = 40;
constexpr std::size_t kRawKeyBytes = 32;

bool name_char(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
         c == '_' || c == '.' || c == '-';
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;  // upper case is not the convention: refused like any other character
}

// The first characters of a public key: enough to tell keys apart in a message.
std::string shown_key(const std::string& z85) {
  return "'" + z85.substr(0, 8) + (z85.size() > 8 ? "...'" : "'");
}

}  // namespace

bool z85_to_raw(const std::string& z85, std::string* raw) {
  if (z85.size() != kZ85KeyChars) return false;
  std::uint8_t out[kRawKeyBytes];
  if (zmq_z85_decode(out, z85.c_str()) == nullptr) return false;
  raw->assign(reinterpret_cast<const char*>(out), kRawKeyBytes);
  return true;
}

std::string raw_to_z85(std::string_view raw) {
  if (raw.size() != kRawKeyBytes) return "";
  char out[kZ85KeyChars + 1];
  if (zmq_z85_encode(out, reinterpret_cast<const std::uint8_t*>(raw.data()), raw.size()) == nullptr)
    return "";
  return std::string(out, kZ85KeyChars);
}

bool valid_role(const std::string& role) {
  if (role == kClusterRole) return true;
  const std::string prefix = kClientRolePrefix;
  if (role.compare(0, prefix.size(), prefix) != 0) return false;
  std::string name = role.substr(prefix.size());
  if (name.empty() || name.size() > 64 || name[0] == '.' || name[0] == '-') return false;
  for (char c : name)
    if (!name_char(c)) return false;
  return true;
}

void check_curve_keys(const CurveKeys& keys) {
  if (!keys.enabled()) {
    if (!keys.public_key.empty() || !keys.admitted.empty())
      throw std::invalid_argument(
          "node config: curve_public_key and curve_admitted need curve_secret_key");
    return;
  }
  std::string raw_secret, raw_public;
  if (!z85_to_raw(keys.secret_key, &raw_secret))
    throw std::invalid_argument("node config: curve_secret_key is not a 40-character Z85 key");
  if (!z85_to_raw(keys.public_key, &raw_public))
    throw std::invalid_argument("node config: curve_public_key is not a 40-character Z85 key");
  char derived[kZ85KeyChars + 1];
  if (zmq_curve_public(derived, keys.secret_key.c_str()) != 0 ||
      keys.public_key != std::string(derived, kZ85KeyChars))
    throw std::invalid_argument("node config: curve_public_key " + shown_key(keys.public_key) +
                                " is not the public key of curve_secret_key");
  if (keys.admitted.empty())
    throw std::invalid_argument("node config: authentication is on (curve_secret_key) but "
                                "curve_admitted admits no key");
  for (const auto& [key, role] : keys.admitted) {
    std::string raw;
    if (!z85_to_raw(key, &raw))
      throw std::invalid_argument("node config: curve_admitted key " + shown_key(key) +
                                  " is not a 40-character Z85 key");
    if (!valid_role(role))
      throw std::invalid_argument("node config: curve_admitted role of " + shown_key(key) +
                                  " must be \"cluster\" or \"client:NAME\"");
  }
}

bool split_keyed_address(const std::string& address, std::string* endpoint,
                         std::string* server_key_z85) {
  std::size_t mark = address.rfind(kAddressKeyMark);
  if (mark == std::string::npos) {
    *endpoint = address;
    server_key_z85->clear();
    return true;
  }
  std::size_t from = mark + std::char_traits<char>::length(kAddressKeyMark);
  if (address.size() - from != 2 * kRawKeyBytes) return false;
  std::string raw(kRawKeyBytes, '\0');
  for (std::size_t i = 0; i < kRawKeyBytes; ++i) {
    int hi = hex_value(address[from + 2 * i]), lo = hex_value(address[from + 2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    raw[i] = static_cast<char>((hi << 4) | lo);
  }
  *endpoint = address.substr(0, mark);
  *server_key_z85 = raw_to_z85(raw);
  return !server_key_z85->empty();
}

std::string keyed_address(const std::string& endpoint, const std::string& public_key_z85) {
  static const char kHex[] = "0123456789abcdef";
  std::string raw;
  if (!z85_to_raw(public_key_z85, &raw)) return endpoint;
  std::string out = endpoint + kAddressKeyMark;
  for (unsigned char c : raw) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 0xF]);
  }
  return out;
}

bool make_curve_server(void* socket, const CurveKeys& keys, const char* domain, std::string* why) {
  int one = 1;
  std::string d(domain);
  if (zmq_setsockopt(socket, ZMQ_CURVE_SERVER, &one, sizeof one) != 0 ||
      zmq_setsockopt(socket, ZMQ_CURVE_SECRETKEY, keys.secret_key.data(), keys.secret_key.size()) != 0 ||
      zmq_setsockopt(socket, ZMQ_CURVE_PUBLICKEY, keys.public_key.data(), keys.public_key.size()) != 0 ||
      zmq_setsockopt(socket, ZMQ_ZAP_DOMAIN, d.data(), d.size()) != 0 ||
      zmq_setsockopt(socket, ZMQ_ZAP_ENFORCE_DOMAIN, &one, sizeof one) != 0) {
    *why = std::string("CURVE server options: ") + zmq_strerror(zmq_errno());
    return false;
  }
  return true;
}

bool make_curve_client(void* socket, const CurveKeys& keys, const std::string& server_key_z85,
                       std::string* why) {
  if (zmq_setsockopt(socket, ZMQ_CURVE_SERVERKEY, server_key_z85.data(), server_key_z85.size()) != 0 ||
      zmq_setsockopt(socket, ZMQ_CURVE_PUBLICKEY, keys.public_key.data(), keys.public_key.size()) != 0 ||
      zmq_setsockopt(socket, ZMQ_CURVE_SECRETKEY, keys.secret_key.data(), keys.secret_key.size()) != 0) {
    *why = std::string("CURVE client options: ") + zmq_strerror(zmq_errno());
    return false;
  }
  return true;
}

}  // namespace anna
