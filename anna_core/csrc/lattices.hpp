// The Anna lattices and their merges: the one implementation, shared by the stores, the worker
// and the Python bindings.
//
// Contract: every `merge(other)` is associative, commutative and idempotent (ACI) under
// `operator==`, so replicas that see the same updates in any order, any number of times,
// converge. Every tie is broken deterministically by value:
//   LWWLattice              larger timestamp wins; equal timestamps -> the larger value wins.
//   SetLattice              union.            OrderedSetLattice  union (revealed sorted).
//   MaxLattice              max (bottom is INT64_MIN).
//   MapLattice              key-wise max of int64 values.
//   PriorityLattice         lowest priority wins; equal priorities -> the smaller value wins.
//                           NaN priorities are not representable (callers must reject them).
//   Single/MultiKeyCausal   a set of versions (vector clock [, dependencies], values); merge is
//                           the union of both sides' versions minus every version whose clock
//                           is strictly dominated by another's. For two single-version values
//                           this is "the dominating side wins, concurrent sides are unioned";
//                           keeping versions separately (rather than one summary) is what makes
//                           the merge associative. The revealed clock is the entry-wise max,
//                           the revealed values the union and the revealed dependencies the
//                           key-wise, entry-wise max over the surviving versions.
// Vector clocks never hold zero entries (a missing entry means 0); constructors normalise.
// No I/O, no allocation beyond the values themselves, no locks: values are owned by one thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace anna {

// Numbering matches anna.LatticeType in proto/anna.proto.
enum class LatticeKind : int {
  kLWW = 1,
  kSet = 2,
  kOrderedSet = 3,
  kMax = 4,
  kMap = 5,
  kPriority = 6,
  kSingleCausal = 7,
  kMultiCausal = 8,
};

struct LWWLattice {
  static constexpr LatticeKind kKind = LatticeKind::kLWW;
  std::uint64_t timestamp = 0;
  std::string value;

  void merge(const LWWLattice& o) {
    if (o.timestamp > timestamp || (o.timestamp == timestamp && o.value > value)) {
      timestamp = o.timestamp;
      value = o.value;
    }
  }
  bool operator==(const LWWLattice& o) const {
    return timestamp == o.timestamp && value == o.value;
  }
};

// Shared by SetLattice and OrderedSetLattice, which differ only in how they are revealed.
template <LatticeKind K>
struct BasicSetLattice {
  static constexpr LatticeKind kKind = K;
  std::set<std::string> values;

  void merge(const BasicSetLattice& o) { values.insert(o.values.begin(), o.values.end()); }
  bool operator==(const BasicSetLattice& o) const { return values == o.values; }
};
using SetLattice = BasicSetLattice<LatticeKind::kSet>;
using OrderedSetLattice = BasicSetLattice<LatticeKind::kOrderedSet>;

struct MaxLattice {
  static constexpr LatticeKind kKind = LatticeKind::kMax;
  std::int64_t value = std::numeric_limits<std::int64_t>::min();

  void merge(const MaxLattice& o) { value = std::max(value, o.value); }
  bool operator==(const MaxLattice& o) const { return value == o.value; }
};

struct MapLattice {
  static constexpr LatticeKind kKind = LatticeKind::kMap;
  std::map<std::string, std::int64_t> entries;

  void merge(const MapLattice& o) {
    for (const auto& [k, v] : o.entries) {
      auto [it, inserted] = entries.emplace(k, v);
      if (!inserted && v > it->second) it->second = v;
    }
  }
  bool operator==(const MapLattice& o) const { return entries == o.entries; }
};

struct PriorityLattice {
  static constexpr LatticeKind kKind = LatticeKind::kPriority;
  double priority = std::numeric_limits<double>::infinity();
  std::string value;

  void merge(const PriorityLattice& o) {
    if (o.priority < priority || (o.priority == priority && o.value < value)) {
      priority = o.priority;
      value = o.value;
    }
  }
  bool operator==(const PriorityLattice& o) const {
    return priority == o.priority && value == o.value;
  }
};

// ---------------------------------------------------------------- causal

using VClock = std::map<std::string, std::uint64_t>;

inline void normalize_clock(VClock* vc) {
  for (auto it = vc->begin(); it != vc->end();) {
    if (it->second == 0) it = vc->erase(it); else ++it;
  }
}

// Entry-wise max of b into a.
inline void merge_clock(VClock* a, const VClock& b) {
  for (const auto& [node, count] : b) {
    auto [it, inserted] = a->emplace(node, count);
    if (!inserted && count > it->second) it->second = count;
  }
}

// True when a < b: every entry of a is <= b's and a != b (clocks are normalised).
inline bool strictly_dominated(const VClock& a, const VClock& b) {
  if (a.size() > b.size()) return false;
  for (const auto& [node, count] : a) {
    auto it = b.find(node);
    if (it == b.end() || it->second < count) return false;
  }
  return a != b;
}

struct CausalEntry {
  VClock clock;
  std::map<std::string, VClock> dependencies;  // always empty for single-key causal
  std::set<std::string> values;

  bool operator<(const CausalEntry& o) const {
    return std::tie(clock, dependencies, values) < std::tie(o.clock, o.dependencies, o.values);
  }
  bool operator==(const CausalEntry& o) const {
    return clock == o.clock && dependencies == o.dependencies && values == o.values;
  }
};

template <LatticeKind K>
struct BasicCausalLattice {
  static constexpr LatticeKind kKind = K;
  // The maximal versions (no clock here is strictly dominated by another). Never empty for a
  // lattice built by single() or decoded from a payload; merge keeps it non-empty.
  std::set<CausalEntry> versions;

  static BasicCausalLattice single(CausalEntry v) {
    normalize_clock(&v.clock);
    for (auto& [key, dep] : v.dependencies) normalize_clock(&dep);
    BasicCausalLattice out;
    out.versions.insert(std::move(v));
    return out;
  }

  void merge(const BasicCausalLattice& o) {
    versions.insert(o.versions.begin(), o.versions.end());
    prune();
  }

  VClock clock() const {
    VClock out;
    for (const auto& v : versions) merge_clock(&out, v.clock);
    return out;
  }
  std::set<std::string> values() const {
    std::set<std::string> out;
    for (const auto& v : versions) out.insert(v.values.begin(), v.values.end());
    return out;
  }
  std::map<std::string, VClock> dependencies() const {
    std::map<std::string, VClock> out;
    for (const auto& v : versions)
      for (const auto& [key, dep] : v.dependencies) merge_clock(&out[key], dep);
    return out;
  }

  bool operator==(const BasicCausalLattice& o) const { return versions == o.versions; }

  // Drops every version strictly dominated by another. O(n^2) in the number of concurrent
  // versions, which stays tiny in practice.
  void prune() {
    if (versions.size() < 2) return;
    std::vector<const CausalEntry*> all;
    all.reserve(versions.size());
    for (const auto& v : versions) all.push_back(&v);
    std::set<CausalEntry> kept;
    for (const auto* v : all) {
      bool dominated = false;
      for (const auto* w : all) {
        if (w != v && strictly_dominated(v->clock, w->clock)) { dominated = true; break; }
      }
      if (!dominated) kept.insert(*v);
    }
    versions.swap(kept);
  }
};
using SingleKeyCausalLattice = BasicCausalLattice<LatticeKind::kSingleCausal>;
using MultiKeyCausalLattice = BasicCausalLattice<LatticeKind::kMultiCausal>;

}  // namespace anna
