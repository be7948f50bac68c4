// Deterministic random numbers: the same seed gives the same stream on every machine and
// thread count (std::normal_distribution is implementation-defined, so fittrain uses its own).
#pragma once
#include <cmath>
#include <cstdint>

namespace ft {

inline uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// xoshiro256** seeded through splitmix64.
class Rng {
 public:
  explicit Rng(uint64_t seed = 0) { reseed(seed); }
  void reseed(uint64_t seed) {
    uint64_t x = seed;
    for (auto& w : s_) w = splitmix64(x);
  }
  uint64_t next_u64() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  // Uniform in [0, 1) with 24 random bits (exactly representable as float).
  float uniform() { return static_cast<float>(next_u64() >> 40) * (1.0f / 16777216.0f); }
  // Standard normal by Box-Muller in double precision.
  double normal() {
    double u1 = (static_cast<double>(next_u64() >> 11) + 0.5) * (1.0 / 9007199254740992.0);
    double u2 = static_cast<double>(next_u64() >> 11) * (1.0 / 9007199254740992.0);
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  // The stream's state after normal() or uniform(), without computing the value (ranges of
  // a stream drawn later skip what comes before them).
  void skip_normal() { next_u64(), next_u64(); }
  void skip_uniform() { next_u64(); }
  const uint64_t* state() const { return s_; }
  void set_state(const uint64_t st[4]) {
    for (int i = 0; i < 4; ++i) s_[i] = st[i];
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

}  // namespace ft
