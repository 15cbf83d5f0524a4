// Zipf-distributed key sampler shared by the kernel microbenchmark and the load generators.
//
// Contract: ZipfSampler(n, s, seed) draws integers in [0, n) where P(k) ∝ 1 / (k+1)^s, for any
// s >= 0 (s = 0 is uniform). The CDF is precomputed once (O(n) memory), each draw is a binary
// search (O(log n)). Deterministic for a given seed. Not thread-safe: one sampler per thread.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <vector>

namespace anna {

class ZipfSampler {
 public:
  ZipfSampler(std::size_t n, double s, std::uint64_t seed) : rng_(seed), unit_(0.0, 1.0) {
    if (n == 0) throw std::invalid_argument("ZipfSampler: key count must be positive");
    if (s < 0) throw std::invalid_argument("ZipfSampler: exponent must be >= 0");
    cdf_.resize(n);
    double total = 0;
    for (std::size_t k = 0; k < n; ++k) {
      total += 1.0 / std::pow(static_cast<double>(k + 1), s);
      cdf_[k] = total;
    }
    for (double& c : cdf_) c /= total;
    cdf_.back() = 1.0;
  }

  std::size_t next() {
    double u = unit_(rng_);
    auto it = std::lower_bound(cdf_.begin(), cdf_.end(), u);
    return static_cast<std::size_t>(it - cdf_.begin());
  }

  std::mt19937_64& rng() { return rng_; }

 private:
  std::vector<double> cdf_;
  std::mt19937_64 rng_;
  std::uniform_real_distribution<double> unit_;
};

}  // namespace anna
