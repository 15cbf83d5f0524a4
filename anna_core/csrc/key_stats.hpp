// Per-key access statistics of one worker thread for one report period (dissertation 3.2.4),
// in bounded memory.
//
// Contract:
//   * KeyStats(capacity) tracks at most `capacity` keys (>= 1) with the Space-Saving algorithm
//     (Metwally et al.): record(key) increments the key's counter when it is tracked, else
//     takes a free slot (count 1), else replaces the tracked key of least count c (the new key
//     gets count c + 1 and error c). A tracked key's count is an upper bound of its accesses
//     this period and count - error a lower bound; every key with more than total/capacity
//     accesses is tracked. While no key was ever replaced (evicted() == 0) counts are exact.
//   * total() is the exact number of record() calls. distinct() is the number of distinct
//     keys recorded: exact while nothing was evicted, else a HyperLogLog estimate (1024
//     registers, ~3 % standard error). square_sum() is the sum over keys of accesses^2: exact
//     while nothing was evicted, else accumulated from the lower bounds (an underestimate).
//   * hottest(n) / coldest(n): up to n tracked keys by count, descending / ascending (ties by
//     key). count(key) is a tracked key's count, 0 otherwise. reset() forgets everything
//     (keeps the allocations).
//   * Cost: record() is one hash lookup and a sift in a binary min-heap of <= capacity
//     entries; a string copy only when a new key enters. Not thread-safe (one per worker).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace anna {

class KeyStats {
 public:
  explicit KeyStats(std::size_t capacity);

  void record(const std::string& key);
  void reset();

  std::size_t capacity() const { return capacity_; }
  std::size_t size() const { return entries_.size(); }
  std::uint64_t total() const { return total_; }
  std::uint64_t evicted() const { return evicted_; }
  std::uint64_t distinct() const;
  double square_sum() const { return square_sum_; }
  std::uint64_t count(const std::string& key) const;
  std::vector<std::pair<std::string, std::uint64_t>> hottest(std::size_t n) const;
  std::vector<std::pair<std::string, std::uint64_t>> coldest(std::size_t n) const;

  static constexpr int kHllBits = 10;  // 1024 registers

 private:
  using Index = std::unordered_map<std::string, std::uint32_t>;  // key -> slot
  struct Entry {
    std::string key;
    std::uint64_t count = 0;
    std::uint64_t error = 0;
    std::uint32_t pos = 0;  // position in heap_
    Index::iterator it;     // its node in index_ (stable: index_ never rehashes, reserve())
  };
  void sift_down(std::uint32_t i);
  void sift_up(std::uint32_t i);
  void swap_slots(std::uint32_t a, std::uint32_t b) {
    std::swap(heap_[a], heap_[b]);
    entries_[heap_[a]].pos = a;
    entries_[heap_[b]].pos = b;
  }
  std::uint64_t count_at(std::uint32_t i) const { return entries_[heap_[i]].count; }
  void hll_add(const std::string& key);

  std::size_t capacity_;
  std::vector<Entry> entries_;                            // slots; a slot never moves
  std::vector<std::uint32_t> heap_;                       // min-heap of slots by count
  Index index_;
  std::uint64_t total_ = 0;
  std::uint64_t evicted_ = 0;
  double square_sum_ = 0;
  std::vector<std::uint8_t> hll_;
};

}  // namespace anna
