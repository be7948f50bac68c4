// Residual add on the CPU. Its backward is free: the residual stream's gradient is one buffer
// that layernorm_backward accumulates into (see backend.h), so there is no residual_backward.
#pragma once
#include <cstdint>

namespace ft {

// out[N] = a[N] + b[N]   (out may alias a or b)
void residual_forward_cpu(float* out, const float* a, const float* b, int64_t N);

}  // namespace ft
