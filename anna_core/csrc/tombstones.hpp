// Delete tombstones of one worker (dissertation 2.6.3: a delete is not a lattice operation, so
// replicas need a record of it to refuse older writes that arrive after it).
//
// Contract:
//   * record(key, ts, now) stamps key with the larger of ts and its current tombstone (ns since
//     the Unix epoch). find(key, &ts) says whether key has a tombstone. A write accepted at a
//     time <= the tombstone is older than the delete and must be ignored.
//   * A tombstone lives ttl_ns after it was last recorded (by the worker's clock `now`, not by
//     its own stamp, which may be a client's) and is removed by collect(now). Expiry is the
//     limit of the guarantee: a write older than the delete arriving after ttl resurrects it.
//   * At most kMax tombstones are kept; recording past that collects the oldest-recorded first
//     (collect/record return how many went early so the caller can log it).
//   * Not thread-safe: one Tombstones per WorkerCore.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
#include <utility>

namespace anna {

class Tombstones {
 public:
  static constexpr std::size_t kMax = 1u << 20;

  explicit Tombstones(std::uint64_t ttl_ns) : ttl_ns_(ttl_ns) {}

  // Returns the number of tombstones evicted early to stay within kMax.
  std::size_t record(const std::string& key, std::uint64_t ts, std::uint64_t now);
  bool find(const std::string& key, std::uint64_t* ts) const {
    if (map_.empty()) return false;  // the common case costs no hash
    auto it = map_.find(key);
    if (it == map_.end()) return false;
    *ts = it->second.ts;
    return true;
  }
  // Removes tombstones recorded more than ttl_ns before now.
  void collect(std::uint64_t now);
  bool empty() const { return map_.empty(); }
  std::size_t size() const { return map_.size(); }

 private:
  struct Entry {
    std::uint64_t ts = 0;
    std::uint64_t recorded = 0;
  };
  void pop_oldest();

  std::uint64_t ttl_ns_;
  std::unordered_map<std::string, Entry> map_;
  // (recorded, key) in recording order; an entry is stale when the key was recorded again.
  std::deque<std::pair<std::uint64_t, std::string>> order_;
};

}  // namespace anna
