// The no-network kernel microbenchmark (dissertation Fig. 2.6): update-only LWW PUTs with Zipf
// keys, run through the real WorkerCore request path on pinned threads.
//
// Contract: run_kernel_bench(config) builds one in-process node of `threads` workers (a
// WorkerCore each, with a MemoryStore) and one Zipf(zipf) stream of threads *
// requests_per_thread serialized "request" KeyRequests (one LWW PUT of value_size bytes each,
// with a response address, so responses are built and then discarded). Placement:
//   * full_replication = false: replication 1; each request goes to the queue of the thread
//     that owns its key, so a hot key makes one thread do most of the work;
//   * full_replication = true: every thread owns every key; the stream is dealt round-robin,
//     and every gossip_period_ms each thread sends its merged changeset (merge-at-sender) to
//     the others through in-memory per-thread inboxes (a mutex per inbox, off the request
//     path; inboxes are drained at each epoch).
// After one unmeasured warm-up pass over every queue: with replication 1 the workload is
// replayed in rounds (a barrier between rounds, since the stream is one workload split across
// owners, so the hot key's owner sets the pace) until `seconds` have passed; with full
// replication each thread replays its queue independently until the deadline (any replica
// can serve any request). Each replay rewrites the LWW timestamps so writes stay newer.
// throughput = total_ops (requests actually handled) / elapsed_s. After the run every worker flushes its last
// epoch and drains its inbox once more; `converged` says whether all replicas of the hottest
// key then hold the same value. Throws std::invalid_argument on bad parameters and
// std::runtime_error if a thread fails or a barrier waits longer than seconds + 60 s.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace anna {

struct KernelBenchConfig {
  int threads = 1;
  bool full_replication = false;
  double zipf = 4.0;
  std::size_t keys = 100000;
  std::size_t requests_per_thread = 20000;
  std::size_t value_size = 256;
  int gossip_period_ms = 100;
  double seconds = 2.0;
  bool pin_threads = true;
  std::uint64_t seed = 1;
};

struct KernelBenchResult {
  double throughput = 0;
  int threads = 0;
  int replication = 0;  // replicas per key
  std::uint64_t total_ops = 0;
  double elapsed_s = 0;
  std::uint64_t rounds = 0;  // replication 1: measured rounds; full replication: 0
  std::vector<std::uint64_t> ops_per_thread;
  std::vector<double> cpu_s_per_thread;  // CPU time each thread got while measured
  double hot_key_share = 0;       // fraction of requests to the hottest key
  std::uint64_t gossip_messages = 0;
  bool converged = false;
  int pinned_threads = 0;
};

KernelBenchResult run_kernel_bench(const KernelBenchConfig& config);

}  // namespace anna
