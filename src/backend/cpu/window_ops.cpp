#include "backend/cpu/window_ops.h"

#include <cstring>

namespace ft {

void window_op_cpu(window::Op op, Tensor dst, Tensor src, int grid_h, int grid_w, int win, int shift) {
  const window::Geom g = window::check(op, dst, src, grid_h, grid_w, win, shift);
  FT_CHECK(dst.dtype == DType::f32 && src.dtype == DType::f32, window::op_name(op),
           ": tensors must be f32 on the cpu backend");
  const int64_t C = g.C, rows = window::dst_rows(op, g);
  float* out = dst.as<float>();
  const float* in = src.as<float>();
  if (op == window::Op::upsample_bwd) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      float* o = out + r * C;
      const float* a = in + window::upsample_bwd_src(g, r, 0) * C;
      const float* b = in + window::upsample_bwd_src(g, r, 1) * C;
      const float* c = in + window::upsample_bwd_src(g, r, 2) * C;
      const float* d = in + window::upsample_bwd_src(g, r, 3) * C;
      for (int64_t k = 0; k < C; ++k) o[k] = ((a[k] + b[k]) + c[k]) + d[k];
    }
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(out + r * C, in + window::src_row(op, g, r) * C, static_cast<size_t>(C) * sizeof(float));
}

}  // namespace ft
