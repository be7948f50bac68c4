// SiLU (swish), x * sigmoid(x), on the CPU. Element-wise, so trivially deterministic.
#pragma once
#include <cstdint>

namespace ft {

// out[N] = x / (1 + exp(-x))   (out may alias inp)
void silu_forward_cpu(float* out, const float* inp, int64_t N);
// dinp[N] = silu'(inp) * dout = s (1 + x (1 - s)) * dout, s = sigmoid(x)   (overwrite; in place ok)
void silu_backward_cpu(float* dinp, const float* inp, const float* dout, int64_t N);
// the same, and out[N] = silu(inp)   (out may alias inp, dinp may alias dout; out nullptr:
// not written, dinp bitwise silu_backward_cpu's)
void silu_backward_recompute_cpu(float* dinp, float* out, const float* inp, const float* dout, int64_t N);

}  // namespace ft
