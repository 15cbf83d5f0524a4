// The Anna client's native transport: what one `anna_core.Client` sends and receives, in C++,
// so that a request costs the Python caller one call with the GIL released.
//
// Contract:
//   * ClientTransport(ip, keys, max_answer_bytes, max_sockets) owns a private ZeroMQ context,
//     one PULL socket bound on a free tcp port of `ip` (its `address()`, carrying the public
//     key when authentication is on) and a PushCache (push_cache.hpp) of at most
//     `max_sockets` PUSH sockets, one per destination. Throws std::invalid_argument for bad
//     keys or limits and std::runtime_error when the socket cannot be bound.
//   * Authentication is exactly the Python client's (runtime/auth.py): with keys, the PULL
//     socket is a CURVE server of the cluster-only ZAP domain, answered by a ZapHandler
//     (zap.hpp) on the private context that admits only the keys in `keys.admitted` whose
//     role is "cluster"; every PUSH socket is a CURVE client of the server key its address
//     carries, and an address without a key is refused (send returns false). Without keys
//     everything is plain.
//   * Bounds: the PULL socket refuses a frame above kMaxFrameBytes (ZMQ_MAXMSGSIZE, from the
//     handshake on) and holds at most kRcvHwm messages; an answer (all its frames joined)
//     above `max_answer_bytes` is read to its end and dropped, counted in oversize(), and the
//     size of the last one is kept (last_oversize()) so a timeout can say why.
//   * send(address, kind, payload): one message, [kind][payload parts] or, with an empty
//     kind, [payload parts] (parts of kFramePartBytes, as every kernel sender); never blocks;
//     false when it was not queued.
//   * collect(ids, id_field, deadline, enough, out): waits until `enough` of the request ids
//     in `ids` are answered, the deadline passes, or a signal interrupts the wait (then it
//     returns kInterrupted and the caller checks for it and calls again). An answer is matched
//     by the top-level length-delimited protobuf field `id_field` of its payload (the
//     request_id of the expected message type), read without parsing the rest; answers to
//     other ids (stale) and payloads that are not protobuf are dropped and counted
//     (stale(), malformed()). An id answered twice is kept once.
//   * One thread at a time (the Python client is not thread-safe, and its binding keeps it
//     so); close() is idempotent and never waits for unsent messages (linger 0).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "curve.hpp"
#include "push_cache.hpp"
#include "zap.hpp"

namespace anna {

class ClientTransport {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr int kRcvHwm = 100000;
  enum class Wait { kDone, kDeadline, kInterrupted, kClosed };

  ClientTransport(const std::string& ip, CurveKeys keys, std::size_t max_answer_bytes,
                  std::size_t max_sockets);
  ~ClientTransport();
  ClientTransport(const ClientTransport&) = delete;
  ClientTransport& operator=(const ClientTransport&) = delete;

  const std::string& address() const { return address_; }
  bool send(const std::string& address, const std::string& kind, const std::string& payload);
  Wait collect(const std::vector<std::string>& ids, int id_field, Clock::time_point deadline,
               std::size_t enough, std::vector<std::pair<std::string, std::string>>* out);
  void close();
  bool closed() const { return ctx_ == nullptr; }

  std::uint64_t stale() const { return stale_; }
  std::uint64_t malformed() const { return malformed_; }
  std::uint64_t oversize() const { return oversize_; }
  std::size_t last_oversize() const { return last_oversize_; }
  std::uint64_t auth_refused() const { return zap_ ? zap_->refused() : 0; }
  std::uint64_t push_refused() const { return push_ ? push_->refused() : 0; }
  std::size_t max_answer_bytes() const { return max_answer_bytes_; }

  // The value of the top-level length-delimited field `field` of a protobuf payload (the last
  // one, as protobuf parses), or false when the payload is not protobuf or has no such field.
  static bool find_field(const char* data, std::size_t size, int field, std::string* value);

 private:
  // Reads one whole message if one is waiting; false when none is.
  bool recv_one(std::string* payload, bool* dropped);

  void* ctx_ = nullptr;
  void* pull_ = nullptr;
  std::unique_ptr<ZapHandler> zap_;
  std::unique_ptr<PushCache> push_;
  std::string address_;
  std::size_t max_answer_bytes_;
  std::uint64_t stale_ = 0, malformed_ = 0, oversize_ = 0;
  std::size_t last_oversize_ = 0;
};

}  // namespace anna
