// The diffusion noise generator (Backend::diffusion_mix), shared by the CPU and CUDA backends
// and by tests: a counter-based generator, so element i of a sample with noise key k under
// seed s is one pure function z(s, k, i), with no state, no order and no thread count in it.
// The same sample key therefore draws the same noise on the CPU and on CUDA, at any batch
// size, in any batch composition and at any world size.
//
// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11; the
// generator of cuRAND's and PyTorch's CUDA RNG) with key (seed low, seed high) and counter
// (j low, j high, k, 0) gives four 32-bit words for elements 4j..4j+3; Box-Muller turns
// words (0,1) into normals 4j, 4j+1 and words (2,3) into 4j+2, 4j+3. The transform runs in
// double and rounds to float once, so both backends give the same bits except where their
// libraries' double log/cos/sin results straddle a float rounding boundary (rare; 1 ulp).
// Values are bounded by sqrt(2 ln 2^32) = 6.66 (u1 is never 0).
//
// Host code everywhere; also __device__ when compiled by nvcc (backend/cuda/diffusion.cu).
#pragma once
#include <cmath>
#include <cstdint>

#include "core/host_device.h"

namespace ft {

// Philox4x32 with 10 rounds: out = the block for counter ctr under key.
FT_HOST_DEVICE inline void philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;  // multipliers
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;  // Weyl key increments
  uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3], k0 = key[0], k1 = key[1];
  for (int r = 0; r < 10; ++r) {
    if (r > 0) k0 += kW0, k1 += kW1;
    const uint64_t p0 = static_cast<uint64_t>(kM0) * c0, p1 = static_cast<uint64_t>(kM1) * c2;
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
  }
  out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

// Two standard normals from two words: u1 in (0, 1], u2 in [0, 1).
FT_HOST_DEVICE inline void box_muller(uint32_t a, uint32_t b, float* z0, float* z1) {
  constexpr double kTwoPow32Inv = 1.0 / 4294967296.0, kTwoPi = 6.283185307179586476925286766559;
  const double u1 = (static_cast<double>(a) + 1.0) * kTwoPow32Inv;
  const double u2 = static_cast<double>(b) * kTwoPow32Inv;
  const double r = sqrt(-2.0 * log(u1)), th = kTwoPi * u2;
  *z0 = static_cast<float>(r * cos(th));
  *z1 = static_cast<float>(r * sin(th));
}

// Normals 4j .. 4j+3 of sample key `key` under `seed`.
FT_HOST_DEVICE inline void diffusion_normal4(uint64_t seed, uint32_t key, uint64_t j, float z[4]) {
  const uint32_t ctr[4] = {static_cast<uint32_t>(j), static_cast<uint32_t>(j >> 32), key, 0u};
  const uint32_t k[2] = {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  uint32_t w[4];
  philox4x32_10(ctr, k, w);
  box_muller(w[0], w[1], &z[0], &z[1]);
  box_muller(w[2], w[3], &z[2], &z[3]);
}

// Normal i of sample key `key` under `seed` (what diffusion_mix adds as z).
FT_HOST_DEVICE inline float diffusion_normal(uint64_t seed, uint32_t key, uint64_t i) {
  float z[4];
  diffusion_normal4(seed, key, i / 4, z);
  return z[i % 4];
}

}  // namespace ft
