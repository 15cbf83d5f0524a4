// CURVE credentials of a kernel process and the platform's conventions around them; the C++
// counterpart of runtime/auth.py (that module's contract is the reference).
//
// Contract:
//   * CurveKeys holds a process' own key pair (Z85, 40 characters each) and the public keys
//     (Z85) it admits, each with its role: "cluster" or "client:NAME" (NAME: 1-64 of
//     [A-Za-z0-9_.-], not starting with '.' or '-'). An empty secret key means authentication
//     is off: every socket is plain, exactly as without this file.
//   * check_curve_keys throws std::invalid_argument naming the problem when the keys are not
//     40-character Z85 strings, the public key is not the secret key's, a role is malformed,
//     or keys are admitted while authentication is off. A secret key never appears in the
//     message.
//   * Addresses carry their server's key: "tcp://host:port#k=<64 lowercase hex digits of the
//     32-byte key>". split_keyed_address returns the endpoint and the key in Z85 ("" when the
//     address has no mark), or false when the mark is not followed by exactly 64 lowercase hex
//     digits; keyed_address builds one.
//   * ZAP domains: kZapDomain ("cloudburst") admits every admitted key, kClusterDomain
//     ("cloudburst.cluster") only keys whose role is "cluster". make_curve_server makes a
//     socket (before it binds) a CURVE server of one domain with ZMQ_ZAP_ENFORCE_DOMAIN set, so
//     a context without a ZAP handler refuses every peer (fails closed);
//     make_curve_client makes one (before it connects) a CURVE client of a server key.
//   * sender_role(msg) is the ZAP User-Id of the peer that sent a received frame, or nullptr
//     when it has none: a plain socket, or an inproc peer (this libzmq runs no security
//     handshake over inproc, and only this process can reach a context's inproc endpoints).
//   * client_may_send(kind): the only kind a client key may send a KVS worker is "request";
//     every other kind is cluster-only.
#pragma once

#include <zmq.h>

#include <map>
#include <string>
#include <string_view>

namespace anna {

inline constexpr const char* kZapDomain = "cloudburst";
inline constexpr const char* kClusterDomain = "cloudburst.cluster";
inline constexpr const char* kClusterRole = "cluster";
inline constexpr const char* kClientRolePrefix = "client:";
inline constexpr const char* kAddressKeyMark = "#k=";

struct CurveKeys {
  std::string public_key;  // Z85; empty: authentication off
  std::string secret_key;  // Z85; never logged
  std::map<std::string, std::string> admitted;  // Z85 public key -> role
  bool enabled() const { return !secret_key.empty(); }
};

void check_curve_keys(const CurveKeys& keys);
bool valid_role(const std::string& role);

bool split_keyed_address(const std::string& address, std::string* endpoint,
                         std::string* server_key_z85);
std::string keyed_address(const std::string& endpoint, const std::string& public_key_z85);

// Z85 <-> raw 32-byte keys; false/"" on a malformed input.
bool z85_to_raw(const std::string& z85, std::string* raw);
std::string raw_to_z85(std::string_view raw);

// Socket options; false with *why set when ZeroMQ refuses one.
bool make_curve_server(void* socket, const CurveKeys& keys, const char* domain, std::string* why);
bool make_curve_client(void* socket, const CurveKeys& keys, const std::string& server_key_z85,
                       std::string* why);

inline const char* sender_role(zmq_msg_t* msg) { return zmq_msg_gets(msg, "User-Id"); }
inline bool client_may_send(std::string_view kind) { return kind == "request"; }

}  // namespace anna
