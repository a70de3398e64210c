// tools/serving/random.h — small, portable random numbers for the serving
// simulation: the same seed gives the same trace and the same activations on
// every platform (std::*_distribution are implementation-defined, so they are
// not used).
#pragma once

#include <cmath>
#include <cstdint>

namespace lattn::serving {

// SplitMix64 (Steele, Lea, Flood 2014): a 64-bit mixer; as a counter-based
// generator, mix(key ^ counter) gives independent streams per key.
inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Combines keys into one stream id (order matters).
inline uint64_t hash_combine(uint64_t a, uint64_t b) { return splitmix64(a ^ (splitmix64(b) + 0x632be59bd9b4e019ull)); }

// A sequential generator over SplitMix64.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}

  uint64_t next_u64() {
    state_ += 0x9e3779b97f4a7c15ull;
    uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in (0, 1): 53 random bits, never exactly 0 (safe for log()).
  double uniform_open() { return (double(next_u64() >> 11) + 0.5) * 0x1.0p-53; }
  // Standard normal (Box-Muller, one value per call).
  double normal() {
    const double u1 = uniform_open(), u2 = uniform_open();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  // Exponential with the given mean.
  double exponential(double mean) { return -mean * std::log(uniform_open()); }
  // Geometric on {1, 2, ...} with the given mean (>= 1): P(k) = p (1-p)^(k-1), p = 1/mean.
  int64_t geometric(double mean) {
    if (mean <= 1.0) return 1;
    const double p = 1.0 / mean;
    return 1 + int64_t(std::floor(std::log(uniform_open()) / std::log1p(-p)));
  }

 private:
  uint64_t state_;
};

}  // namespace lattn::serving
