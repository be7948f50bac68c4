// Shape checks of the fused norm + modulate op (Backend::norm_modulate_forward/backward),
// shared by the CPU and CUDA backends so both refuse the same arguments, and the epsilons of
// its two norms (those of the separate ops it replaces). The window geometry is checked by
// window::check (backend/window_shapes.h), so the fused op accepts exactly the windows that
// window_partition does. Which float dtypes are allowed is each backend's business (the CPU
// is f32 only); that the statistics are f32 is checked here. Host code only.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <utility>

#include "backend/backend.h"
#include "backend/cpu/layernorm.h"
#include "backend/diffusion_shapes.h"
#include "backend/window_shapes.h"
#include "core/error.h"
#include "core/tensor.h"

namespace ft::normmod {

// The norm's epsilon: LayerNorm's (kLayerNormEps, as layernorm_forward) or RMSNorm's.
inline float eps_of(NormKind k) { return k == NormKind::rms ? diffusion::kRmsNormEps : kLayerNormEps; }

struct Dims {
  int64_t B = 0, T = 0, C = 0;
  bool windowed = false;
  // the row map: with windowed, out row r holds grid row window::partition_src(g, r)
  window::Geom g;
};

using Named = std::pair<const Tensor*, const char*>;

// inp [B,T,C] gives the sizes; `grid` tensors (dinp) are shaped like it; `rows_out` (out or
// dout) hold the same elements in out's order ([B,T,C], or the windows [B*nW, w*w, C] when
// windowed); `rows` [B,C] (shift, scale, dshift, dscale); mean f32[B*T] (layer) or empty
// (rms), rstd f32[B*T]. Throws naming `op` and the tensor.
inline Dims check(const char* op, const Tensor& inp, std::initializer_list<Named> grid,
                  std::initializer_list<Named> rows_out, std::initializer_list<Named> rows, const Tensor& mean,
                  const Tensor& rstd, const NormModulateOptions& o) {
  FT_CHECK(!inp.empty() && inp.ndim == 3 && inp.dim(0) >= 1 && inp.dim(1) >= 1 && inp.dim(2) >= 1, op, ": inp ",
           inp.shape_str(), " should be [B,T,C]");
  Dims d;
  d.B = inp.dim(0), d.T = inp.dim(1), d.C = inp.dim(2);
  for (const auto& [t, name] : grid)
    FT_CHECK(!t->empty() && t->ndim == 3 && t->dim(0) == d.B && t->dim(1) == d.T && t->dim(2) == d.C, op, ": ",
             name, " ", t->shape_str(), " should be [", d.B, ",", d.T, ",", d.C, "] as inp");
  for (const auto& [t, name] : rows)
    FT_CHECK(!t->empty() && t->numel() == d.B * d.C && t->dim(-1) == d.C, op, ": ", name, " ", t->shape_str(),
             " should be [B=", d.B, ",C=", d.C, "]");
  const WindowOrder& w = o.out_order;
  FT_CHECK(w.window >= 0, op, ": window ", w.window, " must be >= 0 (0: no windows)");
  d.windowed = w.window > 0;
  for (const auto& [t, name] : rows_out) {
    FT_CHECK(!t->empty() && t->ndim == 3 && t->numel() == d.B * d.T * d.C && t->dim(-1) == d.C, op, ": ", name,
             " ", t->shape_str(), " should hold [", d.B, ",", d.T, ",", d.C, "]",
             d.windowed ? " in window order" : "");
    FT_CHECK(t->data != inp.data, op, ": ", name, " must not alias inp");
    if (!d.windowed)
      FT_CHECK(t->dim(0) == d.B && t->dim(1) == d.T, op, ": ", name, " ", t->shape_str(), " should be [", d.B,
               ",", d.T, ",", d.C, "] as inp (no windows)");
  }
  if (d.windowed) {
    // window_partition's own checks on inp (the grid) and a windows-shaped view of out
    const int64_t ww = int64_t{w.window} * w.window;
    const Tensor& first = *rows_out.begin()->first;
    const Tensor view(first.data, first.dtype, {d.B * d.T / ww, ww, d.C});
    try {
      d.g = window::check(window::Op::partition, view, inp, w.grid_h, w.grid_w, w.window, w.shift);
      FT_CHECK(d.B * d.T % ww == 0, "T ", d.T, " is not a whole number of windows");
    } catch (const InternalError& e) {
      throw InternalError(detail::concat(op, ": bad window geometry for inp ", inp.shape_str(), " (grid ",
                                         w.grid_h, "x", w.grid_w, ", window ", w.window, ", shift ", w.shift,
                                         "): ", e.what()));
    }
    for (const auto& [t, name] : rows_out)
      FT_CHECK((t->dim(0) == d.B && t->dim(1) == d.T) || (t->dim(0) == d.B * d.T / ww && t->dim(1) == ww), op,
               ": ", name, " ", t->shape_str(), " should be [", d.B, ",", d.T, ",", d.C, "] or the windows [",
               d.B * d.T / ww, ",", ww, ",", d.C, "]");
  } else {
    d.g.B = d.B, d.g.H = d.T, d.g.W = 1, d.g.C = d.C;  // unused: src(r) = r
  }
  const bool rms = o.norm == NormKind::rms;
  if (rms)
    FT_CHECK(mean.empty(), op, ": mean ", mean.shape_str(), " must be empty for RMSNorm (it has no mean)");
  else
    FT_CHECK(mean.dtype == DType::f32 && mean.numel() == d.B * d.T, op, ": mean ", mean.shape_str(),
             " should be f32[", d.B * d.T, "] (one per row of inp)");
  FT_CHECK(rstd.dtype == DType::f32 && rstd.numel() == d.B * d.T, op, ": rstd ", rstd.shape_str(),
           " should be f32[", d.B * d.T, "] (one per row of inp)");
  return d;
}

inline Dims check_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& inp,
                          const Tensor& shift, const Tensor& scale, const NormModulateOptions& o) {
  return check("norm_modulate_forward", inp, {}, {{&out, "out"}}, {{&shift, "shift"}, {&scale, "scale"}}, mean,
               rstd, o);
}

inline Dims check_backward(const Tensor& dinp, const Tensor& dshift, const Tensor& dscale, const Tensor& dout,
                           const Tensor& inp, const Tensor& mean, const Tensor& rstd, const Tensor& scale,
                           const NormModulateOptions& o) {
  const char* op = "norm_modulate_backward";
  const Dims d = check(op, inp, {{&dinp, "dinp"}}, {{&dout, "dout"}},
                       {{&dshift, "dshift"}, {&dscale, "dscale"}, {&scale, "scale"}}, mean, rstd, o);
  FT_CHECK(dinp.data != dout.data, op, ": dinp must not alias dout");
  FT_CHECK(dinp.data != inp.data, op, ": dinp must not alias inp");
  FT_CHECK(dshift.data != dscale.data, op, ": dshift and dscale must not alias");
  return d;
}

}  // namespace ft::normmod
