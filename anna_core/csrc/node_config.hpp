// Node configuration and the small JSON reader that parses it.
//
// Contract: parse_node_config(json) reads one flat JSON object with the keys of DESIGN.md
// "Node config keys": node_id (required, non-empty str), tier ("memory"|"disk" or 0|1),
// threads (int >= 1), ip (str), data_dir (str; required for disk), gossip_period_ms (int >= 1),
// max_value_bytes (int >= 1), pin_threads (bool), log_level (str), handoff_retry_ms,
// handoff_window_ms, fetch_timeout_ms, tombstone_ttl_ms (ints >= 1), max_push_sockets (int in
// [1, 1000000]: PUSH sockets each worker thread keeps open, least recently used closed
// beyond; lowered at start when the process' descriptor limit cannot hold them),
// push_handshake_ms (int in [1, 3600000]: how long a socket is kept after its last send before
// it may be closed for a new address, push_cache.hpp), stats_top_k
// (int in [1, 1000000]: keys each worker's access statistics track per report period,
// key_stats.hpp), service_rate (a number: 0, or in [0.001, 1e9]: capacity emulation, node.hpp),
// capacity_bytes (int in [0, 2^62]: the node's storage capacity for the autoscaling policy,
// 0 unknown), disk_sync ("none" | "interval" | "always": when a disk worker fsyncs its
// write-ahead log, store.hpp "Durability"), disk_sync_interval_ms (int in [1, 3600000]: the
// group-commit period of "interval"), client_links (bool: workers also serve clients over
// their own TCP listeners, link.hpp; secured with the node's keys with authentication),
// unix_links (bool: those listeners also take Unix-domain links from the same host), and
// authentication (curve.hpp): curve_secret_key and curve_public_key (Z85 strings) and
// curve_admitted (an object: Z85 public key -> role, the one nested value allowed); all three
// absent or empty means authentication off. Missing keys take the defaults below; null means
// "default". Unknown keys, wrong value types, other nested values, inconsistent keys
// (check_curve_keys) and syntax errors throw std::invalid_argument naming the problem (never
// quoting a secret key).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "curve.hpp"
#include "push_cache.hpp"
#include "store.hpp"

namespace anna {

struct NodeConfig {
  std::string node_id;
  int tier = 0;  // anna.Tier: 0 memory, 1 disk
  int threads = 1;
  std::string ip = "127.0.0.1";
  std::string data_dir;
  int gossip_period_ms = 100;
  std::size_t max_value_bytes = 64u << 20;
  bool pin_threads = true;
  std::string log_level = "warning";
  // Placement changes and deletes (worker_core.hpp, "Placement changes", "Deletes").
  int handoff_retry_ms = 500;     // resend period of an unacknowledged hand-off
  int handoff_window_ms = 5000;   // how long new owners fetch misses from previous owners
  int fetch_timeout_ms = 1000;    // how long a deferred GET waits for previous owners
  int tombstone_ttl_ms = 60000;   // how long a delete's tombstone outvotes older writes
  std::size_t max_push_sockets = 1024;  // per worker thread (push_cache.hpp)
  // How long a worker keeps a PUSH socket after its last send before it may close it for a
  // new address: a new peer's handshake has that long (push_cache.hpp ready_at()).
  int push_handshake_ms = 250;
  std::size_t stats_top_k = 1000;       // keys tracked per worker per report period (key_stats.hpp)
  // Capacity emulation (DESIGN.md "Capacity emulation"; not a production rate limiter): each
  // worker thread serves at most this many owned GET/PUT/DELETE tuples a second (0: no limit).
  double service_rate = 0;
  // The node's storage capacity in bytes for the autoscaling policy (0: unknown); each
  // worker's report carries capacity_bytes / threads.
  std::uint64_t capacity_bytes = 0;
  // When a disk worker fsyncs RocksDB's write-ahead log (store.hpp "Durability"): every
  // write before it is acknowledged ("always"), at most every disk_sync_interval_ms
  // ("interval", the default: a group commit, as Redis's appendfsync everysec), or never
  // ("none": the OS writes it back when it likes). Ignored by memory nodes.
  DiskSync disk_sync = DiskSync::kInterval;
  int disk_sync_interval_ms = 1000;
  // Client links (link.hpp): each worker also serves clients over its own TCP listener,
  // without ZeroMQ's I/O thread; with CURVE, secured links (secure_link.hpp).
  bool client_links = true;
  // Client links from the same host over a Unix-domain socket next to the TCP port
  // (link.hpp, unix_links.hpp): the same framing and handshake, less CPU per round trip.
  bool unix_links = true;
  // CURVE authentication of the workers' sockets (DESIGN.md "Authentication"); off when empty.
  CurveKeys curve;
};

// Bounds of a non-zero service_rate (requests per second per worker thread).
constexpr double kMinServiceRate = 0.001;
constexpr double kMaxServiceRate = 1e9;

// Headroom over max_value_bytes for the largest message a worker accepts: the key, the
// lattice's metadata and a gossip or hand-off batch (split at 4 MiB, plus one value).
constexpr std::size_t kFrameHeadroomBytes = 8u << 20;

// The largest frame a node's sockets accept (ZMQ_MAXMSGSIZE, per frame, applied from the
// handshake on): kMaxFrameBytes, whatever max_value_bytes is. Larger payloads travel as
// several frames (push_cache.hpp).
inline std::int64_t max_frame_bytes(const NodeConfig&) {
  return static_cast<std::int64_t>(kMaxFrameBytes);
}

// The largest payload a worker joins from several frames: max_value_bytes + headroom.
inline std::size_t max_message_bytes(const NodeConfig& c) {
  return c.max_value_bytes + kFrameHeadroomBytes;
}

NodeConfig parse_node_config(const std::string& json);

}  // namespace anna
