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
//     (max_value_bytes + kFrameHeadroomBytes, node_config.hpp); ZeroMQ disconnects a peer that
//     sends a larger one before buffering it. A worker keeps at most max_push_sockets PUSH
//     sockets (push_cache.hpp), lowered at start() so that every worker's sockets fit in the
//     process' descriptor limit; the context's ZMQ_MAX_SOCKETS is raised to hold them all.
//   * A worker loop: zmq_poll with a timeout (at most 50 ms, and never past the next epoch),
//     then drain up to 1024 messages, each [kind][payload]; malformed messages (wrong frame
//     count, unknown kind, unparsable payload) are logged and dropped. Every
//     gossip_period_ms the WorkerCore's end_epoch() runs (gossip + subscription UPDATEs).
//     Outgoing messages go through the thread's own PushCache; same-node peers over inproc.
//     No locks or atomics on the request path: a stop flag is read once per loop turn.
//   * worker_addresses() returns the tcp addresses by thread id (empty before start()).
//   * stop() flushes each worker's last epoch, stops and joins the threads, closes stores and
//     the ZMQ context; returns within ~a poll timeout plus store close time. Idempotent; the
//     destructor calls it.
//   * stats() returns each worker's counters as of its last epoch (published off the request
//     path under a mutex).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "node_config.hpp"
#include "worker_core.hpp"

namespace anna {

class Node {
 public:
  explicit Node(NodeConfig config);
  ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  void start();
  void stop();
  std::vector<std::string> worker_addresses() const;
  std::vector<WorkerStats> stats() const;
  const NodeConfig& config() const { return config_; }
  bool running() const;

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
};

// Pins the calling thread to one core; returns false (with errno-style reason) on failure.
bool pin_current_thread(int core, std::string* why);

}  // namespace anna
