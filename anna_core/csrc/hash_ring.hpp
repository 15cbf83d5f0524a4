// Consistent hashing and key placement (dissertation 3.2): a global ring of nodes per tier, a
// local ring of worker threads per node, and per-key replication vectors.
//
// Contract:
//   * stable_hash(s) is a deterministic 64-bit hash (FNV-1a + splitmix64 finaliser): the same
//     value in every process and on every run (std::hash is not).
//   * HashRing places each member at `vnodes` pseudo-random points; walk(h, n) returns up to n
//     distinct members clockwise from position h (fewer if the ring has fewer members).
//   * ClusterMap holds the membership (node id -> tier, worker addresses indexed by thread id),
//     the default replication vector and per-key overrides. responsible(key, tier) is: the
//     first `global` distinct nodes of that tier clockwise from the key's hash on the tier's
//     global ring, and on each of them the first `local` distinct threads clockwise on its local
//     ring (counts clamp to what exists; a local count of 0 with a non-zero global count is
//     treated as 1). The same inputs give the same answer in every process. No locks: one
//     ClusterMap belongs to one thread.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace anna {

std::uint64_t stable_hash(std::string_view s);
std::uint64_t mix64(std::uint64_t x);

struct ReplicationVector {
  std::uint32_t memory_global = 1;
  std::uint32_t memory_local = 1;
  std::uint32_t disk_global = 0;
  std::uint32_t disk_local = 1;

  std::uint32_t global(int tier) const { return tier == 0 ? memory_global : disk_global; }
  std::uint32_t local(int tier) const { return tier == 0 ? memory_local : disk_local; }
  bool operator==(const ReplicationVector& o) const {
    return memory_global == o.memory_global && memory_local == o.memory_local &&
           disk_global == o.disk_global && disk_local == o.disk_local;
  }
};

class HashRing {
 public:
  HashRing() = default;
  // Members are identified by their index in `names`; `names` seed the vnode positions.
  HashRing(const std::vector<std::string>& names, int vnodes);

  // Appends to *out up to n distinct member indices clockwise from position h.
  void walk(std::uint64_t h, std::size_t n, std::vector<int>* out) const;
  std::size_t members() const { return members_; }

 private:
  std::vector<std::pair<std::uint64_t, int>> points_;  // sorted by position
  std::size_t members_ = 0;
};

// A worker as placement sees it.
struct WorkerRef {
  const std::string* node_id;
  int thread_id;
  const std::string* address;
};

class ClusterMap {
 public:
  struct NodeEntry {
    std::string node_id;
    int tier = 0;
    std::vector<std::string> addresses;  // by thread id
  };

  explicit ClusterMap(ReplicationVector default_replication = {}, int vnodes = 64);

  // Adds the node, or replaces the node with the same id.
  void add_node(const std::string& node_id, int tier, std::vector<std::string> addresses);
  bool remove_node(const std::string& node_id);
  void clear_nodes();

  void set_default_replication(const ReplicationVector& r) { default_ = r; }
  const ReplicationVector& default_replication() const { return default_; }
  void set_replication(const std::string& key, const ReplicationVector& r);
  void clear_replication_overrides() { overrides_.clear(); }
  const ReplicationVector& replication(std::string_view key) const;
  const std::unordered_map<std::string, ReplicationVector>& overrides() const {
    return overrides_;
  }

  // Appends the workers responsible for key in tier to *out (cleared first).
  void responsible(std::string_view key, int tier, std::vector<WorkerRef>* out) const;
  std::vector<std::string> responsible(std::string_view key, int tier) const;
  // The position of node_id among `tier`'s ring members, or -1 (stable until the next change).
  int member_index(const std::string& node_id, int tier) const;
  // Whether thread `thread_id` of the tier member `member` (from member_index) is responsible
  // for key: the same answer as searching responsible(), without building the list.
  bool is_responsible(std::string_view key, int tier, int member, int thread_id) const;
  // Memory-tier replicas if the key has any there, else disk; all tiers when all_tiers.
  std::vector<std::string> addresses(std::string_view key, bool all_tiers) const;

  const std::vector<NodeEntry>& nodes() const { return nodes_; }
  const NodeEntry* find_node(const std::string& node_id) const;
  int vnodes() const { return vnodes_; }

 private:
  void rebuild();
  const HashRing& local_ring(std::size_t threads) const;

  ReplicationVector default_;
  int vnodes_;
  std::vector<NodeEntry> nodes_;                // sorted by node id
  std::vector<int> tier_nodes_[2];             // indices into nodes_, per tier
  HashRing global_[2];                          // members index tier_nodes_[tier]
  mutable std::map<std::size_t, HashRing> local_rings_;  // by thread count
  std::unordered_map<std::string, ReplicationVector> overrides_;
  mutable std::vector<int> scratch_nodes_, scratch_threads_;
};

}  // namespace anna
