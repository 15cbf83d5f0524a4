// The sans-I/O Anna worker (dissertation 2.4.1): one per worker thread, owning one Store.
// It takes parsed messages and returns the messages to send; it has no sockets and reads no
// clock (the caller sets its time).
//
// Contract:
//   * handle(kind, payload, &out) dispatches one received [kind][payload] message ("request",
//     "gossip", "membership", "replication", and between workers "handoff", "handoff_ack",
//     "fetch", "fetched"). It returns false with a reason when the message must be dropped
//     (unknown kind, unparsable payload, a handoff/fetch without response_address, a
//     Membership with vnodes > kMaxVnodes); the caller logs that. It never throws.
//   * Requests (KeyRequest): a KeyResponse (same type and request_id, responder = own address)
//     goes to response_address when it is set, one tuple per request tuple, each with a typed
//     error: WRONG_OWNER (+ the owners' addresses; none before the first Membership),
//     KEY_DNE (GET of a missing key; DELETE/UNSUBSCRIBE of a missing key/subscription),
//     LATTICE_MISMATCH, VALUE_TOO_LARGE (payload > max_value_bytes), UNKNOWN_LATTICE,
//     MALFORMED (payload does not parse; SUBSCRIBE without subscriber_address), STORE_FAILED,
//     DISK_FULL (the disk store refused the write: store.hpp); with these two the tuple's
//     error_detail names the node, the worker and the store's own account of the failure.
//     An unknown request type answers KeyResponse.error = MALFORMED.
//   * PUT merges into the store and into the epoch changeset (merge-at-sender). end_epoch()
//     sends each changed key's merged delta once to each of the key's other replicas, in all
//     tiers, batched per destination as "gossip" KeyRequests (DELETEs before PUTs); received
//     gossip is merged (or deleted) but never re-gossiped. Subscribers of a key changed during
//     the epoch (by PUT, gossip or DELETE) get one UPDATE KeyResponse per key per epoch with the
//     current value (tuple error KEY_DNE when it was deleted).
//   * Membership replaces the placement (ignored when its version is older than the current
//     one; dropped when its vnodes is above kMaxVnodes; vnodes 0 means 64); ReplicationUpdate
//     changes per-key replication. Either is a placement change: handoff.cpp ("acknowledged
//     hand-off") and fetch.cpp ("fetch window") state what follows.
//   * Deletes leave timestamped tombstones (tombstones.hpp): a DELETE stamps the key with the
//     tuple's timestamp (0: the worker's clock); gossip and hand-off PUTs carry the time the
//     sending replica accepted the write and are ignored when not newer than the tombstone; a
//     client PUT on a tombstoned key is accepted at max(now, tombstone + 1).
//   * Time: the worker reads no clock. set_now(ns since the Unix epoch) sets it; the node shell
//     calls it before each batch of messages and each epoch. Timers (hand-off retries, the
//     fetch window, fetch timeouts, tombstone expiry) advance only in end_epoch().
//   * Statistics (DESIGN.md "Statistics"; dissertation 3.2.4): every GET, PUT and DELETE tuple
//     this worker owns counts one access of its key in a bounded KeyStats (key_stats.hpp) of
//     identity.stats_top_k keys, and in the period's gets/puts/deletes. take_report() returns
//     the period's PeriodReport and starts a new period (resets those counters; the
//     cumulative WorkerStats are untouched). Gossip, hand-off and fetches are not accesses.
//     The report's key lists carry the stored values' sizes, and `coldest` begins with owned
//     stored keys never accessed this period (PeriodReport).
//   * "scan" (ScanRequest, cluster key only: the node shell drops it from client keys) answers
//     one page of the store (Store::scan_page) as a ScanResponse to response_address: every
//     stored key, owned or held for a hand-off, with its current value. No state is kept
//     between pages (the cursor carries it). Scans are not accesses.
//   * Not thread-safe: one WorkerCore per thread; no locks or atomics.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>
#include <set>

#include "anna.pb.h"
#include "hash_ring.hpp"
#include "key_stats.hpp"
#include "lattice_codec.hpp"
#include "store.hpp"
#include "tombstones.hpp"

namespace anna {

// One outgoing ZMQ message. frames = kind.empty() ? [payload] : [kind, payload].
struct OutMessage {
  std::string address;
  std::string kind;
  std::string payload;
};

struct WorkerIdentity {
  std::string node_id;
  int tier = 0;  // anna.Tier
  int thread_id = 0;
  std::string address;  // this worker's request address (tcp) as peers know it
  std::size_t max_value_bytes = 64u << 20;
  // Placement changes and deletes (node config keys of the same names).
  std::uint64_t handoff_retry_ms = 500;
  std::uint64_t handoff_window_ms = 5000;
  std::uint64_t fetch_timeout_ms = 1000;
  std::uint64_t tombstone_ttl_ms = 60000;
  std::size_t stats_top_k = 1000;  // keys tracked per report period (KeyStats capacity)
};

struct WorkerStats {
  std::uint64_t requests = 0;        // KeyRequest messages handled
  std::uint64_t tuples = 0;          // request tuples handled
  std::uint64_t gossip_in = 0;       // gossip messages received
  std::uint64_t gossip_out = 0;      // gossip messages produced
  std::uint64_t updates_out = 0;     // subscription UPDATEs produced
  std::uint64_t dropped = 0;         // malformed messages dropped
  std::uint64_t handed_off = 0;      // keys sent to new replicas after a placement change
  std::uint64_t handoff_in = 0;      // hand-off messages received
  std::uint64_t handoff_resent = 0;  // hand-off messages sent again for want of an ack
  std::uint64_t handoff_pending = 0; // keys + subscriptions handed off and not yet acked
  std::uint64_t membership_version = 0;  // of the Membership in force (0: none yet)
  std::uint64_t orphaned = 0;        // held keys with no replica under the map in force
  bool member = false;               // this worker's node is in the map in force
  std::uint64_t fetches_out = 0;     // "fetch" messages sent for deferred GETs
  std::uint64_t deferred = 0;        // GETs waiting for previous owners now
  std::uint64_t tombstones = 0;      // delete tombstones kept now
  std::uint64_t scans = 0;           // "scan" pages answered (backups)
};

// A key's accesses in one period and its value's size (0: unknown).
struct KeyCount {
  std::string key;
  std::uint64_t accesses = 0;
  std::uint64_t size = 0;
};

// One worker's statistics for one report period (field names as anna_core/autoscale/
// summaries.py WorkerReport where they share a meaning).
struct PeriodReport {
  std::uint64_t gets = 0, puts = 0, deletes = 0;  // tuples this worker owns
  std::uint64_t requests = 0;           // gets + puts + deletes
  std::uint64_t key_accesses = 0;       // = requests
  std::uint64_t accessed_keys = 0;      // distinct keys accessed (KeyStats::distinct)
  double access_square_sum = 0;         // sum over keys of accesses^2 (KeyStats::square_sum)
  double access_mean = 0;               // key_accesses / accessed_keys (0 when none)
  bool exact = true;                    // no key was evicted from the top-k this period
  std::uint64_t stored_bytes = 0;       // workload bytes at the report (no __anna__/ keys)
  std::uint64_t stored_keys = 0;        // Store::size() at the report
  // Each KeyCount's size is the stored value's size here (Store::value_size; 0: not stored
  // here, or a disk worker past kMaxDiskSizeLookups).
  std::vector<KeyCount> hottest;        // at most kReportKeys, most accessed first
  std::vector<KeyCount> coldest;        // at most kReportKeys: owned stored keys not in the
                                        // top-k (accesses 0, sampled by Store::scan_keys over at
                                        // most kColdScanKeys keys), then tracked keys, least
                                        // accessed first
  std::vector<KeyCount> tracked;        // owned keys with a non-default replication (<= K)
};

class WorkerCore {
 public:
  WorkerCore(WorkerIdentity id, std::unique_ptr<Store> store);

  bool handle(std::string_view kind, std::string_view payload, std::vector<OutMessage>* out,
              std::string* why);
  void handle_request(const KeyRequest& request, std::vector<OutMessage>* out);
  void handle_gossip(const KeyRequest& gossip, std::vector<OutMessage>* out);
  void handle_membership(const Membership& membership, std::vector<OutMessage>* out);
  void handle_replication(const ReplicationUpdate& update, std::vector<OutMessage>* out);
  void handle_handoff(const KeyRequest& handoff, std::vector<OutMessage>* out);
  void handle_handoff_ack(const KeyResponse& ack);
  void handle_fetch(const KeyRequest& fetch, std::vector<OutMessage>* out);
  void handle_fetched(const KeyResponse& fetched, std::vector<OutMessage>* out);
  // A "scan" (backups): one page of the store (Store::scan_page) as a ScanResponse.
  void handle_scan(const ScanRequest& scan, std::vector<OutMessage>* out);
  // Gossip, subscription UPDATEs, then the timers: hand-off resends, fetch timeouts, the end
  // of the fetch window, tombstone expiry.
  void end_epoch(std::vector<OutMessage>* out);

  // The worker's clock: ns since the Unix epoch, as the node shell last set it.
  void set_now(std::uint64_t now_ns) { now_ = now_ns; }
  // Whether the message being handled came from a client key (authentication on): such a
  // sender may not write keys reserved to the cluster (reserved_for_cluster below).
  void set_sender_is_client(bool client) { from_client_ = client; }
  std::uint64_t now() const { return now_; }

  bool has_membership() const { return has_membership_; }
  const ClusterMap& cluster_map() const { return map_; }
  const WorkerIdentity& identity() const { return id_; }
  WorkerStats stats() const;
  // Closes the report period: its statistics, then resets them (see the contract).
  PeriodReport take_report();
  static constexpr std::size_t kReportKeys = 100;  // hottest / coldest keys per report
  // Stored keys a report scans for never-accessed keys (the coldest), per report.
  static constexpr std::size_t kColdScanKeys = 4 * kReportKeys;
  // Value sizes a disk worker's report reads (RocksDB point reads), per report.
  static constexpr std::size_t kMaxDiskSizeLookups = 512;
  // Owned GET/PUT/DELETE tuples handled so far this period (the node shell's capacity
  // emulation paces on it; reset by take_report).
  std::uint64_t period_requests() const { return period_gets_ + period_puts_ + period_deletes_; }
  Store& store() { return *store_; }
  std::size_t changeset_size() const { return changeset_.size(); }

  // Scan pages (backups): the defaults and the most a ScanRequest may ask for.
  static constexpr std::size_t kScanPageKeys = 1000;
  static constexpr std::size_t kMaxScanPageKeys = 100000;
  static constexpr std::size_t kScanPageBytes = 4u << 20;
  static constexpr std::size_t kMaxScanPageBytes = 64u << 20;
  // Largest gossip message payload before a batch is split.
  static constexpr std::size_t kMaxGossipBytes = 4u << 20;
  // Largest accepted Membership.vnodes (larger ones are dropped as malformed).
  static constexpr std::uint32_t kMaxVnodes = 4096;
  // GETs deferred at once waiting for previous owners; past that a miss answers KEY_DNE.
  static constexpr std::size_t kMaxDeferred = 10000;
  // Previous placements kept for the fetch window (the oldest goes first).
  static constexpr std::size_t kMaxPreviousMaps = 8;

 private:
  void handle_tuple(RequestType type, const KeyTuple& in, KeyTuple* out);
  bool owns(const std::string& key);
  std::uint64_t accept_put(const std::string& key);  // acceptance time of a client PUT
  bool stale_write(const std::string& key, std::uint64_t ts) const;
  // Tombstones key at ts and removes its value; returns the store's answer to the removal.
  AnnaError apply_delete(const std::string& key, std::uint64_t ts);
  void wrong_owner(const std::string& key, KeyTuple* out) const;
  void touch(const std::string& key);
  bool is_self(const WorkerRef& ref) const;
  void replicas_of(const std::string& key, const ClusterMap& map, std::vector<WorkerRef>* out) const;
  // ---- handoff.cpp: acknowledged hand-off after a placement change.
  // Plans a hand-off of every stored key and subscription (or only `only_keys`) whose replicas
  // under map_ include workers that were not replicas under `old` (all replicas when `old` is
  // null or this node has left), sends it, and drops keys nobody else is to hold.
  void placement_changed(const ClusterMap* old, const std::vector<std::string>* only_keys,
                         std::vector<OutMessage>* out);
  void plan_handoff(const std::string& key, const ClusterMap* old, bool me_present,
                    std::vector<std::string>* to_send, std::vector<std::string>* to_drop);
  void send_handoffs(const std::vector<std::string>& keys, bool resend, std::vector<OutMessage>* out);
  // Hands a key received here that this worker does not hold to its replicas, after a retry period.
  void forward_later(const std::string& key, std::uint64_t ts);
  void finish_handoff(const std::string& key);
  void drop_if_not_held(const std::string& key);
  void resend_handoffs(std::vector<OutMessage>* out);
  std::uint32_t handoff_items(const std::string& key);

  // ---- fetch.cpp: fetch window.
  void open_fetch_window(ClusterMap old);
  bool fetch_candidates(const std::string& key, std::vector<std::string>* from);
  void defer(const KeyRequest& request, const KeyResponse& response,
             const std::vector<int>& missing, std::vector<OutMessage>* out);
  void answer_deferred(std::uint64_t id, std::vector<OutMessage>* out);
  void expire_fetches(std::vector<OutMessage>* out);

  WorkerIdentity id_;
  std::unique_ptr<Store> store_;
  ClusterMap map_;
  bool has_membership_ = false;
  int my_member_ = -1;  // this node's index on its tier's ring (ClusterMap::member_index)
  std::uint64_t membership_version_ = 0;

  std::uint64_t now_ = 0;  // ns since the Unix epoch (set_now)
  bool from_client_ = false;  // set_sender_is_client

  // An epoch's merged delta of one key, and the latest acceptance time among its writes.
  struct Delta {
    AnyLattice value;
    std::uint64_t ts = 0;
  };
  std::unordered_map<std::string, Delta> changeset_;
  std::unordered_map<std::string, std::uint64_t> deleted_;  // key -> delete timestamp
  Tombstones tombstones_;
  std::unordered_set<std::string> touched_;  // keys with subscribers changed this epoch
  std::unordered_map<std::string, std::set<std::string>> subscribers_;

  // Hand-off in flight, by key: the workers that have not acknowledged it yet.
  struct PendingHandoff {
    std::vector<std::string> targets;
    std::uint64_t ts = 0;       // the value's acceptance time as handed off
    std::uint64_t sent_at = 0;  // worker clock of the last send
    std::uint32_t items = 0;    // value (0 or 1) + subscriptions, counted in handoff_items_
  };
  std::unordered_map<std::string, PendingHandoff> handoff_;
  std::uint64_t handoff_items_ = 0;
  // Held keys with no replica under the map in force (handoff.cpp): never dropped.
  std::unordered_set<std::string> orphans_;
  std::uint64_t next_id_ = 0;  // request ids of hand-offs and fetches

  // GETs waiting for previous owners (fetch window).
  struct Deferred {
    std::string response_address;
    KeyResponse response;
    std::vector<int> missing;             // tuple indices to read again when answering
    std::vector<std::string> fetch_ids;   // outstanding fetch request ids
    std::uint64_t deadline = 0;
  };
  std::deque<ClusterMap> previous_maps_;
  std::uint64_t window_until_ = 0;
  std::unordered_map<std::uint64_t, Deferred> deferred_;
  std::unordered_map<std::string, std::uint64_t> fetches_;  // fetch request id -> deferred id

  std::vector<WorkerRef> refs_;   // scratch
  KeyRequest request_;            // reused for parsing (keeps its allocations)
  KeyResponse response_;          // reused for answers
  KeyTuple discard_;
  std::string scratch_payload_;
  WorkerStats stats_;
  // The report period (take_report).
  KeyStats key_stats_;
  std::uint64_t period_gets_ = 0, period_puts_ = 0, period_deletes_ = 0;
};

// Serialises a message into a fresh string (for OutMessage payloads).
std::string serialize_message(const google::protobuf::MessageLite& msg);

}  // namespace anna
