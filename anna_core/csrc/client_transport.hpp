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
//   * Client links (link.hpp): an answer received over ZeroMQ that carries
//     KeyResponse.link_address (a tcp address on the responder's own host, with its
//     Unix-domain path when it has one: link.hpp) records it for its
//     responder (at most kMaxAdvertised remembered). A later send of a request (empty kind)
//     to that worker starts a link to it (at most kMaxLinks open) and goes over ZeroMQ
//     itself: a link is set up without blocking, while collect() waits, and carries requests
//     only once the worker has shown that it serves it. With keys the link is secured
//     (secure_link.hpp): the transport runs the handshake with its own key pair and the
//     server key of the worker's keyed address (the one its ZeroMQ path trusts), and the
//     worker's READY is that sign; a worker address without a key gets no link. A plain link
//     sends one empty GET (request id kLinkProbeId) and is ready when the worker answers it on
//     the link. So a request never waits on a connection the worker has not accepted (the
//     kernel completes a connection into the listen backlog even when the worker cannot
//     accept it, e.g. at its descriptor limit). A link not ready within kLinkConnectMs for
//     the connect plus kLinkHandshakeMs for the handshake or probe, or refused, closed or
//     failing its handshake meanwhile, is closed and that link address is not tried again for
//     kLinkRetryMs, doubling with each failure in a row up to kLinkRetryMaxMs (at most
//     kMaxAdvertised remembered). A ready link that fails later (closed, a write not done
//     within kLinkWriteMs, an answer above max_answer_bytes, a frame that does not open) is
//     closed, and the requests sent on it and not answered yet (up to kMaxLinkPending) are
//     sent again over ZeroMQ (a lattice merge, a read, or a timestamped delete: the same
//     effect when applied twice); one that failed before its first answer is not tried again
//     for the same while.
//   * Late answers: keep_late(id) names a request whose wait ended without its answer but
//     that the caller may wait for again (key_request, then key_wait). Its answer, arriving
//     while collect() waits for other ids, is kept (at most kMaxLate ids and kMaxLateBytes)
//     for the next collect() that asks for it, instead of being dropped as stale.
//   * One thread at a time (the Python client is not thread-safe, and its binding keeps it
//     so); close() is idempotent and never waits for unsent messages (linger 0).
#pragma once

#include <chrono>
#include <deque>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "curve.hpp"
#include "link.hpp"
#include "push_cache.hpp"
#include "secure_link.hpp"
#include "zap.hpp"

namespace anna {

class ClientTransport {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr int kRcvHwm = 100000;
  static constexpr std::size_t kMaxLinks = 64;
  static constexpr std::size_t kMaxAdvertised = 4096;
  static constexpr int kLinkConnectMs = 200;
  static constexpr int kLinkHandshakeMs = 1000;
  static constexpr int kLinkRetryMs = 2000;
  static constexpr int kLinkRetryMaxMs = 60000;
  static constexpr std::size_t kMaxLate = 64;
  static constexpr std::size_t kMaxLateBytes = std::size_t{16} << 20;
  static constexpr int kLinkWriteMs = 1000;
  static constexpr std::size_t kMaxLinkPending = 1024;
  static constexpr int kRequestIdField = 4;  // KeyRequest.request_id
  static constexpr int kAnswerIdField = 3;   // KeyResponse.request_id
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
  // See "Late answers" in the contract.
  void keep_late(const std::string& id);

  std::uint64_t stale() const { return stale_; }
  std::uint64_t malformed() const { return malformed_; }
  std::uint64_t oversize() const { return oversize_; }
  std::size_t last_oversize() const { return last_oversize_; }
  std::uint64_t auth_refused() const { return zap_ ? zap_->refused() : 0; }
  std::uint64_t push_refused() const { return push_ ? push_->refused() : 0; }
  std::size_t max_answer_bytes() const { return max_answer_bytes_; }
  std::size_t links_open() const { return links_.size(); }  // ready or being set up
  std::size_t links_unix() const;  // of them, over a Unix-domain socket (link.hpp)
  std::uint64_t link_requests() const { return link_requests_; }
  std::uint64_t link_answers() const { return link_answers_n_; }
  std::uint64_t link_failures() const { return link_failures_; }
  std::uint64_t link_resent() const { return link_resent_; }

  // The value of the top-level length-delimited field `field` of a protobuf payload (the last
  // one, as protobuf parses), or false when the payload is not protobuf or has no such field.
  static bool find_field(const char* data, std::size_t size, int field, std::string* value);

 private:
  struct Link {
    enum class State { kConnecting, kHandshake, kReady };
    int fd = -1;
    State state = State::kConnecting;
    Clock::time_point deadline{};  // of the connect, then of the handshake or probe
    LinkReader reader;
    std::uint64_t answers = 0;
    // Requests sent on the link and not answered yet (request id, payload), oldest first, at
    // most kMaxLinkPending: resent over ZeroMQ if the link fails.
    std::deque<std::pair<std::string, std::string>> unanswered;
    std::unique_ptr<LinkCipher> cipher;  // secured links (with keys)
    RawKey server{};                     // the worker's key (secured links)
    std::unique_ptr<LinkClientHandshake> handshake;  // until READY (secured links)
    bool welcomed = false;               // WELCOME read, INITIATE sent
    std::string target;                  // the link address
    bool unix_domain = false;            // over its Unix-domain socket (same host)
    explicit Link(std::size_t max_frame) : reader(max_frame) {}
  };
  struct Backoff {
    Clock::time_point until;
    int failures = 0;
  };
  // The ready link to a worker, or nullptr; starts setting one up when one is advertised.
  Link* link_for(const std::string& address);
  void start_link(const std::string& address);
  // One step of a link being set up (its descriptor is ready, or its deadline is checked).
  void advance_link(const std::string& address, short revents);
  // Closes a link that did not get ready and keeps its address off for a while.
  void fail_setup(const std::string& address, const std::string& why);
  void back_off(const std::string& target);
  bool backed_off(const std::string& target);
  // Reads one whole message if one is waiting; false when none is.
  bool recv_one(std::string* payload, bool* dropped);
  // Closes a failed link and sends its unanswered requests again over ZeroMQ.
  void fail_link(const std::string& address);
  // Reads what a link has (its whole frames go to link_answers_); closes it on EOF or error.
  void read_link(const std::string& address);
  // Records a link a ZeroMQ answer advertises (see the contract).
  void learn_link(const std::string& payload);
  // Polls the links being set up without waiting, and advances them.
  void pump_setups();
  std::size_t setting_up_ = 0;  // links not ready yet

  void* ctx_ = nullptr;
  void* pull_ = nullptr;
  int pull_fd_ = -1;  // its ZMQ_FD
  std::unique_ptr<ZapHandler> zap_;
  std::unique_ptr<PushCache> push_;
  std::string address_;
  std::size_t max_answer_bytes_;
  std::uint64_t stale_ = 0, malformed_ = 0, oversize_ = 0;
  std::size_t last_oversize_ = 0;
  bool links_enabled_ = true;
  bool secured_;                 // keys: links run the handshake and seal every frame
  RawKey public_{}, secret_{};   // this client's key pair, raw (secured links)
  std::string opened_;           // the last opened answer frame
  std::unordered_map<std::string, std::string> advertised_;  // worker address -> link address
  std::unordered_map<std::string, Backoff> no_link_;  // link addresses that failed, until when
  std::unordered_map<std::string, std::unique_ptr<Link>> links_;  // by worker address
  std::unordered_map<std::string, std::string> link_targets_;    // worker -> its link address
  std::vector<std::string> link_answers_;  // whole frames read, not yet matched (FIFO)
  std::size_t link_answers_taken_ = 0;
  std::vector<zmq_pollitem_t> items_;
  std::vector<std::string> polled_;  // the worker address of items_[1..]
  std::vector<std::pair<std::string, short>> events_;  // polled links' events, copied
  std::uint64_t link_requests_ = 0, link_answers_n_ = 0, link_failures_ = 0, link_resent_ = 0;
  std::deque<std::string> late_ids_;                        // keep_late(), oldest first
  std::deque<std::string> late_answers_;                    // answers to them, kept
  std::size_t late_bytes_ = 0;
};

}  // namespace anna
