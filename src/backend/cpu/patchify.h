// Patchify / unpatchify on the CPU (see Backend::patchify): pure permutations between an
// image [B,C,H,W] and its patch tokens [B,T,C*p*p], token t = ty*(W/p) + tx, feature
// f = (c*p + py)*p + px (a Conv2d(kernel = stride = p) weight's flattening). Each is the
// other's backward; the values are copied, never computed, so the results are exact.
#pragma once
#include <cstdint>

namespace ft {

// out[b, t, f] = img[b, c, ty*p + py, tx*p + px]
void patchify_cpu(float* out, const float* img, int64_t B, int64_t C, int64_t H, int64_t W, int64_t p);
// img[b, c, ty*p + py, tx*p + px] = tokens[b, t, f]
void unpatchify_cpu(float* img, const float* tokens, int64_t B, int64_t C, int64_t H, int64_t W, int64_t p);

}  // namespace ft
