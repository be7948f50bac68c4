#include "backend/cpu/embedding.h"

namespace ft {

void embedding_forward_cpu(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                           int64_t B, int64_t T, int64_t C, const int32_t* positions) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      float* o = out + (b * T + t) * C;
      const float* e = wte + static_cast<int64_t>(tokens[b * T + t]) * C;
      if (!wpe) {  // no position table: a plain row gather
        for (int64_t c = 0; c < C; ++c) o[c] = e[c];
        continue;
      }
      const float* p = wpe + static_cast<int64_t>(positions ? positions[b * T + t] : t) * C;
      for (int64_t c = 0; c < C; ++c) o[c] = e[c] + p[c];
    }
  }
}

void embedding_backward_cpu(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                            int64_t B, int64_t T, int64_t C, const int32_t* positions) {
  // Column blocks: a thread owns channels [c0, c1) of every row of dwte and dwpe, and adds the
  // (b,t) contributions in a fixed order. No two threads ever write the same float.
  constexpr int64_t kBlock = 32;
  const int64_t nblocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    const int64_t c0 = blk * kBlock;
    const int64_t c1 = c0 + kBlock < C ? c0 + kBlock : C;
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t t = 0; t < T; ++t) {
        const float* d = dout + (b * T + t) * C;
        float* we = dwte + static_cast<int64_t>(tokens[b * T + t]) * C;
        for (int64_t c = c0; c < c1; ++c) we[c] += d[c];
        if (!dwpe) continue;  // no position table: a plain row scatter-add
        float* pe = dwpe + static_cast<int64_t>(positions ? positions[b * T + t] : t) * C;
        for (int64_t c = c0; c < c1; ++c) pe[c] += d[c];
      }
    }
  }
}

}  // namespace ft
