// The fused adaLN input on the CPU (Backend::norm_modulate_forward/backward): a no-affine
// LayerNorm or RMSNorm, then modulate x * (1 + scale) + shift, optionally written in Swin
// window order. The reference for the CUDA kernels: plain loops with layernorm.cpp's and
// rmsnorm.cpp's arithmetic (row statistics in double, elementwise math in f32), so that the
// fused op equals the separate ops on the CPU up to the rounding of the column sums.
// Backward: rows are independent for dinp (the row map is a permutation); dshift/dscale are
// summed per sample over its output rows in order, in double: deterministic for any thread count.
#pragma once
#include <cstdint>

#include "backend/window_shapes.h"

namespace ft {

// Sizes and row map: out row r (of B*T) holds inp row src(r) = windowed ?
// window::partition_src(g, r) : r. rms: RMSNorm (mean unused), else LayerNorm.
struct NormModCpu {
  int64_t B = 0, T = 0, C = 0;
  bool windowed = false, rms = false;
  bool overwrite = false;  // backward: dinp = (not +=) the norm's backward
  window::Geom g;
  float eps = 0.f;
  int64_t src(int64_t r) const { return windowed ? window::partition_src(g, r) : r; }
};

// out[B*T,C] = xhat[src(r)] * (1 + scale[b]) + shift[b]; mean (layer only), rstd [B*T] written.
void norm_modulate_forward_cpu(float* out, float* mean, float* rstd, const float* inp, const float* shift,
                               const float* scale, const NormModCpu& d);
// dinp[src(r)] += (d.overwrite: =) norm backward of dout[r] * (1 + scale[b]); dshift[b] = sum_r dout[r],
// dscale[b] = sum_r dout[r] * xhat[src(r)] (overwritten). mean unused for rms.
void norm_modulate_backward_cpu(float* dinp, float* dshift, float* dscale, const float* dout, const float* inp,
                                const float* mean, const float* rstd, const float* scale, const NormModCpu& d);

}  // namespace ft
