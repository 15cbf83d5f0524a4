// The kernel microbenchmark. See kernel_bench.hpp for the contract.
#include "kernel_bench.hpp"

#include <time.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <unordered_map>

#include "anna.pb.h"
#include "node.hpp"
#include "worker_core.hpp"
#include "zipf.hpp"

namespace anna {
namespace {

using Clock = std::chrono::steady_clock;

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// A reusable barrier whose last arriver runs a callback; waits are bounded.
class Barrier {
 public:
  Barrier(int n, std::chrono::seconds timeout) : n_(n), timeout_(timeout) {}

  template <class F>
  bool wait(F&& on_last) {
    std::unique_lock<std::mutex> lock(mu_);
    std::uint64_t gen = generation_;
    if (++waiting_ == n_) {
      on_last();
      waiting_ = 0;
      ++generation_;
      cv_.notify_all();
      return true;
    }
    return cv_.wait_for(lock, timeout_, [&] { return generation_ != gen || broken_; }) && !broken_;
  }
  void break_all() {
    std::lock_guard<std::mutex> lock(mu_);
    broken_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int n_;
  int waiting_ = 0;
  std::uint64_t generation_ = 0;
  bool broken_ = false;
  std::chrono::seconds timeout_;
};

struct Inbox {
  std::mutex mu;
  std::vector<std::string> messages;
};

// One pre-generated request. Its LWW timestamp is a 9-byte varint at `ts_offset`, rewritten
// before each replay so every round's writes are newer than the last (real LWW updates).
struct QueuedRequest {
  std::string bytes;
  std::uint32_t ts_offset;
  std::uint64_t seq;  // position in the whole stream
};

constexpr std::uint64_t kTimestampBase = 1ULL << 56;  // varints in [2^56, 2^63) take 9 bytes

void write_varint9(char* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) {
    p[i] = static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  p[8] = static_cast<char>(v & 0x7f);
}

struct Shared {
  KernelBenchConfig cfg;
  std::uint64_t total = 0;
  std::vector<std::string> addresses;
  std::unordered_map<std::string, int> thread_of;
  std::vector<std::vector<QueuedRequest>> queues;  // serialized KeyRequests per thread
  Membership membership;
  // Each thread builds its own WorkerCore (and copies its queue) so that everything it
  // touches per request lives in its own allocator arena: no false sharing across threads.
  std::vector<std::unique_ptr<WorkerCore>> cores;
  std::vector<Inbox> inboxes;
  Barrier barrier;
  bool stop = false;  // written by the barrier's last arriver, read after the barrier
  Clock::time_point t0, t1;
  std::uint64_t rounds = 0;
  std::vector<std::uint64_t> ops;  // queue length per thread, written at the end
  std::vector<double> cpu;         // measured-phase CPU seconds per thread
  std::atomic<std::uint64_t> gossip{0};
  std::atomic<int> pinned{0};
  std::atomic<bool> failed{false};
  std::string error;
  std::mutex error_mu;

  Shared(const KernelBenchConfig& c)
      : cfg(c), inboxes(c.threads), barrier(c.threads, std::chrono::seconds(60 + static_cast<int>(c.seconds))) {}

  void fail(const std::string& why) {
    {
      std::lock_guard<std::mutex> lock(error_mu);
      if (error.empty()) error = why;
    }
    failed.store(true);
    barrier.break_all();
  }
};

class BenchWorker {
 public:
  BenchWorker(Shared* sh, int tid)
      : sh_(sh), tid_(tid), period_(std::chrono::milliseconds(sh->cfg.gossip_period_ms)) {}

  void run() {
    if (sh_->cfg.pin_threads) {
      unsigned cores = std::thread::hardware_concurrency();
      std::string why;
      if (pin_current_thread(static_cast<int>(tid_ % (cores == 0 ? 1 : cores)), &why)) ++sh_->pinned;
    }
    {
      WorkerIdentity id{"bench", MEMORY, tid_, sh_->addresses[tid_], 64u << 20};
      auto core = std::make_unique<WorkerCore>(std::move(id), std::make_unique<MemoryStore>());
      std::vector<OutMessage> ignored;
      core->handle_membership(sh_->membership, &ignored);
      core_ = core.get();
      sh_->cores[tid_] = std::move(core);
      std::vector<QueuedRequest> shared_queue;
      shared_queue.swap(sh_->queues[tid_]);
      queue_.reserve(shared_queue.size());
      for (const auto& q : shared_queue) queue_.push_back(QueuedRequest{std::string(q.bytes), q.ts_offset, q.seq});
    }
    if (!sh_->barrier.wait([] {})) return give_up("barrier timeout");
    next_epoch_ = Clock::now() + period_;
    // Warm-up round, then measured rounds until the time is up.
    run_round(0, Clock::time_point::max());
    if (!sh_->barrier.wait([&] { sh_->t0 = Clock::now(); })) return give_up("barrier timeout");
    const double cpu0 = thread_cpu_seconds();
    const auto deadline = sh_->t0 + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(sh_->cfg.seconds));
    std::uint64_t ops = 0;
    if (sh_->cfg.full_replication) {
      // Every thread can serve every request: threads run independently until the deadline
      // (a replica that falls behind does not stall the others, as with load-balancing
      // clients), counting exactly the requests they handled.
      for (std::uint64_t round = 1;; ++round)
        if (run_round(round, deadline, &ops)) break;
      if (!sh_->barrier.wait([&] { sh_->t1 = Clock::now(); })) return give_up("barrier timeout");
    } else {
      // One fixed workload split by owner: a round ends when every owner has served its
      // share, so the hot key's owner sets the pace.
      for (std::uint64_t round = 1;; ++round) {
        run_round(round, Clock::time_point::max(), &ops);
        bool ok = sh_->barrier.wait([&] {
          ++sh_->rounds;
          sh_->t1 = Clock::now();
          sh_->stop = sh_->t1 >= deadline;
        });
        if (!ok) return give_up("barrier timeout");
        if (sh_->stop) break;
      }
    }
    sh_->cpu[tid_] = thread_cpu_seconds() - cpu0;
    // Flush the last changeset, let everyone receive it, then merge what arrived.
    epoch();
    if (!sh_->barrier.wait([] {})) return give_up("barrier timeout");
    drain_inbox();
    core_->end_epoch(&out_);  // gossip received is never re-gossiped; this only clears state
    out_.clear();
    sh_->ops[tid_] = ops;
  }

 private:
  void give_up(const char* why) {
    if (!sh_->failed.load()) sh_->fail(std::string("kernel bench thread ") + std::to_string(tid_) + ": " + why);
  }

  // One pass over the queue; returns true if it stopped early at `deadline`.
  bool run_round(std::uint64_t round, Clock::time_point deadline, std::uint64_t* ops = nullptr) {
    auto& queue = queue_;
    std::string why;
    const std::uint64_t round_base = kTimestampBase + round * sh_->total;
    for (std::size_t i = 0; i < queue.size(); ++i) {
      QueuedRequest& q = queue[i];
      write_varint9(&q.bytes[q.ts_offset], round_base + q.seq);
      if (!core_->handle("request", q.bytes, &out_, &why)) {
        sh_->fail("request rejected: " + why);
        return true;
      }
      out_.clear();  // responses: the network is out of scope
      if (ops != nullptr) ++*ops;
      if ((i & 127) == 127) {
        auto now = Clock::now();
        if (now >= deadline) return true;
        if (now >= next_epoch_) {
          epoch();
          next_epoch_ = now + period_;
        }
      }
    }
    return false;
  }

  void drain_inbox() {
    std::vector<std::string> batch;
    {
      std::lock_guard<std::mutex> lock(sh_->inboxes[tid_].mu);
      batch.swap(sh_->inboxes[tid_].messages);
    }
    std::string why;
    for (const auto& m : batch) core_->handle("gossip", m, &out_, &why);
    out_.clear();
  }

  void epoch() {
    drain_inbox();
    core_->end_epoch(&out_);
    for (auto& m : out_) {
      if (m.kind != "gossip") continue;  // (subscription UPDATEs: none in this workload)
      auto it = sh_->thread_of.find(m.address);
      if (it == sh_->thread_of.end()) continue;
      Inbox& inbox = sh_->inboxes[it->second];
      std::lock_guard<std::mutex> lock(inbox.mu);
      inbox.messages.push_back(std::move(m.payload));
      ++sh_->gossip;
    }
    out_.clear();
  }

  Shared* sh_;
  int tid_;
  WorkerCore* core_ = nullptr;
  std::vector<QueuedRequest> queue_;
  Clock::duration period_;
  Clock::time_point next_epoch_;
  std::vector<OutMessage> out_;
};

void validate(const KernelBenchConfig& c) {
  if (c.threads < 1 || c.threads > 256) throw std::invalid_argument("threads must be in [1, 256]");
  if (c.keys < 1) throw std::invalid_argument("keys must be >= 1");
  if (c.zipf < 0) throw std::invalid_argument("zipf must be >= 0");
  if (c.requests_per_thread < 1) throw std::invalid_argument("requests_per_thread must be >= 1");
  if (c.value_size > (64u << 20)) throw std::invalid_argument("value_size must be <= 64 MiB");
  if (c.gossip_period_ms < 1) throw std::invalid_argument("gossip_period_ms must be >= 1");
  if (!(c.seconds > 0) || c.seconds > 3600) throw std::invalid_argument("seconds must be in (0, 3600]");
}

}  // namespace

KernelBenchResult run_kernel_bench(const KernelBenchConfig& cfg) {
  validate(cfg);
  Shared sh(cfg);
  const int T = cfg.threads;
  const int replicas = cfg.full_replication ? T : 1;

  Membership& membership = sh.membership;
  membership.set_version(1);
  Replication* r = membership.mutable_default_replication();
  r->set_memory_global(1);
  r->set_memory_local(static_cast<std::uint32_t>(replicas));
  r->set_disk_global(0);
  r->set_disk_local(1);
  NodeInfo* node = membership.add_nodes();
  node->set_node_id("bench");
  node->set_tier(MEMORY);
  for (int t = 0; t < T; ++t) {
    sh.addresses.push_back("bench://worker-" + std::to_string(t));
    sh.thread_of[sh.addresses.back()] = t;
    node->add_worker_addresses(sh.addresses.back());
  }
  sh.cores.resize(T);
  sh.ops.assign(T, 0);
  sh.cpu.assign(T, 0.0);

  // Pre-generate the request stream and split it by owner (replication 1) or round-robin.
  ClusterMap placement(ReplicationVector{1, static_cast<std::uint32_t>(replicas), 0, 1}, 64);
  placement.add_node("bench", MEMORY, sh.addresses);
  ZipfSampler zipf(cfg.keys, cfg.zipf, cfg.seed);
  const std::size_t total = cfg.requests_per_thread * static_cast<std::size_t>(T);
  sh.total = total;
  sh.queues.assign(T, {});
  for (auto& q : sh.queues) q.reserve(cfg.full_replication ? cfg.requests_per_thread : total / T);
  std::unordered_map<std::size_t, int> owner;
  std::unordered_map<std::size_t, std::size_t> hits;
  const std::string value(cfg.value_size, 'v');
  KeyRequest request;
  request.set_type(PUT);
  request.set_response_address("bench://client");
  KeyTuple* tuple = request.add_tuples();
  tuple->set_lattice_type(LWW);
  LWWValue lww;
  lww.set_value(value);
  std::vector<WorkerRef> refs;
  for (std::size_t i = 0; i < total; ++i) {
    std::size_t k = zipf.next();
    ++hits[k];
    std::string key = "k" + std::to_string(k);
    lww.set_timestamp(kTimestampBase + i);
    std::string payload = lww.SerializeAsString();
    tuple->set_key(key);
    tuple->set_payload(payload);
    request.set_request_id(std::to_string(i));
    int target;
    if (cfg.full_replication) {
      target = static_cast<int>(i % T);
    } else {
      auto it = owner.find(k);
      if (it == owner.end()) {
        placement.responsible(key, MEMORY, &refs);
        it = owner.emplace(k, refs.empty() ? 0 : refs[0].thread_id).first;
      }
      target = it->second;
    }
    std::string bytes = request.SerializeAsString();
    // The LWWValue's timestamp field: tag 0x08 then the 9-byte varint, inside the payload.
    std::size_t at = bytes.find(payload.substr(0, 10));
    if (at == std::string::npos || payload[0] != '\x08')
      throw std::runtime_error("kernel bench: cannot locate the LWW timestamp in a request");
    sh.queues[target].push_back(QueuedRequest{std::move(bytes), static_cast<std::uint32_t>(at + 1), i});
  }
  std::size_t hottest = 0, hottest_hits = 0;
  for (const auto& [k, n] : hits)
    if (n > hottest_hits || (n == hottest_hits && k < hottest)) { hottest = k; hottest_hits = n; }

  std::vector<std::thread> threads;
  for (int t = 0; t < T; ++t) {
    threads.emplace_back([&sh, t] {
      try {
        BenchWorker(&sh, t).run();
      } catch (const std::exception& e) {
        sh.fail(std::string("kernel bench thread: ") + e.what());
      }
    });
  }
  for (auto& th : threads) th.join();
  if (sh.failed.load()) throw std::runtime_error(sh.error);

  KernelBenchResult res;
  res.threads = T;
  res.replication = replicas;
  res.rounds = sh.rounds;  // replication 1 only (full replication runs without rounds)
  res.elapsed_s = std::chrono::duration<double>(sh.t1 - sh.t0).count();
  for (std::uint64_t n : sh.ops) {
    res.ops_per_thread.push_back(n);
    res.total_ops += n;
  }
  res.cpu_s_per_thread = sh.cpu;
  res.throughput = res.elapsed_s > 0 ? res.total_ops / res.elapsed_s : 0;
  res.hot_key_share = static_cast<double>(hottest_hits) / static_cast<double>(total);
  res.gossip_messages = sh.gossip.load();
  res.pinned_threads = sh.pinned.load();
  // Convergence of the hottest key across its replicas.
  std::string hot_key = "k" + std::to_string(hottest);
  placement.responsible(hot_key, MEMORY, &refs);
  std::string first;
  bool have_first = false;
  res.converged = !refs.empty();
  for (const auto& ref : refs) {
    int type = 0;
    std::string payload;
    if (sh.cores[ref.thread_id]->store().get_encoded(hot_key, &type, &payload) != NO_ERROR) {
      res.converged = false;
      break;
    }
    if (!have_first) { first = payload; have_first = true; }
    else if (payload != first) { res.converged = false; break; }
  }
  return res;
}

}  // namespace anna
