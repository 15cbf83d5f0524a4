// The KVS node's I/O shell: one pinned thread per worker around a WorkerCore.
//
// Contract:
//   * Node(config) validates nothing beyond NodeConfig; start() starts `threads` worker
//     threads. Each binds its own PULL socket on tcp://<ip>:* (its address is read back) and
//     on inproc://anna-<node_id>-<tid>, opens its store (MemoryStore, or a DiskStore at
//     data_dir/<node_id>/<tid>), and pins itself to core (tid % hardware_concurrency) when
//     pin_threads (a pinning failure is logged, not fatal). start() returns once every worker
//     is bound, or throws std::runtime_error (everything already cleaned up) if one fails or
//     does not report within 30 s. start() after start() throws.
//   * Bounds: a worker's PULL socket accepts frames up to max_frame_bytes(config)
//     (kMaxFrameBytes, 16 MiB, node_config.hpp); ZeroMQ disconnects a peer that sends a larger
//     one before buffering it, during the handshake too. A message is [kind][payload], the
//     payload possibly in several frames that the worker joins (at most
//     max_message_bytes(config): max_value_bytes + kFrameHeadroomBytes; a larger message is
//     dropped and logged), and the workers send payloads larger than a frame the same way.
//     A worker keeps at most max_push_sockets PUSH sockets (push_cache.hpp), lowered at start() by push_sockets_for() so that every
//     worker's sockets, open and lingering, fit in what the process' soft descriptor limit
//     leaves after the descriptors already open and a reserve (a quarter of the limit, at
//     least kMinReservedFds) for everything else; the context's ZMQ_MAX_SOCKETS is set to hold
//     them all and no more. cache_descriptors() is what the workers' caches may hold in all
//     (a process hosting the node keeps it out of its own sockets' budget).
//   * A worker loop: zmq_poll with a timeout (at most 50 ms, and never past the next epoch)
//     on the PULL socket's ZMQ_FD (not the socket: no mailbox round before and after each
//     wait) and the client links; the socket is read until it has nothing left before the
//     loop waits on that descriptor again; then drain up to 1024 messages, each [kind][payload] or, for a client request that fits
//     one frame, [payload] alone (kind "request" implied: one CURVE box less per request);
//     malformed messages (no frame, unknown kind, unparsable payload) are logged and dropped.
//     The answers of a batch are sent when it ends, or once 64 messages or 1 MiB wait: the
//     I/O thread is woken once per batch rather than once per answer. Every
//     gossip_period_ms the WorkerCore's end_epoch() runs (gossip + subscription UPDATEs).
//     Outgoing messages go through the thread's own PushCache; same-node peers over inproc.
//     An answer to a new address that the cache could only open by closing a socket used
//     within push_handshake_ms (its peer's handshake may still be under way) is held, with
//     the later messages to that address, and the worker reads no request until it is sent
//     (waiting in steps that end at the next epoch, after 50 ms at most): a flood of new
//     response addresses is slowed to max_push_sockets per push_handshake_ms instead of
//     cutting new peers' handshakes short. A stopping worker holds nothing.
//     No locks or atomics on the request path: a stop flag is read once per loop turn.
//   * Capacity emulation (config.service_rate > 0; DESIGN.md "Capacity emulation"): each
//     owned client GET/PUT/DELETE tuple a worker serves (WorkerCore::period_requests(); not
//     gossip, membership, hand-off, fetches or WRONG_OWNER answers) takes at least
//     1/service_rate s of its time: after serving one, the worker does not read its socket
//     again until its running "next free" time (max(next free, the message's start) + tuples /
//     rate), sleeping until then in steps that end at the next epoch, after 50 ms at most, and
//     re-checking the stop flag and report requests in between. That time counts as busy.
//     Requests queue in the PULL socket meanwhile. service_rate 0: none of this (one branch
//     per message on a constant flag).
//   * Client links (config.client_links; link.hpp, worker_links.hpp; with CURVE each link
//     first runs the secured handshake with the node's keys, secure_link.hpp): each
//     worker also listens on a free TCP port of ip and serves connected clients in the same
//     poll loop: a request read from a link is handled as a "request" and the answers to its
//     response_address that handling produces at once are written back on that link (later
//     ones, e.g. a deferred GET's, go over ZeroMQ). Its answers to client requests received
//     over ZeroMQ carry KeyResponse.link_address so clients find the link. Off with
//     capacity emulation (service_rate > 0), which paces the ZeroMQ socket only.
//   * worker_addresses() returns the tcp addresses by thread id (empty before start()).
//   * stop() flushes each worker's last epoch, stops and joins the threads, closes stores and
//     the ZMQ context; returns within ~a poll timeout plus store close time. Idempotent; the
//     destructor calls it.
//   * stats() returns each worker's counters as of its last epoch (published off the request
//     path under a mutex).
//   * take_report(timeout_ms) closes every worker's report period (DESIGN.md "Statistics"): it
//     asks the workers (an atomic generation counter each worker reads once per loop turn, so
//     within ~a poll timeout), waits until each has published its WorkerCore::take_report()
//     plus its busy time and the period's wall time (steady_clock; busy = time spent handling
//     message batches and epochs), and returns them by thread id. It throws
//     std::runtime_error if the node is not running or a worker does not answer in time.
//     One reader at a time: concurrent callers may receive the same period's reports.
//   * Authentication (config.curve enabled; DESIGN.md "Authentication"): start() first starts
//     the node's ZAP handler (zap.hpp) on the node's context, admitting config.curve.admitted,
//     then every worker's PULL socket is bound as a CURVE server of domain "cloudburst"
//     (cluster and client keys complete the handshake, counted in auth_accepted; anything else
//     is refused there, logged and counted in auth_refused). worker_addresses() then carry the server key
//     ("tcp://ip:port#k=<hex>"), and so does each worker's own address in its core. Each
//     message's sender role is its ZAP User-Id: a client key ("client:NAME") may send only
//     kind "request"; any other kind from a client is dropped before the core sees it, logged
//     (at most kMaxAuthWarningsPerSecond lines a second per worker) and counted in
//     auth_dropped. A message without a User-Id came over inproc from this node's own workers
//     (ZeroMQ runs no handshake there, and no other process can reach the context's inproc
//     endpoints): it is the cluster's. Outgoing pushes are CURVE clients (push_cache.hpp).
//     stop() stops the ZAP handler after the workers and before terminating the context.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "node_config.hpp"
#include "push_cache.hpp"
#include "worker_core.hpp"

namespace anna {

// What Node::stats() reports for one worker: its core's counters and the shell's.
struct NodeWorkerStats {
  WorkerStats core;
  std::uint64_t auth_dropped = 0;  // cluster-only kinds from client keys, dropped unprocessed
  std::uint64_t push_refused = 0;  // outgoing messages refused for their address (malformed,
                                   // or without a server key while authentication is on)
  std::uint64_t auth_refused = 0;   // node-wide: handshakes refused (the same in every worker)
  std::uint64_t auth_accepted = 0;  // node-wide: handshakes admitted (the same in every worker)
  std::uint64_t wal_syncs = 0;      // write-ahead log syncs of a disk worker's store (store.hpp)
  std::uint64_t wal_sync_failures = 0;
  // Client links (link.hpp; config.client_links): open now, accepted and
  // refused (beyond the bound) so far, closed for a fault, and requests received over them.
  std::uint64_t links_open = 0, links_accepted = 0, links_refused = 0, links_dropped = 0;
  std::uint64_t links_unix = 0;  // of links_accepted, over the Unix-domain socket
  std::uint64_t link_requests = 0;
  // Secured links: handshakes that failed, stalled or presented a key the node does not admit.
  std::uint64_t links_auth_refused = 0;
};

// What Node::take_report() returns for one worker: its core's period and the shell's timing.
struct NodeWorkerReport {
  PeriodReport core;
  std::uint64_t busy_ns = 0;    // time spent processing messages and epochs this period
  std::uint64_t period_ns = 0;  // wall time of the period (steady_clock)
  double occupancy = 0;         // busy_ns / period_ns, clamped to [0, 1]
};

class Node {
 public:
  static constexpr int kMaxAuthWarningsPerSecond = 10;

  explicit Node(NodeConfig config);
  ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  void start();
  void stop();
  std::vector<std::string> worker_addresses() const;
  std::vector<NodeWorkerStats> stats() const;
  std::vector<NodeWorkerReport> take_report(int timeout_ms = 5000);
  const NodeConfig& config() const { return config_; }
  bool running() const;
  // Each worker's socket capacity after start() (max_push_sockets, possibly lowered).
  std::size_t push_sockets() const { return push_sockets_; }
  // The most descriptors every worker's PUSH socket cache holds together (after start()).
  std::size_t cache_descriptors() const {
    return static_cast<std::size_t>(config_.threads) * PushCache::descriptors_for(push_sockets_);
  }

  struct Shared;  // implementation detail: the state handed to worker threads

 private:
  void stop_locked();

  NodeConfig config_;
  mutable std::mutex mu_;  // start/stop/addresses; never taken by workers on the request path
  bool started_ = false;
  bool stopped_ = false;
  std::shared_ptr<Shared> shared_;
  std::vector<std::thread> threads_;
  std::vector<std::string> addresses_;
  std::size_t push_sockets_ = 0;
};

// Descriptors left to everything but the workers' socket caches: a quarter of the limit, at
// least this many.
constexpr std::uint64_t kMinReservedFds = 64;
// A worker keeps at least this many PUSH sockets however low the limit.
constexpr std::size_t kMinPushSockets = 16;
// The PUSH sockets each of cfg.threads workers may keep (at most cfg.max_push_sockets) when the
// process may open `limit` descriptors and has `in_use` open: every worker's
// PushCache::descriptors_for() fits in limit - in_use - reserve (see the contract).
std::size_t push_sockets_for(const NodeConfig& cfg, std::uint64_t limit, std::size_t in_use);

// The client links each of cfg.threads workers keeps open (at most
// WorkerLinks::kDefaultMaxLinks, at least 4) when the process may open `limit` descriptors:
// together half of the reserve push_sockets_for() leaves, so links never take the
// descriptors the node's ZeroMQ sockets need.
std::size_t links_for(const NodeConfig& cfg, std::uint64_t limit);

// Pins the calling thread to one core; returns false (with errno-style reason) on failure.
bool pin_current_thread(int core, std::string* why);

}  // namespace anna
