// The kernel's ZAP handler: who may complete a CURVE handshake with a socket of one ZeroMQ
// context (RFC 27; the C++ counterpart of runtime/auth.py's Authenticator).
//
// Contract:
//   * ZapHandler(ctx, admitted, name) answers the ZAP requests of every CURVE server socket of
//     `ctx` from one thread, bound to inproc://zeromq.zap.01 on that context. start() must run
//     before any CURVE server socket of the context binds, and stop() before zmq_ctx_term.
//     start() binds in the calling thread and throws std::runtime_error when the endpoint is
//     taken (the context already has a handler); start() after start() throws. stop() is
//     idempotent and returns once the thread has closed its sockets (the thread never blocks
//     but in its poll, which the stop message ends). A handshake that starts after stop() is
//     refused: its server enforces its ZAP domain and finds no handler (fails closed).
//   * Decisions: a CURVE client key in `admitted` (Z85 public key -> role) is accepted with
//     its role as the ZAP User-Id when the domain is "cloudburst"; in domain
//     "cloudburst.cluster" only a role "cluster" is. Everything else (an unknown key, a
//     client key on a cluster-only socket, another mechanism, another domain, a malformed
//     request) is refused with status 400 (500 for a malformed request or version).
//   * Handshakes that fail before ZAP is asked (a plain peer on a CURVE socket, a client using
//     the wrong server key, a peer closing the connection mid-handshake) are seen through the
//     socket monitors named by watch(endpoint) (before start(); each is the endpoint a socket
//     passes to zmq_socket_monitor with kMonitorEvents, bound before or after start(), inproc
//     connects in either order). Both failure events count: when a plain peer meets a CURVE
//     server, libzmq 4.3.4 reports either a mechanism mismatch or, when the peer noticed first
//     and hung up, a failure "without detail" (EPIPE / ECONNRESET), and the plain peer does
//     not try again.
//   * Every refusal is logged at WARNING, then counted (refused(); whoever sees the count can
//     see the line): with the peer's address and key for a ZAP refusal, with the refusing
//     socket's endpoint for a handshake failure (ZeroMQ does not report the peer's address
//     there). At most one line per (address, key or reason) every kLogEverySeconds; the rest
//     are only counted.
//     accepted() counts the handshakes admitted. Both are safe to read from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace anna {

// The decision the handler makes for a CURVE client key (32 raw bytes) in `domain`, shared with
// secured client links (secure_link.hpp): the key's role when it is admitted there, or "" with
// *why set (the ZAP status text: "unknown public key", "cluster keys only", ...).
std::string zap_decision(const std::map<std::string, std::string>& admitted_raw,
                         const std::string& domain, const std::string& raw_key, std::string* why);

class ZapHandler {
 public:
  static constexpr const char* kEndpoint = "inproc://zeromq.zap.01";
  static constexpr int kLogEverySeconds = 10;
  // ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL
  static constexpr int kMonitorEvents = 0x2000 | 0x0800;

  ZapHandler(void* ctx, std::map<std::string, std::string> admitted, std::string name);
  ~ZapHandler();
  ZapHandler(const ZapHandler&) = delete;
  ZapHandler& operator=(const ZapHandler&) = delete;

  void watch(const std::string& monitor_endpoint);
  void start();
  void stop();
  std::uint64_t refused() const { return refused_.load(std::memory_order_relaxed); }
  std::uint64_t accepted() const { return accepted_.load(std::memory_order_relaxed); }

 private:
  void run(void* zap, void* control, std::vector<void*> monitors);
  std::vector<std::string> answer(const std::vector<std::string>& request);
  void on_monitor_event(const std::vector<std::string>& event);
  void refuse(const std::string& peer, const std::string& key_or_reason, const std::string& what);

  void* ctx_;
  std::map<std::string, std::string> admitted_;  // raw 32-byte key -> role
  std::string name_;
  std::vector<std::string> monitors_;
  std::string stop_endpoint_;
  std::atomic<std::uint64_t> refused_{0}, accepted_{0};
  std::map<std::pair<std::string, std::string>, std::int64_t> logged_;  // handler thread only
  std::thread thread_;
  bool started_ = false;
};

}  // namespace anna
