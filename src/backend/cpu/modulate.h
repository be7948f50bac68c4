// adaLN modulation (DiT) on the CPU: out = x * (1 + scale) + shift, shift and scale one row
// per sample, broadcast over the sample's T positions.
// Backward's sums over t run in order, one (b, c) column per iteration: deterministic.
#pragma once
#include <cstdint>

namespace ft {

// out[B,T,C] = x[B,T,C] * (1 + scale[B,C]) + shift[B,C]   (out may alias x)
void modulate_forward_cpu(float* out, const float* x, const float* shift, const float* scale,
                          int64_t B, int64_t T, int64_t C);
// dx[B,T,C] = dout * (1 + scale); dshift[B,C] = sum_t dout; dscale[B,C] = sum_t dout * x.
// All overwritten; dx may alias dout.
void modulate_backward_cpu(float* dx, float* dshift, float* dscale, const float* dout,
                           const float* x, const float* scale, int64_t B, int64_t T, int64_t C);

}  // namespace ft
