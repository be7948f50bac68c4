#include "backend/cpu/kv_attention.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace ft {

void kv_cache_store_cpu(float* kcache, float* vcache, const float* qkv, const int32_t* start,
                        int64_t b, int64_t t, int64_t C, int64_t Tmax) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t i = 0; i < b; ++i) {
    for (int64_t s = 0; s < t; ++s) {
      const int64_t p = (start ? start[i] : 0) + s;
      const float* row = qkv + (i * t + s) * 3 * C;
      std::memcpy(kcache + (i * Tmax + p) * C, row + C, static_cast<size_t>(C) * sizeof(float));
      std::memcpy(vcache + (i * Tmax + p) * C, row + 2 * C, static_cast<size_t>(C) * sizeof(float));
    }
  }
}

void attention_decode_cpu(float* out, const float* qkv, const float* kcache, const float* vcache,
                          const int32_t* lens, int64_t G, int64_t C, int64_t Tmax, int n_head) {
  const int64_t HS = C / n_head;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t g = 0; g < G; ++g) {
    for (int64_t h = 0; h < n_head; ++h) {
      const int64_t len = lens[g];
      const float* q = qkv + g * 3 * C + h * HS;
      std::vector<float> p(static_cast<size_t>(len));
      // two passes (max, then exponentials): the textbook softmax, as attention.cpp's
      float m = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < len; ++j) {
        const float* k = kcache + (g * Tmax + j) * C + h * HS;
        float s = 0;
        for (int64_t d = 0; d < HS; ++d) s += q[d] * k[d];
        p[j] = s * scale;
        m = std::max(m, p[j]);
      }
      float sum = 0;
      for (int64_t j = 0; j < len; ++j) sum += (p[j] = std::exp(p[j] - m));
      float* o = out + g * C + h * HS;
      for (int64_t d = 0; d < HS; ++d) o[d] = 0;
      for (int64_t j = 0; j < len; ++j) {
        const float* v = vcache + (g * Tmax + j) * C + h * HS;
        const float w = p[j] / sum;
        for (int64_t d = 0; d < HS; ++d) o[d] += w * v[d];
      }
    }
  }
}

void argmax_rows_cpu(int32_t* out, const float* logits, int64_t G, int64_t V, int64_t Vp) {
  for (int64_t g = 0; g < G; ++g) {
    const float* row = logits + g * Vp;
    float best = -std::numeric_limits<float>::infinity();
    int64_t idx = -1;
    // `>` keeps the first of equal values; idx < 0 takes a first -inf (NaN compares false)
    for (int64_t v = 0; v < V; ++v)
      if (row[v] > best || (idx < 0 && row[v] == best)) best = row[v], idx = v;
    out[g] = static_cast<int32_t>(idx < 0 ? 0 : idx);
  }
}

}  // namespace ft
