// GELU, tanh approximation (GPT-2's), on the CPU. Elementwise, so trivially deterministic.
#pragma once
#include <cstdint>

namespace ft {

// out[N] = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
void gelu_forward_cpu(float* out, const float* inp, int64_t N);
// dinp[N] = gelu'(inp) * dout   (overwrite)
void gelu_backward_cpu(float* dinp, const float* inp, const float* dout, int64_t N);

}  // namespace ft
