// Space-Saving top-k with a HyperLogLog of distinct keys. See key_stats.hpp for the contract.
#include "key_stats.hpp"

#include <algorithm>
#include <cmath>
#include <functional>

#include "hash_ring.hpp"  // mix64

namespace anna {

KeyStats::KeyStats(std::size_t capacity)
    : capacity_(capacity == 0 ? 1 : capacity), hll_(std::size_t{1} << kHllBits, 0) {
  entries_.reserve(capacity_);
  heap_.reserve(capacity_);
  index_.reserve(capacity_);
}

void KeyStats::reset() {
  entries_.clear();
  heap_.clear();
  index_.clear();
  total_ = 0;
  evicted_ = 0;
  square_sum_ = 0;
  std::fill(hll_.begin(), hll_.end(), 0);
}

void KeyStats::sift_down(std::uint32_t i) {
  const std::uint32_t n = static_cast<std::uint32_t>(heap_.size());
  for (;;) {
    std::uint32_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < n && count_at(l) < count_at(m)) m = l;
    if (r < n && count_at(r) < count_at(m)) m = r;
    if (m == i) return;
    swap_slots(i, m);
    i = m;
  }
}

void KeyStats::sift_up(std::uint32_t i) {
  while (i > 0) {
    std::uint32_t p = (i - 1) / 2;
    if (count_at(p) <= count_at(i)) return;
    swap_slots(i, p);
    i = p;
  }
}

void KeyStats::hll_add(const std::string& key) {
  std::uint64_t h = mix64(std::hash<std::string>{}(key));
  std::size_t reg = h >> (64 - kHllBits);
  std::uint64_t rest = h << kHllBits;
  std::uint8_t rank = rest == 0 ? static_cast<std::uint8_t>(64 - kHllBits + 1)
                                : static_cast<std::uint8_t>(__builtin_clzll(rest) + 1);
  if (rank > hll_[reg]) hll_[reg] = rank;
}

void KeyStats::record(const std::string& key) {
  ++total_;
  auto it = index_.find(key);
  if (it != index_.end()) {
    Entry& e = entries_[it->second];
    square_sum_ += 2.0 * static_cast<double>(e.count - e.error) + 1.0;
    ++e.count;
    sift_down(e.pos);  // a count only grows: the entry can only move down
    return;
  }
  hll_add(key);
  square_sum_ += 1.0;
  if (entries_.size() < capacity_) {
    const auto slot = static_cast<std::uint32_t>(entries_.size());
    const auto pos = static_cast<std::uint32_t>(heap_.size());
    entries_.push_back(Entry{key, 1, 0, pos, index_.emplace(key, slot).first});
    heap_.push_back(slot);
    sift_up(pos);
    return;
  }
  ++evicted_;
  const std::uint32_t slot = heap_[0];
  Entry& min = entries_[slot];
  // Re-key the map node in place (no allocation when the key fits the old one's buffer).
  auto node = index_.extract(min.it);
  node.key() = key;
  min.it = index_.insert(std::move(node)).position;
  min.key = key;
  min.error = min.count;
  min.count += 1;
  sift_down(0);
}

std::uint64_t KeyStats::distinct() const {
  if (evicted_ == 0) return entries_.size();
  const double m = static_cast<double>(hll_.size());
  double sum = 0;
  std::size_t zeros = 0;
  for (std::uint8_t r : hll_) {
    sum += std::ldexp(1.0, -static_cast<int>(r));
    if (r == 0) ++zeros;
  }
  double estimate = (0.7213 / (1.0 + 1.079 / m)) * m * m / sum;
  if (estimate <= 2.5 * m && zeros > 0) estimate = m * std::log(m / static_cast<double>(zeros));
  // At least what is tracked now; at most the accesses.
  estimate = std::max(estimate, static_cast<double>(entries_.size()));
  estimate = std::min(estimate, static_cast<double>(total_));
  return static_cast<std::uint64_t>(std::llround(estimate));
}

std::uint64_t KeyStats::count(const std::string& key) const {
  auto it = index_.find(key);
  return it == index_.end() ? 0 : entries_[it->second].count;
}

namespace {
using KC = std::pair<std::string, std::uint64_t>;
}

std::vector<KC> KeyStats::hottest(std::size_t n) const {
  std::vector<KC> all;
  all.reserve(entries_.size());
  for (const auto& e : entries_) all.emplace_back(e.key, e.count);
  n = std::min(n, all.size());
  auto hotter = [](const KC& a, const KC& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  };
  std::partial_sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(n), all.end(), hotter);
  all.resize(n);
  return all;
}

std::vector<KC> KeyStats::coldest(std::size_t n) const {
  std::vector<KC> all;
  all.reserve(entries_.size());
  for (const auto& e : entries_) all.emplace_back(e.key, e.count);
  n = std::min(n, all.size());
  auto colder = [](const KC& a, const KC& b) {
    return a.second != b.second ? a.second < b.second : a.first < b.first;
  };
  std::partial_sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(n), all.end(), colder);
  all.resize(n);
  return all;
}

}  // namespace anna
