// The node's I/O shell: worker threads, sockets, epoch timer. See node.hpp for the contract.
#include "node.hpp"

#include <pthread.h>
#include <sched.h>
#include <dirent.h>
#include <sys/resource.h>
#include <zmq.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <future>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include "curve.hpp"
#include "log.hpp"
#include "push_cache.hpp"
#include "store.hpp"
#include "worker_links.hpp"
#include "zap.hpp"

namespace anna {

using SteadyClock = std::chrono::steady_clock;

struct Node::Shared {
  NodeConfig config;
  void* ctx = nullptr;
  std::atomic<bool> stopping{false};
  std::promise<void> go;
  std::shared_future<void> go_future = go.get_future().share();
  // Written by start() before `go` is released, read-only afterwards.
  std::vector<std::string> addresses;
  std::unordered_map<std::string, std::string> rewrite;  // tcp -> inproc, this node's workers
  std::size_t push_sockets = PushCache::kDefaultCapacity;  // per worker, after the fd check
  std::size_t max_links = WorkerLinks::kDefaultMaxLinks;   // per worker (links_for)
  std::unique_ptr<ZapHandler> zap;  // with authentication; started before any worker binds
  mutable std::mutex stats_mu;                          // per-epoch publication only
  std::vector<NodeWorkerStats> stats;
  // take_report(): the generation asked for, and each worker's last report (under stats_mu).
  std::atomic<std::uint64_t> report_wanted{0};
  std::condition_variable report_cv;
  std::vector<NodeWorkerReport> reports;
  std::vector<std::uint64_t> report_gen;
};

bool pin_current_thread(int core, std::string* why) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(core, &set);
  int rc = pthread_setaffinity_np(pthread_self(), sizeof set, &set);
  if (rc != 0) {
    *why = std::strerror(rc);
    return false;
  }
  return true;
}

namespace {

std::string inproc_address(const std::string& node_id, int tid) {
  return "inproc://anna-" + node_id + "-" + std::to_string(tid);
}

// Where a worker's socket reports failed handshakes to the node's ZAP handler.
std::string monitor_address(const std::string& node_id, int tid) {
  return "inproc://anna-monitor-" + node_id + "-" + std::to_string(tid);
}

// Printable, truncated rendering of an untrusted frame for log lines.
std::string printable(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, 32)) out.push_back(c >= 0x20 && c < 0x7f ? c : '?');
  if (s.size() > 32) out += "...";
  return out;
}

// Receives one multipart message without blocking. Returns the number of frames (0: none
// waiting, -1: context terminated). The first two frames are left in parts[0..1]; when there
// are more (a payload sent in several parts, each at most kMaxFrameBytes), frames 1.. are
// joined in *joined instead, up to max_joined bytes (*too_large is set beyond it and the
// rest is read and discarded).
int recv_message(void* socket, zmq_msg_t parts[2], std::string* joined, std::size_t max_joined,
                 bool* too_large) {
  int n = 0;
  bool more = true;
  *too_large = false;
  joined->clear();
  while (more) {
    zmq_msg_t extra;
    zmq_msg_t* target = n < 2 ? &parts[n] : &extra;
    if (n >= 2) zmq_msg_init(&extra);
    int rc = zmq_msg_recv(target, socket, ZMQ_DONTWAIT);
    if (rc < 0) {
      if (n >= 2) zmq_msg_close(&extra);
      if (errno == ETERM) return -1;
      return n;  // EAGAIN before the first frame (or an unexpected error)
    }
    more = zmq_msg_more(target) != 0;
    if (n >= 2) {
      if (n == 2) joined->assign(static_cast<const char*>(zmq_msg_data(&parts[1])),
                                 zmq_msg_size(&parts[1]));
      std::size_t size = zmq_msg_size(&extra);
      if (!*too_large && joined->size() + size <= max_joined)
        joined->append(static_cast<const char*>(zmq_msg_data(&extra)), size);
      else
        *too_large = true;
      zmq_msg_close(&extra);
    }
    ++n;
  }
  return n;
}

// Descriptors this process has open now (0 where it cannot tell).
std::size_t open_descriptors() {
  std::size_t n = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (readdir(d) != nullptr) ++n;
    closedir(d);
    n = n > 3 ? n - 3 : 0;  // ".", ".." and the directory's own descriptor
  }
  return n;
}

}  // namespace

std::size_t push_sockets_for(const NodeConfig& cfg, std::uint64_t limit, std::size_t in_use) {
  std::size_t wanted = cfg.max_push_sockets;
  std::uint64_t reserve = std::max<std::uint64_t>(kMinReservedFds, limit / 4);
  std::uint64_t free = limit > in_use + reserve ? limit - in_use - reserve : 0;
  // Each worker's cache may hold descriptors_for(capacity) descriptors, open and lingering.
  std::size_t per_worker = static_cast<std::size_t>(free / static_cast<std::uint64_t>(cfg.threads));
  std::size_t fit = per_worker / PushCache::kFdsPerSocket;  // an upper bound: no lingering
  while (fit > 0 && PushCache::descriptors_for(fit) > per_worker) --fit;
  return std::min(wanted, std::max(fit, kMinPushSockets));
}

std::size_t links_for(const NodeConfig& cfg, std::uint64_t limit) {
  std::uint64_t reserve = std::max<std::uint64_t>(kMinReservedFds, limit / 4);
  std::uint64_t share = reserve / (2 * static_cast<std::uint64_t>(std::max(cfg.threads, 1)));
  return static_cast<std::size_t>(
      std::min<std::uint64_t>(WorkerLinks::kDefaultMaxLinks, std::max<std::uint64_t>(share, 4)));
}

namespace {

// What a worker may keep open: push_sockets_for() with this process' soft descriptor limit
// and what it has open now; logged when lower than configured.
std::size_t push_sockets_now(const NodeConfig& cfg) {
  struct rlimit lim {};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY)
    return cfg.max_push_sockets;
  std::uint64_t fds = static_cast<std::uint64_t>(lim.rlim_cur);
  std::size_t fit = push_sockets_for(cfg, fds, open_descriptors());
  if (fit < cfg.max_push_sockets)
    log_warning("node " + cfg.node_id + ": max_push_sockets " +
                std::to_string(cfg.max_push_sockets) + " per worker does not fit the descriptor "
                "limit " + std::to_string(fds) + " with " + std::to_string(cfg.threads) +
                " workers; using " + std::to_string(fit));
  return fit;
}

// The worker's clock: wall time, because tombstones are compared across replicas.
std::uint64_t wall_now_ns() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count());
}

class WorkerThread {
 public:
  WorkerThread(std::shared_ptr<Node::Shared> sh, int tid) : sh_(std::move(sh)), tid_(tid) {}

  void run(std::promise<std::string> bound) {
    const NodeConfig& cfg = sh_->config;
    if (cfg.pin_threads) {
      unsigned cores = std::thread::hardware_concurrency();
      int core = static_cast<int>(tid_ % (cores == 0 ? 1 : cores));
      std::string why;
      if (!pin_current_thread(core, &why))
        log_warning("node " + cfg.node_id + " worker " + std::to_string(tid_) +
                    ": cannot pin to core " + std::to_string(core) + " (" + why + "); continuing");
    }
    std::string tcp;
    std::unique_ptr<Store> store;
    try {
      pull_ = zmq_socket(sh_->ctx, ZMQ_PULL);
      if (pull_ == nullptr) throw std::runtime_error(std::string("zmq_socket: ") + zmq_strerror(errno));
      int hwm = 0, linger = 0;
      zmq_setsockopt(pull_, ZMQ_RCVHWM, &hwm, sizeof hwm);
      zmq_setsockopt(pull_, ZMQ_LINGER, &linger, sizeof linger);
      // A peer sending a larger frame is disconnected before the frame is buffered, during
      // the handshake too: an unauthenticated peer cannot make the worker buffer more.
      std::int64_t max_frame = max_frame_bytes(cfg);
      zmq_setsockopt(pull_, ZMQ_MAXMSGSIZE, &max_frame, sizeof max_frame);
      if (cfg.curve.enabled()) {
        // Clients and the cluster both complete the handshake ("cloudburst"); what a client
        // may send is checked per message (process()).
        std::string why;
        if (!make_curve_server(pull_, cfg.curve, kZapDomain, &why)) throw std::runtime_error(why);
        std::string monitor = monitor_address(cfg.node_id, tid_);
        if (zmq_socket_monitor(pull_, monitor.c_str(), ZapHandler::kMonitorEvents) != 0)
          throw std::runtime_error("monitor " + monitor + ": " + zmq_strerror(errno));
      }
      std::string endpoint = "tcp://" + cfg.ip + ":*";
      if (zmq_bind(pull_, endpoint.c_str()) != 0)
        throw std::runtime_error("bind " + endpoint + ": " + zmq_strerror(errno));
      char buf[256];
      size_t len = sizeof buf;
      if (zmq_getsockopt(pull_, ZMQ_LAST_ENDPOINT, buf, &len) != 0)
        throw std::runtime_error(std::string("ZMQ_LAST_ENDPOINT: ") + zmq_strerror(errno));
      tcp.assign(buf, strnlen(buf, len));
      if (cfg.curve.enabled()) tcp = keyed_address(tcp, cfg.curve.public_key);
      // This node's own workers reach the socket here; ZeroMQ runs no handshake over inproc.
      std::string inproc = inproc_address(cfg.node_id, tid_);
      if (zmq_bind(pull_, inproc.c_str()) != 0)
        throw std::runtime_error("bind " + inproc + ": " + zmq_strerror(errno));
      if (cfg.tier == DISK)
        store = std::make_unique<DiskStore>(
            DiskStore::path_for(cfg.data_dir, cfg.node_id, tid_),
            DiskSyncPolicy{cfg.disk_sync, std::chrono::milliseconds(cfg.disk_sync_interval_ms)});
      else store = std::make_unique<MemoryStore>();
      // Client links (secured with the node's CURVE keys when it authenticates), not with
      // capacity emulation, which paces the ZeroMQ socket alone.
      if (cfg.client_links && cfg.service_rate == 0)
        links_ = std::make_unique<WorkerLinks>(cfg.ip, max_message_bytes(cfg), sh_->max_links,
                                               where(), cfg.curve, "client link",
                                               cfg.unix_links);
    } catch (const std::exception& e) {
      if (pull_ != nullptr) zmq_close(pull_);
      pull_ = nullptr;
      bound.set_exception(std::make_exception_ptr(std::runtime_error(
          "node " + cfg.node_id + " worker " + std::to_string(tid_) + ": " + e.what())));
      return;
    }
    bound.set_value(tcp);
    sh_->go_future.wait();  // start() always releases it (on success or failure)
    if (!sh_->stopping.load()) {
      WorkerIdentity id{cfg.node_id, cfg.tier, tid_, tcp, cfg.max_value_bytes};
      id.handoff_retry_ms = static_cast<std::uint64_t>(cfg.handoff_retry_ms);
      id.handoff_window_ms = static_cast<std::uint64_t>(cfg.handoff_window_ms);
      id.fetch_timeout_ms = static_cast<std::uint64_t>(cfg.fetch_timeout_ms);
      id.tombstone_ttl_ms = static_cast<std::uint64_t>(cfg.tombstone_ttl_ms);
      id.stats_top_k = cfg.stats_top_k;
      core_ = std::make_unique<WorkerCore>(std::move(id), std::move(store));
      pushes_ = std::make_unique<PushCache>(sh_->ctx, sh_->rewrite, sh_->push_sockets, cfg.curve,
                                            PushCache::kLingerMs, cfg.push_handshake_ms);
      serve();
      core_.reset();  // closes the store
      pushes_.reset();
    }
    links_.reset();
    zmq_close(pull_);
  }

 private:
  void serve() {
    const auto period = std::chrono::milliseconds(sh_->config.gossip_period_ms);
    auto next_epoch = SteadyClock::now() + period;
    zmq_msg_t parts[2];
    zmq_msg_init(&parts[0]);
    zmq_msg_init(&parts[1]);
    period_start_ = SteadyClock::now();
    // The PULL socket is polled through its ZMQ_FD, a plain descriptor that becomes readable
    // when the socket's mailbox gets a command (a message arriving on an empty queue sends
    // one): zmq_poll on the socket itself would process the mailbox before and after every
    // wait, two more syscalls a turn. That descriptor only signals a change, so the socket
    // is read until it has nothing left (pull_pending_ false) before the loop waits on it.
    int pull_fd = -1;
    std::size_t fd_size = sizeof pull_fd;
    if (zmq_getsockopt(pull_, ZMQ_FD, &pull_fd, &fd_size) != 0) pull_fd = -1;
    bool pull_pending = true;
    while (!sh_->stopping.load(std::memory_order_relaxed)) {
      if (sh_->report_wanted.load(std::memory_order_relaxed) != report_gen_) report();
      auto now = SteadyClock::now();
      if (!out_.empty()) {
        // Answers flush() held for the push cache: they go before any new request is read
        // (a flood of new response addresses waits in its sender's queue, not here). The wait
        // ends at the next epoch or after 50 ms at most, so epochs, reports and stop stay on
        // time. Not busy time: the worker waits for peers' handshakes.
        if (now < push_ready_) {
          std::this_thread::sleep_until(
              std::min({push_ready_, next_epoch, now + std::chrono::milliseconds(50)}));
          now = SteadyClock::now();
        }
        if (now >= push_ready_) {
          flush();
          // Still a flood: the next request's answers are flushed on their own (serve()), not
          // in a batch of new addresses that would each wait while no request is read.
          holding_ = true;
        }
        if (now >= next_epoch) {
          epoch();
          next_epoch = SteadyClock::now() + period;
        }
        if (!out_.empty()) continue;
        now = SteadyClock::now();
      }
      if (pacing_ && now < next_free_) {
        // Capacity emulation: the last request's emulated service time is not over. Wait
        // for it without reading the socket (requests queue there), at most until the next
        // epoch or 50 ms, so epochs, reports and stop stay on time. Busy time.
        auto until = std::min({next_free_, next_epoch, now + std::chrono::milliseconds(50)});
        std::this_thread::sleep_until(until);
        auto after = SteadyClock::now();
        if (after >= next_epoch) {
          epoch();
          after = SteadyClock::now();
          next_epoch = after + period;
        }
        busy_ += after - now;
        continue;
      }
      long wait_ms = std::chrono::duration_cast<std::chrono::milliseconds>(next_epoch - now).count();
      wait_ms = std::max(0L, std::min(wait_ms, 50L));
      items_.clear();
      if (pull_fd >= 0) items_.push_back(zmq_pollitem_t{nullptr, pull_fd, ZMQ_POLLIN, 0});
      else items_.push_back(zmq_pollitem_t{pull_, 0, ZMQ_POLLIN, 0});
      if (links_) links_->add_poll_items(&items_);
      int rc = zmq_poll(items_.data(), static_cast<int>(items_.size()),
                        pull_pending && pull_fd >= 0 ? 0 : wait_ms);
      if (rc < 0) {
        if (errno == ETERM) break;
        if (errno != EINTR) log_error("zmq_poll: " + std::string(zmq_strerror(errno)));
        continue;
      }
      auto busy_from = SteadyClock::now();
      const bool pull_ready =
          (rc > 0 && (items_[0].revents & ZMQ_POLLIN)) || (pull_pending && pull_fd >= 0);
      if (rc > 0 || pull_ready) {
        core_->set_now(wall_now_ns());  // once per batch: tombstones and timers need no finer
        if (links_)
          links_->service(items_.data() + 1, items_.size() - 1,
                          [this](std::uint64_t link, std::string_view payload,
                                 std::string_view role) { process_link(link, payload, role); });
        pull_pending = pull_ready;  // until a read finds nothing: see above
        for (int i = 0; i < 1024 && pull_ready; ++i) {
          bool too_large = false;
          int frames = recv_message(pull_, parts, &joined_, max_message_bytes(sh_->config),
                                    &too_large);
          if (frames == 0) {
            pull_pending = false;
            break;
          }
          if (frames < 0) {
            flush();
            return;
          }
          if (too_large) {
            ++dropped_;
            log_warning(where() + "dropped a message of " + std::to_string(frames) +
                        " frames larger than " +
                        std::to_string(max_message_bytes(sh_->config)) + " bytes");
            continue;
          }
          if (!pacing_) {
            process(parts, frames);
            if (holding_ || out_.size() >= kFlushMessages || out_bytes() >= kFlushBytes) {
              flush();
              if (!out_.empty()) break;  // held (flush()): sent at the loop's top first
            }
            continue;
          }
          auto start = SteadyClock::now();
          std::uint64_t before = core_->period_requests();
          process(parts, frames);
          std::uint64_t served = core_->period_requests() - before;
          if (served == 0) continue;  // not a client GET/PUT/DELETE this worker serves
          // Each served tuple takes service_interval_ of the worker's time, from when it
          // started (or from when the previous one's time ends, if later).
          next_free_ = std::max(next_free_, start) + service_interval_ * served;
          if (holding_ || out_.size() >= kFlushMessages || out_bytes() >= kFlushBytes) {
            flush();
            if (!out_.empty()) break;  // held (flush()): sent at the loop's top first
          }
          if (SteadyClock::now() < next_free_) break;  // wait at the loop's top
        }
        // The batch's answers go out together: the I/O thread is woken once for them, not
        // once per message (on a busy machine each wake-up is a context switch).
        flush();
      }
      now = SteadyClock::now();
      if (now >= next_epoch) {
        epoch();
        auto after = SteadyClock::now();
        next_epoch = after + period;
        now = after;
      }
      core_->store().sync_due();  // group commit (store.hpp "Durability"): loop turns <= 50 ms
      busy_ += now - busy_from;  // the poll's wait is not busy time
    }
    epoch();  // flush the last changeset
    zmq_msg_close(&parts[0]);
    zmq_msg_close(&parts[1]);
  }

  // Appends what handle() produced to out_; the caller flushes (see serve()).
  void process(zmq_msg_t parts[2], int frames) {
    if (frames < 1) {
      ++dropped_;
      log_warning(where() + "dropped an empty message (expected [kind][payload...])");
      return;
    }
    // One frame: a client request without its kind frame ([payload], see node.hpp), which
    // saves the sender and this node a frame and its CURVE box per request.
    std::string_view kind =
        frames == 1 ? std::string_view(kRequestKind)
                    : std::string_view(static_cast<const char*>(zmq_msg_data(&parts[0])),
                                       zmq_msg_size(&parts[0]));
    std::string_view payload =
        frames == 1   ? std::string_view(static_cast<const char*>(zmq_msg_data(&parts[0])),
                                         zmq_msg_size(&parts[0]))
        : frames == 2 ? std::string_view(static_cast<const char*>(zmq_msg_data(&parts[1])),
                                         zmq_msg_size(&parts[1]))
                      : std::string_view(joined_);
    if (auth_) {
      // No User-Id: inproc, i.e. this node's own workers (see node.hpp).
      const char* role = sender_role(&parts[0]);
      const bool client = role != nullptr && std::strcmp(role, kClusterRole) != 0;
      if (client && !client_may_send(kind)) {
        drop_from_client(kind, role, zmq_msg_gets(&parts[0], "Peer-Address"));
        return;
      }
      core_->set_sender_is_client(client);
    }
    const std::size_t before = out_.size();
    handle(kind, payload);
    if (links_ && kind == kRequestKind) {
      // Tell the client where this worker's link is (KeyResponse.link_address, appended to
      // the serialized answer: protobuf fields may be concatenated).
      for (std::size_t i = before; i < out_.size(); ++i)
        if (out_[i].kind.empty())
          append_proto_field(&out_[i].payload, kLinkAddressField, links_->address());
    }
  }

  void handle(std::string_view kind, std::string_view payload) {
    try {
      std::string why;
      if (!core_->handle(kind, payload, &out_, &why))
        log_warning(where() + "dropped a '" + printable(kind) + "' message: " + why);
    } catch (const std::exception& e) {
      log_error(where() + "error handling a '" + printable(kind) + "' message: " + e.what());
    }
  }

  // A request read from a client link: handled as one received over ZeroMQ, and the answers
  // to its response_address produced now go back on the link instead of through a PUSH
  // socket (the rest, e.g. forwarded deletes, leave as usual). With authentication the link's
  // handshake admitted the sender's key and gave its role: a link carries only requests, the
  // one kind a client key may send, and the role's rights apply as over ZeroMQ.
  void process_link(std::uint64_t link, std::string_view payload, std::string_view role) {
    ++link_requests_;
    if (auth_) core_->set_sender_is_client(role != kClusterRole);
    std::string reply_to;
    find_proto_field(payload.data(), payload.size(), kResponseAddressField, &reply_to);
    const std::size_t before = out_.size();
    handle(kRequestKind, payload);
    if (reply_to.empty()) return;
    std::size_t kept = before;
    for (std::size_t i = before; i < out_.size(); ++i) {
      if (out_[i].kind.empty() && out_[i].address == reply_to) {
        links_->queue(link, out_[i].payload);
      } else {
        if (kept != i) out_[kept] = std::move(out_[i]);
        ++kept;
      }
    }
    out_.resize(kept);
    if (out_bytes_counted_ > kept) out_bytes_counted_ = kept;
  }

  void drop_from_client(std::string_view kind, const char* role, const char* peer) {
    ++auth_dropped_;
    auto now = SteadyClock::now();
    if (now - auth_warn_window_ >= std::chrono::seconds(1)) {
      auth_warn_window_ = now;
      auth_warnings_in_window_ = 0;
    }
    if (++auth_warnings_in_window_ > Node::kMaxAuthWarningsPerSecond) return;
    log_warning(where() + "dropped a '" + printable(kind) + "' message from " + printable(role) +
                " at " + printable(peer != nullptr ? peer : "(unknown address)") +
                ": only the cluster may send it (" + std::to_string(auth_dropped_) +
                " dropped so far)");
  }

  void epoch() {
    core_->set_now(wall_now_ns());
    try {
      core_->end_epoch(&out_);
    } catch (const std::exception& e) {
      log_error(where() + "error at epoch end: " + e.what());
    }
    flush();
    if (send_failures_ > 0) {
      log_warning(where() + std::to_string(send_failures_) +
                  " outgoing messages could not be sent this epoch (bad address or full queue)");
      send_failures_ = 0;
    }
    NodeWorkerStats published;
    published.core = core_->stats();
    published.core.dropped += dropped_;  // messages the shell dropped before the core
    published.auth_dropped = auth_dropped_;
    published.push_refused = pushes_->refused();
    published.wal_syncs = core_->store().syncs();
    published.wal_sync_failures = core_->store().sync_failures();
    if (links_) {
      published.links_open = links_->open();
      published.links_accepted = links_->accepted();
      published.links_unix = links_->unix_accepted();
      published.links_refused = links_->refused();
      published.links_dropped = links_->dropped();
      published.links_auth_refused = links_->auth_refused();
    }
    published.link_requests = link_requests_;
    std::lock_guard<std::mutex> lock(sh_->stats_mu);  // once per epoch, off the request path
    sh_->stats[tid_] = published;
  }

  // Closes the report period for take_report() (once per request, off the request path).
  void report() {
    report_gen_ = sh_->report_wanted.load();
    auto now = SteadyClock::now();
    NodeWorkerReport r;
    try {
      r.core = core_->take_report();
    } catch (const std::exception& e) {
      log_error(where() + "error closing the report period: " + e.what());
    }
    r.period_ns = static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(now - period_start_).count());
    r.busy_ns = static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(busy_).count());
    r.occupancy = r.period_ns == 0 ? 0.0
                                   : std::min(1.0, static_cast<double>(r.busy_ns) / r.period_ns);
    period_start_ = now;
    busy_ = SteadyClock::duration::zero();
    {
      std::lock_guard<std::mutex> lock(sh_->stats_mu);
      sh_->reports[tid_] = std::move(r);
      sh_->report_gen[tid_] = report_gen_;
    }
    sh_->report_cv.notify_all();
  }

  // Sends out_ through the push cache, except an answer to a new address that the cache could
  // only open by closing a socket used within push_handshake_ms (whose peer's handshake may
  // still be under way, push_cache.hpp): that one, and every later one to the same address,
  // stays in out_ in order, and push_ready_ says when to try again; serve() reads no request
  // until they are sent. Nothing is held once the node is stopping. While the last flush held
  // something (a flood of new addresses), serve() flushes after every message, so a request of
  // another connection, read in turn with the flood's, waits for one held answer at most
  // rather than for a batch of them.
  void flush() {
    const auto now = SteadyClock::now();
    std::size_t kept = 0;
    held_.clear();
    for (std::size_t i = 0; i < out_.size(); ++i) {
      OutMessage& m = out_[i];
      bool hold = !held_.empty() && held_.count(m.address) != 0;
      if (!hold) {
        auto ready = pushes_->ready_at(m.address, now);
        if (ready > now && !sh_->stopping.load(std::memory_order_relaxed)) {
          if (held_.empty() || ready < push_ready_) push_ready_ = ready;
          held_.insert(m.address);
          hold = true;
        }
      }
      if (hold) {
        if (kept != i) out_[kept] = std::move(m);
        ++kept;
      } else if (!pushes_->send(m.address, m.kind, m.payload)) {
        ++send_failures_;
      }
    }
    out_.resize(kept);
    holding_ = kept > 0;
    out_bytes_counted_ = 0;
    out_bytes_ = 0;
    if (links_) links_->flush();
  }

  // The payload bytes waiting in out_ (counting only what was added since the last call).
  std::size_t out_bytes() {
    for (; out_bytes_counted_ < out_.size(); ++out_bytes_counted_)
      out_bytes_ += out_[out_bytes_counted_].payload.size();
    return out_bytes_;
  }

  // A batch's answers wait in out_ until the batch ends or these bounds are reached.
  static constexpr std::size_t kFlushMessages = 64;
  static constexpr std::size_t kFlushBytes = 1 << 20;
  static constexpr const char* kRequestKind = "request";

  std::string where() const {
    return "node " + sh_->config.node_id + " worker " + std::to_string(tid_) + ": ";
  }

  std::shared_ptr<Node::Shared> sh_;
  int tid_;
  void* pull_ = nullptr;
  std::unique_ptr<WorkerCore> core_;
  std::unique_ptr<PushCache> pushes_;
  std::unique_ptr<WorkerLinks> links_;  // client links (config.client_links)
  std::vector<zmq_pollitem_t> items_;   // this turn's poll set: the PULL socket, then links
  std::uint64_t link_requests_ = 0;
  std::vector<OutMessage> out_;
  std::unordered_set<std::string> held_;  // addresses flush() held back this time
  SteadyClock::time_point push_ready_{};  // when the held answers may go (flush())
  bool holding_ = false;  // a flush held an answer since the last one that held none
  std::size_t out_bytes_counted_ = 0;  // out_[0, counted) are summed in out_bytes_
  std::size_t out_bytes_ = 0;
  std::string joined_;  // a payload received in several frames
  std::uint64_t dropped_ = 0;
  std::uint64_t send_failures_ = 0;
  std::uint64_t report_gen_ = 0;  // the last report generation served
  SteadyClock::time_point period_start_{};
  SteadyClock::duration busy_{};
  bool auth_ = sh_->config.curve.enabled();
  // Capacity emulation (service_rate > 0): the time the worker's emulated service of the
  // requests it has taken ends.
  bool pacing_ = sh_->config.service_rate > 0;
  SteadyClock::duration service_interval_ = std::chrono::duration_cast<SteadyClock::duration>(
      std::chrono::duration<double>(pacing_ ? 1.0 / sh_->config.service_rate : 0.0));
  SteadyClock::time_point next_free_{};
  std::uint64_t auth_dropped_ = 0;
  SteadyClock::time_point auth_warn_window_{};
  int auth_warnings_in_window_ = 0;
};

}  // namespace

Node::Node(NodeConfig config) : config_(std::move(config)) {}

Node::~Node() { stop(); }

void Node::start() {
  std::lock_guard<std::mutex> lock(mu_);
  if (started_ || stopped_) throw std::runtime_error("Node.start: the node was already started");
  if (!set_log_level(config_.log_level))
    log_warning("node " + config_.node_id + ": unknown log_level '" + config_.log_level + "'");
  auto sh = std::make_shared<Shared>();
  sh->config = config_;
  sh->ctx = zmq_ctx_new();
  if (sh->ctx == nullptr) throw std::runtime_error("Node.start: zmq_ctx_new failed");
  zmq_ctx_set(sh->ctx, ZMQ_BLOCKY, 0);
  // Every worker's PUSH sockets (open and lingering), its PULL socket, and slack; ZeroMQ's
  // default of 1023 sockets per context would run out first otherwise. ZeroMQ counts a closed
  // socket until it is reaped, so this also bounds sockets closed but not yet gone.
  sh->push_sockets = push_sockets_now(config_);
  {
    struct rlimit lim {};
    if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY)
      sh->max_links = links_for(config_, static_cast<std::uint64_t>(lim.rlim_cur));
  }
  push_sockets_ = sh->push_sockets;
  long long cache_sockets = static_cast<long long>(PushCache::descriptors_for(sh->push_sockets) /
                                                   PushCache::kFdsPerSocket);
  long long wanted_sockets = static_cast<long long>(config_.threads) * (cache_sockets + 4) + 64;
  int socket_limit = zmq_ctx_get(sh->ctx, ZMQ_SOCKET_LIMIT);
  if (socket_limit > 0 && wanted_sockets > socket_limit) wanted_sockets = socket_limit;
  // Lower than ZeroMQ's default too: the context then refuses a socket before the process
  // runs out of descriptors, even while closed sockets wait for the reaper thread.
  zmq_ctx_set(sh->ctx, ZMQ_MAX_SOCKETS, static_cast<int>(wanted_sockets));
  sh->stats.assign(config_.threads, NodeWorkerStats{});
  sh->reports.assign(config_.threads, NodeWorkerReport{});
  sh->report_gen.assign(config_.threads, 0);
  if (config_.curve.enabled()) {
    // Before any worker binds: a CURVE server that finds no handler refuses everyone.
    sh->zap = std::make_unique<ZapHandler>(sh->ctx, config_.curve.admitted, "node " + config_.node_id);
    for (int tid = 0; tid < config_.threads; ++tid) sh->zap->watch(monitor_address(config_.node_id, tid));
    try {
      sh->zap->start();
    } catch (const std::exception& e) {
      sh->zap.reset();
      zmq_ctx_term(sh->ctx);
      stopped_ = true;
      throw std::runtime_error(std::string("Node.start: ") + e.what());
    }
  }

  std::vector<std::future<std::string>> bound;
  for (int tid = 0; tid < config_.threads; ++tid) {
    std::promise<std::string> p;
    bound.push_back(p.get_future());
    threads_.emplace_back([sh, tid, p = std::move(p)]() mutable {
      WorkerThread(sh, tid).run(std::move(p));
    });
  }
  std::string error;
  std::vector<std::string> addresses;
  auto deadline = SteadyClock::now() + std::chrono::seconds(30);
  for (int tid = 0; tid < config_.threads; ++tid) {
    if (bound[tid].wait_until(deadline) != std::future_status::ready) {
      error = "worker " + std::to_string(tid) + " did not start within 30 s";
      break;
    }
    try {
      addresses.push_back(bound[tid].get());
    } catch (const std::exception& e) {
      error = e.what();
      break;
    }
  }
  if (!error.empty()) {
    sh->stopping.store(true);
    sh->go.set_value();
    for (auto& t : threads_) t.join();
    threads_.clear();
    if (sh->zap) sh->zap->stop();
    zmq_ctx_term(sh->ctx);
    stopped_ = true;
    throw std::runtime_error("Node.start: " + error);
  }
  for (int tid = 0; tid < config_.threads; ++tid)
    sh->rewrite[addresses[tid]] = inproc_address(config_.node_id, tid);
  sh->addresses = addresses;
  addresses_ = addresses;
  shared_ = sh;
  started_ = true;
  sh->go.set_value();
  log_info("node " + config_.node_id + " started " + std::to_string(config_.threads) + " workers");
}

void Node::stop() {
  std::lock_guard<std::mutex> lock(mu_);
  stop_locked();
}

void Node::stop_locked() {
  if (!started_ || stopped_) {
    stopped_ = true;
    return;
  }
  shared_->stopping.store(true);
  for (auto& t : threads_) t.join();
  threads_.clear();
  if (shared_->zap) shared_->zap->stop();  // its sockets must close before the context ends
  zmq_ctx_term(shared_->ctx);
  shared_->ctx = nullptr;
  stopped_ = true;
  log_info("node " + config_.node_id + " stopped");
}

bool Node::running() const {
  std::lock_guard<std::mutex> lock(mu_);
  return started_ && !stopped_;
}

std::vector<std::string> Node::worker_addresses() const {
  std::lock_guard<std::mutex> lock(mu_);
  return addresses_;
}

std::vector<NodeWorkerStats> Node::stats() const {
  std::shared_ptr<Shared> sh;
  {
    std::lock_guard<std::mutex> lock(mu_);
    sh = shared_;
  }
  if (!sh) return {};
  std::vector<NodeWorkerStats> out;
  {
    std::lock_guard<std::mutex> lock(sh->stats_mu);
    out = sh->stats;
  }
  // Read live: the handler outlives the workers' last epoch, and refusals are node-wide.
  std::uint64_t refused = sh->zap ? sh->zap->refused() : 0;
  std::uint64_t accepted = sh->zap ? sh->zap->accepted() : 0;
  for (auto& s : out) {
    s.auth_refused = refused;
    s.auth_accepted = accepted;
  }
  return out;
}

std::vector<NodeWorkerReport> Node::take_report(int timeout_ms) {
  std::shared_ptr<Shared> sh;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!started_ || stopped_) throw std::runtime_error("Node.take_report: the node is not running");
    sh = shared_;
  }
  const std::uint64_t gen = sh->report_wanted.fetch_add(1) + 1;
  std::unique_lock<std::mutex> lock(sh->stats_mu);
  auto all_done = [&] {
    for (std::uint64_t g : sh->report_gen)
      if (g < gen) return false;
    return true;
  };
  if (!sh->report_cv.wait_for(lock, std::chrono::milliseconds(std::max(timeout_ms, 0)), all_done))
    throw std::runtime_error("Node.take_report: a worker did not report within " +
                             std::to_string(timeout_ms) + " ms");
  return sh->reports;
}

}  // namespace anna
