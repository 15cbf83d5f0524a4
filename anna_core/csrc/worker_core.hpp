// The sans-I/O Anna worker (dissertation 2.4.1): one per worker thread, owning one Store.
// It takes parsed messages and returns the messages to send; it has no sockets and no clock.
//
// Contract:
//   * handle(kind, payload, &out) dispatches one received [kind][payload] message ("request",
//     "gossip", "membership", "replication"). It returns false with a reason when the message
//     must be dropped (unknown kind, unparsable payload); the caller logs that. It never throws.
//   * Requests (KeyRequest): a KeyResponse (same type and request_id, responder = own address)
//     goes to response_address when it is set, one tuple per request tuple, each with a typed
//     error: WRONG_OWNER (+ the owners' addresses; none before the first Membership),
//     KEY_DNE (GET of a missing key; DELETE/UNSUBSCRIBE of a missing key/subscription),
//     LATTICE_MISMATCH, VALUE_TOO_LARGE (payload > max_value_bytes), UNKNOWN_LATTICE,
//     MALFORMED (payload does not parse; SUBSCRIBE without subscriber_address), STORE_FAILED.
//     An unknown request type answers KeyResponse.error = MALFORMED.
//   * PUT merges into the store and into the epoch changeset (merge-at-sender). end_epoch()
//     sends each changed key's merged delta once to each of the key's other replicas, in all
//     tiers, batched per destination as "gossip" KeyRequests (DELETEs before PUTs); received
//     gossip is merged (or deleted) but never re-gossiped. Subscribers of a key changed during
//     the epoch (by PUT, gossip or DELETE) get one UPDATE KeyResponse per key per epoch with the
//     current value (tuple error KEY_DNE when it was deleted).
//   * Membership replaces the placement (ignored when its version is older than the current
//     one); ReplicationUpdate changes per-key replication. After either, every stored key is
//     sent to replicas that newly hold it, and keys this worker no longer holds are dropped
//     (only when this worker's node is in the membership).
//   * Not thread-safe: one WorkerCore per thread; no locks or atomics.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>
#include <set>

#include "anna.pb.h"
#include "hash_ring.hpp"
#include "lattice_codec.hpp"
#include "store.hpp"

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
};

struct WorkerStats {
  std::uint64_t requests = 0;        // KeyRequest messages handled
  std::uint64_t tuples = 0;          // request tuples handled
  std::uint64_t gossip_in = 0;       // gossip messages received
  std::uint64_t gossip_out = 0;      // gossip messages produced
  std::uint64_t updates_out = 0;     // subscription UPDATEs produced
  std::uint64_t dropped = 0;         // malformed messages dropped
  std::uint64_t handed_off = 0;      // keys sent to new replicas after a placement change
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
  void end_epoch(std::vector<OutMessage>* out);

  bool has_membership() const { return has_membership_; }
  const ClusterMap& cluster_map() const { return map_; }
  const WorkerIdentity& identity() const { return id_; }
  const WorkerStats& stats() const { return stats_; }
  Store& store() { return *store_; }
  std::size_t changeset_size() const { return changeset_.size(); }

  // Largest gossip message payload before a batch is split.
  static constexpr std::size_t kMaxGossipBytes = 4u << 20;

 private:
  void handle_tuple(RequestType type, const KeyTuple& in, KeyTuple* out);
  bool owns(const std::string& key);
  void wrong_owner(const std::string& key, KeyTuple* out) const;
  void touch(const std::string& key);
  bool is_self(const WorkerRef& ref) const;
  void replicas_of(const std::string& key, const ClusterMap& map, std::vector<WorkerRef>* out) const;
  // Sends stored keys to replicas that hold them under `map_` but did not under `old`
  // (all replicas when `old` is null); drops keys this worker no longer holds.
  void redistribute(const ClusterMap* old, const std::vector<std::string>* only_keys,
                    std::vector<OutMessage>* out);

  WorkerIdentity id_;
  std::unique_ptr<Store> store_;
  ClusterMap map_;
  bool has_membership_ = false;
  int my_member_ = -1;  // this node's index on its tier's ring (ClusterMap::member_index)
  std::uint64_t membership_version_ = 0;

  std::unordered_map<std::string, AnyLattice> changeset_;
  std::unordered_set<std::string> deleted_;
  std::unordered_set<std::string> touched_;  // keys with subscribers changed this epoch
  std::unordered_map<std::string, std::set<std::string>> subscribers_;

  std::vector<WorkerRef> refs_;   // scratch
  KeyRequest request_;            // reused for parsing (keeps its allocations)
  KeyResponse response_;          // reused for answers
  KeyTuple discard_;
  std::string scratch_payload_;
  WorkerStats stats_;
};

// Serialises a message into a fresh string (for OutMessage payloads).
std::string serialize_message(const google::protobuf::MessageLite& msg);

}  // namespace anna
