// Multi-head self-attention on the CPU (fp32), the reference for fused GPU kernels: causal or
// not, optionally with per-sample lengths (keys past a sample's length are masked; its query
// rows past it have all-zero probabilities, so their output and gradients are 0), or with
// samples packed into rows (positions: query t sees keys [t - positions[b,t], t] only).
//
// Forward keeps the softmax probabilities att[B,NH,T,T] (zeros where masked) for the
// backward pass. Backward never materialises a T x T gradient: it walks the rows t of one
// (b,h) in order, with a per-thread scratch row of T floats taken from the backend workspace.
// Work is split over (b,h) pairs, so each dk/dv row is written by exactly one thread in a
// fixed order: deterministic, no atomics.
//
// Layout (GPT-2 c_attn): qkv[b,t,:] = [q | k | v], each C wide; head h uses columns
// [h*hs, (h+1)*hs) inside each of the three, hs = C / NH. Scores are scaled by 1/sqrt(hs).
#pragma once
#include <cstddef>
#include <cstdint>

namespace ft {

// Bytes of workspace attention_backward_cpu needs for sequence length T and nthreads threads.
size_t attention_backward_workspace_bytes(int64_t T, int nthreads);

// out[B,T,C], att[B,NH,T,T] (saved probabilities) from qkv[B,T,3C]. seq_lens: host i32[B]
// with values in [1, T], or nullptr (every sample T long). positions: host i32[B,T] with
// positions[b,t] in [0, t] (checked by the caller), or nullptr; only with causal and without
// seq_lens.
void attention_forward_cpu(float* out, float* att, const float* qkv, int64_t B, int64_t T,
                           int64_t C, int64_t NH, bool causal = true,
                           const int32_t* seq_lens = nullptr, const int32_t* positions = nullptr);

// dqkv[B,T,3C] = ... (overwrite) from dout[B,T,C], qkv[B,T,3C], att[B,NH,T,T].
// scratch holds nthreads * T floats (see attention_backward_workspace_bytes); at most
// nthreads OpenMP threads are used.
void attention_backward_cpu(float* dqkv, const float* dout, const float* qkv, const float* att,
                            float* scratch, int nthreads, int64_t B, int64_t T, int64_t C,
                            int64_t NH, bool causal = true, const int32_t* seq_lens = nullptr,
                            const int32_t* positions = nullptr);

}  // namespace ft
