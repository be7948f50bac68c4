// Timing interchangeable candidates on a call's own operands: cuBLASLt's algorithms for a
// product (matmul.cu), cuDNN's plans for attention (attention_cudnn.cu), the fused SiLU product
// against the pass + product (cuda_backend_silu.cu). Every autotuning of the backend times
// and picks the same way, here. Warm-up, draining and which candidates may run stay with the
// caller.
#pragma once
#include <cmath>
#include <cstddef>
#include <vector>

#include "backend/cuda/cuda_common.cuh"

namespace ft::cuda {

// Where a tuning keeps the first-ranked candidate (cuBLASLt's heuristic, cuDNN's) unless
// another is this much faster: near-ties then go to the same kernel in every process (the
// ranking is a function of the shape), where timing noise picked either.
constexpr float kTuneMargin = 0.01f;

// Each candidate's time, ms per call: the best of `rounds` rounds of `runs` calls of run(i),
// the rounds interleaved over the candidates. One timing each picked different kernels in
// different runs of the same job (some 0.3 ms a step slower: device traces, GPT-2 124M on
// H100s, docs/PERFORMANCE.md), because a clock change or a neighbour's traffic during one
// candidate's timing decided the choice. Candidates with ok[i] false are not run (INFINITY).
template <class Run>
std::vector<float> time_candidates(cudaStream_t stream, const std::vector<bool>& ok, Run&& run, int rounds = 3,
                                   int runs = 3) {
  struct Events {  // released however the timing ends
    cudaEvent_t start = nullptr, stop = nullptr;
    ~Events() {
      if (start) cudaEventDestroy(start);
      if (stop) cudaEventDestroy(stop);
    }
  } ev;
  CUDA_CHECK(cudaEventCreate(&ev.start));
  CUDA_CHECK(cudaEventCreate(&ev.stop));
  std::vector<float> best(ok.size(), INFINITY);
  for (int round = 0; round < rounds; ++round) {
    for (size_t i = 0; i < ok.size(); ++i) {
      if (!ok[i]) continue;
      CUDA_CHECK(cudaEventRecord(ev.start, stream));
      for (int r = 0; r < runs; ++r) run(i);
      CUDA_CHECK(cudaEventRecord(ev.stop, stream));
      CUDA_CHECK(cudaEventSynchronize(ev.stop));
      float ms = 0.f;
      CUDA_CHECK(cudaEventElapsedTime(&ms, ev.start, ev.stop));
      if (ms / runs < best[i]) best[i] = ms / runs;
    }
  }
  return best;
}

// The candidate to keep: the fastest (the first of equals; 0 when none ran); with margin > 0,
// candidate 0 unless the fastest beats it by that fraction (or it did not run).
inline size_t pick_fastest(const std::vector<float>& ms, float margin = 0.f) {
  size_t k = 0;
  for (size_t i = 1; i < ms.size(); ++i)
    if (ms[i] < ms[k]) k = i;
  if (margin > 0.f && std::isfinite(ms[0]) && ms[k] > ms[0] * (1.f - margin)) k = 0;
  return k;
}

}  // namespace ft::cuda
