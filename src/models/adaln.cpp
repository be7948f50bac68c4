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

void final_layer_forward(Backend& be, const FinalLayerBuffers& f, const FinalLayerParams& p, Tensor sc, Tensor x,
                         Tensor pred, NormKind norm, int patch) {
  const int64_t b = sc.dim(0), N = f.mf.dim(0), W = f.mf.dim(1), T = N / b, Fo = p.out_w.dim(0);
  NormModulateOptions o;
  o.norm = norm;
  // the adaLN product's scratch: mf, written after it
  adaln_forward(be, f.fmod, sc, p.ada_w, p.ada_b, 2, f.mf);
  be.norm_modulate_forward(f.mf.view({b, T, W}), f.mean, f.rstd, x.view({b, T, W}), f.fmod.range(0, b * W).view({b, W}),
                           f.fmod.range(b * W, b * W).view({b, W}), o);
  be.matmul_forward(f.otok.view({N, Fo}), f.mf, p.out_w, p.out_b);
  be.unpatchify(pred, f.otok, patch);
}

void final_layer_backward(Backend& be, const FinalLayerBuffers& f, const FinalLayerParams& p,
                          const FinalLayerParams& g, Tensor sc, Tensor x, Tensor dpred, Tensor dres, Tensor dsc,
                          NormKind norm, int patch, GradWrite gw) {
  const int64_t b = sc.dim(0), N = f.mf.dim(0), W = f.mf.dim(1), T = N / b, Fo = p.out_w.dim(0);
  NormModulateOptions o;
  o.norm = norm;
  o.overwrite_dinp = true;  // the residual stream's first gradient: no zeroed buffer to add to
  be.patchify(f.dotok, dpred, patch);  // unpatchify's backward
  be.matmul_backward(f.dmf, g.out_w, g.out_b, f.dotok.view({N, Fo}), f.mf, p.out_w, gw);
  be.norm_modulate_backward(dres.view({b, T, W}), f.dfmod.range(0, b * W).view({b, W}),
                            f.dfmod.range(b * W, b * W).view({b, W}), f.dmf.view({b, T, W}), x.view({b, T, W}), f.mean,
                            f.rstd, f.fmod.range(b * W, b * W).view({b, W}), o);
  // the adaLN backward's scratch: dmf, read for the last time above
  adaln_backward(be, dsc, f.tmp, f.dfmod, sc, p.ada_w, g.ada_w, g.ada_b, 2, f.dmf, gw);
}

}  // namespace ft
