// Token + position embedding on the CPU (fp32).
//
// Backward scatters into rows of wte chosen by the tokens, so two positions with the same
// token write the same row. Instead of atomics (whose order varies) the backward splits the
// work by channel: each thread owns a range of columns and walks every (b,t) in order, which
// is race-free and gives the same bits for any thread count.
#pragma once
#include <cstdint>

namespace ft {

// out[B,T,C] = wte[tokens[b,t], :] + wpe[p, :], p = positions[b,t] (or t when positions is
// null). tokens[B,T] must lie in [0, rows of wte), positions in [0, rows of wpe); the caller
// checks.
void embedding_forward_cpu(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                           int64_t B, int64_t T, int64_t C, const int32_t* positions = nullptr);

// dwte[Vp,C] += sum over (b,t) with tokens[b,t]==v of dout[b,t,:]
// dwpe[maxT,C] += sum over (b,t) with p(b,t)==p of dout[b,t,:]
void embedding_backward_cpu(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                            int64_t B, int64_t T, int64_t C, const int32_t* positions = nullptr);

}  // namespace ft
