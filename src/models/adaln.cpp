#include "models/adaln.h"

#include "core/error.h"

namespace ft {

namespace {

// Chunk k of a [n*W, D] weight ([n*W] bias when D == 0): rows [k*W, (k+1)*W).
Tensor chunk(Tensor t, int k, int64_t W, int64_t D) {
  return D > 0 ? t.range(k * W * D, W * D).view({W, D}) : t.range(k * W, W);
}

}  // namespace

void adaln_forward(Backend& be, Tensor out, Tensor sc, Tensor w, Tensor bias, int n, Tensor scratch) {
  const int64_t b = sc.dim(0), D = sc.dim(1), W = w.dim(0) / n;
  FT_CHECK(out.numel() == n * b * W, "adaLN: out ", out.shape_str(), " should be [", n, ", ", b, ", ", W, "]");
  if (scratch.numel() < b * n * W) {
    // Grids of one or two tokens (tiny test models) leave no block buffer this large: one
    // product per chunk, straight into its place.
    for (int k = 0; k < n; ++k)
      be.matmul_forward(out.range(k * b * W, b * W).view({b, W}), sc, chunk(w, k, W, D), chunk(bias, k, W, 0));
    return;
  }
  Tensor prod = scratch.range(0, b * n * W);
  be.matmul_forward(prod.view({b, n * W}), sc, w, bias);
  be.grid_transpose(out.view({1, n * b, W}), prod.view({1, b * n, W}), static_cast<int>(b), n);
}

void adaln_backward(Backend& be, Tensor dsc, Tensor tmp, Tensor dmod, Tensor sc, Tensor w, Tensor dw, Tensor dbias,
                    int n, Tensor scratch, GradWrite gw) {
  const int64_t b = sc.dim(0), D = sc.dim(1), W = w.dim(0) / n;
  FT_CHECK(dmod.numel() == n * b * W, "adaLN: dmod ", dmod.shape_str(), " should be [", n, ", ", b, ", ", W, "]");
  if (scratch.numel() < b * n * W) {
    for (int k = 0; k < n; ++k) {
      be.matmul_backward(tmp, chunk(dw, k, W, D), chunk(dbias, k, W, 0), dmod.range(k * b * W, b * W).view({b, W}),
                         sc, chunk(w, k, W, D), gw);
      be.residual_forward(dsc, dsc, tmp);
    }
    return;
  }
  Tensor dprod = scratch.range(0, b * n * W);
  be.grid_transpose(dprod.view({1, b * n, W}), dmod.view({1, n * b, W}), n, static_cast<int>(b));
  be.matmul_backward(tmp, dw, dbias, dprod.view({b, n * W}), sc, w, gw);
  be.residual_forward(dsc, dsc, tmp);
}

}  // namespace ft
