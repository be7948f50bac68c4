#include "backend/cpu/patchify.h"

#include <cstring>

namespace ft {

namespace {

// Calls f(token row, image row, px count) for every run of p contiguous pixels: pixels
// (ty*p + py, tx*p .. tx*p + p-1) of channel c are features (c*p + py)*p .. + p-1 of token
// (ty, tx), contiguous on both sides. One (b, token) per iteration: threads write disjoint
// token rows (patchify) or disjoint pixel runs (unpatchify).
template <class Fn>
void for_each_run(int64_t B, int64_t C, int64_t H, int64_t W, int64_t p, Fn&& f) {
  const int64_t Wp = W / p, T = (H / p) * Wp, F = C * p * p;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const int64_t ty = t / Wp, tx = t % Wp;
      for (int64_t c = 0; c < C; ++c)
        for (int64_t py = 0; py < p; ++py) {
          const int64_t tok = (b * T + t) * F + (c * p + py) * p;
          const int64_t pix = ((b * C + c) * H + ty * p + py) * W + tx * p;
          f(tok, pix, p);
        }
    }
}

}  // namespace

void patchify_cpu(float* out, const float* img, int64_t B, int64_t C, int64_t H, int64_t W, int64_t p) {
  for_each_run(B, C, H, W, p, [&](int64_t tok, int64_t pix, int64_t len) {
    std::memcpy(out + tok, img + pix, static_cast<size_t>(len) * sizeof(float));
  });
}

void unpatchify_cpu(float* img, const float* tokens, int64_t B, int64_t C, int64_t H, int64_t W, int64_t p) {
  for_each_run(B, C, H, W, p, [&](int64_t tok, int64_t pix, int64_t len) {
    std::memcpy(img + pix, tokens + tok, static_cast<size_t>(len) * sizeof(float));
  });
}

}  // namespace ft
