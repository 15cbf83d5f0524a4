// Delete tombstones. See tombstones.hpp for the contract.
#include "tombstones.hpp"

#include <algorithm>
#include <vector>

namespace anna {

std::size_t Tombstones::record(const std::string& key, std::uint64_t ts, std::uint64_t now) {
  auto [it, inserted] = map_.try_emplace(key);
  it->second.ts = inserted ? ts : std::max(it->second.ts, ts);
  it->second.recorded = now;
  order_.emplace_back(now, key);
  std::size_t evicted = 0;
  while (map_.size() > kMax) {
    pop_oldest();
    ++evicted;
  }
  // Re-recording a key leaves a stale entry behind; compact so order_ stays O(size).
  if (order_.size() > 2 * map_.size() + 64) {
    std::vector<std::pair<std::uint64_t, std::string>> live;
    live.reserve(map_.size());
    for (const auto& [k, e] : map_) live.emplace_back(e.recorded, k);
    std::sort(live.begin(), live.end());
    order_.assign(std::make_move_iterator(live.begin()), std::make_move_iterator(live.end()));
  }
  return evicted;
}

void Tombstones::pop_oldest() {
  while (!order_.empty()) {
    auto [recorded, key] = std::move(order_.front());
    order_.pop_front();
    auto it = map_.find(key);
    if (it != map_.end() && it->second.recorded == recorded) {
      map_.erase(it);
      return;
    }
  }
}

void Tombstones::collect(std::uint64_t now) {
  while (!order_.empty() && order_.front().first + ttl_ns_ <= now) {
    const auto& [recorded, key] = order_.front();
    auto it = map_.find(key);
    if (it != map_.end() && it->second.recorded == recorded) map_.erase(it);
    order_.pop_front();
  }
}

}  // namespace anna
