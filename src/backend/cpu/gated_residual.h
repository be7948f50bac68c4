// Gated residual (DiT) on the CPU: out = res + gate * y, gate one row per sample, broadcast
// over the sample's T positions. The residual's gradient is dout itself (the caller keeps
// using it), so backward produces only dy and dgate. Sums over t run in order: deterministic.
// With `win` given, y (and dy) are in window order: token row R of out / dout pairs with
// y's row window::reverse_src(*win, R) (backend.h, WindowOrder).
#pragma once
#include <cstdint>

#include "backend/window_shapes.h"

namespace ft {

// out[B,T,C] = res[B,T,C] + gate[B,C] * y[B,T,C]   (out may alias res, or y without win)
void gated_residual_forward_cpu(float* out, const float* res, const float* y, const float* gate,
                                int64_t B, int64_t T, int64_t C, const window::Geom* win = nullptr);
// dy[B,T,C] = gate * dout; dgate[B,C] = sum_t dout * y. Both overwritten; dy may alias y.
void gated_residual_backward_cpu(float* dy, float* dgate, const float* dout, const float* y,
                                 const float* gate, int64_t B, int64_t T, int64_t C,
                                 const window::Geom* win = nullptr);

}  // namespace ft
