#include "backend/cpu/patch_embed.h"

#include <algorithm>
#include <vector>

namespace ft {

void patch_embed_forward_cpu(float* out, const float* x, const float* wx, const float* c, const float* wc,
                             const float* bias, const float* table, int64_t N, int64_t O, int64_t Kx, int64_t Kc,
                             int64_t T) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* xr = x + n * Kx;
    const float* cr = c ? c + n * Kc : nullptr;
    const float* tr = table ? table + (n % T) * O : nullptr;
    float* orow = out + n * O;
    for (int64_t o = 0; o < O; ++o) {
      float s = (bias ? bias[o] : 0.f) + (tr ? tr[o] : 0.f);
      for (int64_t k = 0; k < Kx; ++k) s += xr[k] * wx[o * Kx + k];
      for (int64_t k = 0; k < Kc; ++k) s += cr[k] * wc[o * Kc + k];
      orow[o] = s;
    }
  }
}

void patch_embed_backward_cpu(float* dwx, float* dwc, float* dbias, const float* dout, const float* x, const float* c,
                              int64_t N, int64_t O, int64_t Kx, int64_t Kc, bool accumulate) {
  // Rows in a fixed number of chunks, each summed in row order into its own [K+1][O] partials
  // (dout read row by row), then the chunks added in order: the same bits for any thread count.
  const int64_t K1 = Kx + Kc + 1, chunks = std::min<int64_t>(N, 64), per = (N + chunks - 1) / chunks;
  std::vector<float> part(static_cast<size_t>(chunks * K1 * O), 0.f);
#pragma omp parallel for schedule(static)
  for (int64_t ch = 0; ch < chunks; ++ch) {
    float* p = part.data() + ch * K1 * O;
    for (int64_t n = ch * per, end = std::min(N, (ch + 1) * per); n < end; ++n) {
      const float* g = dout + n * O;
      for (int64_t k = 0; k < K1; ++k) {
        const float v = k < Kx ? x[n * Kx + k] : k < Kx + Kc ? (c ? c[n * Kc + k - Kx] : 0.f) : 1.f;
        float* pk = p + k * O;
        for (int64_t o = 0; o < O; ++o) pk[o] += g[o] * v;
      }
    }
  }
  auto total = [&](int64_t k, int64_t o) {
    float s = 0.f;
    for (int64_t ch = 0; ch < chunks; ++ch) s += part[static_cast<size_t>((ch * K1 + k) * O + o)];
    return s;
  };
  for (int64_t o = 0; o < O; ++o) {
    for (int64_t k = 0; k < Kx; ++k) dwx[o * Kx + k] = (accumulate ? dwx[o * Kx + k] : 0.f) + total(k, o);
    if (dwc)
      for (int64_t k = 0; k < Kc; ++k) dwc[o * Kc + k] = (accumulate ? dwc[o * Kc + k] : 0.f) + total(Kx + k, o);
    if (dbias) dbias[o] = (accumulate ? dbias[o] : 0.f) + total(Kx + Kc, o);
  }
}

}  // namespace ft
