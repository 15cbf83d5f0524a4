// Consistent hashing and ClusterMap. See hash_ring.hpp for the contract.
#include "hash_ring.hpp"

#include <algorithm>
#include <stdexcept>

namespace anna {

std::uint64_t mix64(std::uint64_t x) {  // splitmix64 finaliser
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

std::uint64_t stable_hash(std::string_view s) {
  std::uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a offset basis
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ULL;  // FNV prime
  }
  return mix64(h);
}

// Keys are placed on local rings with a hash independent of the global one, so the thread a
// key lands on is not correlated with the node it lands on.
static std::uint64_t local_key_hash(std::string_view key) {
  return mix64(stable_hash(key) ^ 0x9e3779b97f4a7c15ULL);
}

HashRing::HashRing(const std::vector<std::string>& names, int vnodes) : members_(names.size()) {
  if (vnodes < 1) vnodes = 1;
  points_.reserve(names.size() * static_cast<std::size_t>(vnodes));
  for (std::size_t m = 0; m < names.size(); ++m) {
    for (int v = 0; v < vnodes; ++v) {
      points_.emplace_back(stable_hash(names[m] + "#" + std::to_string(v)), static_cast<int>(m));
    }
  }
  std::sort(points_.begin(), points_.end());
}

void HashRing::walk(std::uint64_t h, std::size_t n, std::vector<int>* out) const {
  n = std::min(n, members_);
  if (n == 0 || points_.empty()) return;
  std::size_t start_size = out->size();
  auto it = std::lower_bound(points_.begin(), points_.end(), std::make_pair(h, -1));
  for (std::size_t step = 0; step < points_.size() && out->size() - start_size < n; ++step) {
    if (it == points_.end()) it = points_.begin();
    int m = it->second;
    if (std::find(out->begin() + start_size, out->end(), m) == out->end()) out->push_back(m);
    ++it;
  }
}

ClusterMap::ClusterMap(ReplicationVector default_replication, int vnodes)
    : default_(default_replication), vnodes_(vnodes < 1 ? 1 : vnodes) {}

void ClusterMap::add_node(const std::string& node_id, int tier, std::vector<std::string> addresses) {
  if (tier != 0 && tier != 1) throw std::invalid_argument("tier must be 0 (memory) or 1 (disk)");
  auto it = std::lower_bound(nodes_.begin(), nodes_.end(), node_id,
                             [](const NodeEntry& e, const std::string& id) { return e.node_id < id; });
  if (it != nodes_.end() && it->node_id == node_id) {
    it->tier = tier;
    it->addresses = std::move(addresses);
  } else {
    nodes_.insert(it, NodeEntry{node_id, tier, std::move(addresses)});
  }
  rebuild();
}

bool ClusterMap::remove_node(const std::string& node_id) {
  auto it = std::find_if(nodes_.begin(), nodes_.end(),
                         [&](const NodeEntry& e) { return e.node_id == node_id; });
  if (it == nodes_.end()) return false;
  nodes_.erase(it);
  rebuild();
  return true;
}

void ClusterMap::clear_nodes() {
  nodes_.clear();
  rebuild();
}

const ClusterMap::NodeEntry* ClusterMap::find_node(const std::string& node_id) const {
  auto it = std::lower_bound(nodes_.begin(), nodes_.end(), node_id,
                             [](const NodeEntry& e, const std::string& id) { return e.node_id < id; });
  return (it != nodes_.end() && it->node_id == node_id) ? &*it : nullptr;
}

void ClusterMap::rebuild() {
  for (int tier = 0; tier < 2; ++tier) {
    tier_nodes_[tier].clear();
    std::vector<std::string> names;
    for (std::size_t i = 0; i < nodes_.size(); ++i) {
      if (nodes_[i].tier == tier && !nodes_[i].addresses.empty()) {
        tier_nodes_[tier].push_back(static_cast<int>(i));
        names.push_back(nodes_[i].node_id);
      }
    }
    global_[tier] = HashRing(names, vnodes_);
  }
}

const HashRing& ClusterMap::local_ring(std::size_t threads) const {
  auto it = local_rings_.find(threads);
  if (it != local_rings_.end()) return it->second;
  std::vector<std::string> names;
  for (std::size_t t = 0; t < threads; ++t) names.push_back("thread-" + std::to_string(t));
  return local_rings_.emplace(threads, HashRing(names, vnodes_)).first->second;
}

void ClusterMap::set_replication(const std::string& key, const ReplicationVector& r) {
  overrides_[key] = r;
}

const ReplicationVector& ClusterMap::replication(std::string_view key) const {
  if (overrides_.empty()) return default_;
  auto it = overrides_.find(std::string(key));
  return it == overrides_.end() ? default_ : it->second;
}

void ClusterMap::responsible(std::string_view key, int tier, std::vector<WorkerRef>* out) const {
  out->clear();
  if (tier != 0 && tier != 1) return;
  const ReplicationVector& r = replication(key);
  std::uint32_t global = r.global(tier);
  if (global == 0) return;
  std::uint32_t local = std::max<std::uint32_t>(r.local(tier), 1);
  scratch_nodes_.clear();
  global_[tier].walk(stable_hash(key), global, &scratch_nodes_);
  std::uint64_t lh = local_key_hash(key);
  for (int member : scratch_nodes_) {
    const NodeEntry& node = nodes_[tier_nodes_[tier][member]];
    scratch_threads_.clear();
    local_ring(node.addresses.size()).walk(lh, local, &scratch_threads_);
    for (int t : scratch_threads_) out->push_back(WorkerRef{&node.node_id, t, &node.addresses[t]});
  }
}

int ClusterMap::member_index(const std::string& node_id, int tier) const {
  if (tier != 0 && tier != 1) return -1;
  for (std::size_t m = 0; m < tier_nodes_[tier].size(); ++m)
    if (nodes_[tier_nodes_[tier][m]].node_id == node_id) return static_cast<int>(m);
  return -1;
}

bool ClusterMap::is_responsible(std::string_view key, int tier, int member, int thread_id) const {
  if ((tier != 0 && tier != 1) || member < 0 ||
      static_cast<std::size_t>(member) >= tier_nodes_[tier].size())
    return false;
  const ReplicationVector& r = replication(key);
  std::uint32_t global = r.global(tier);
  if (global == 0) return false;
  if (global < global_[tier].members()) {
    scratch_nodes_.clear();
    global_[tier].walk(stable_hash(key), global, &scratch_nodes_);
    if (std::find(scratch_nodes_.begin(), scratch_nodes_.end(), member) == scratch_nodes_.end())
      return false;
  }
  const NodeEntry& node = nodes_[tier_nodes_[tier][member]];
  if (thread_id < 0 || static_cast<std::size_t>(thread_id) >= node.addresses.size()) return false;
  std::uint32_t local = std::max<std::uint32_t>(r.local(tier), 1);
  if (local >= node.addresses.size()) return true;
  scratch_threads_.clear();
  local_ring(node.addresses.size()).walk(local_key_hash(key), local, &scratch_threads_);
  return std::find(scratch_threads_.begin(), scratch_threads_.end(), thread_id) !=
         scratch_threads_.end();
}

std::vector<std::string> ClusterMap::responsible(std::string_view key, int tier) const {
  std::vector<WorkerRef> refs;
  responsible(key, tier, &refs);
  std::vector<std::string> out;
  out.reserve(refs.size());
  for (const auto& r : refs) out.push_back(*r.address);
  return out;
}

std::vector<std::string> ClusterMap::addresses(std::string_view key, bool all_tiers) const {
  std::vector<std::string> out = responsible(key, 0);
  if (all_tiers || out.empty()) {
    std::vector<std::string> disk = responsible(key, 1);
    out.insert(out.end(), disk.begin(), disk.end());
  }
  return out;
}

}  // namespace anna
