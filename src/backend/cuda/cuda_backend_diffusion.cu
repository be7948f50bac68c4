// CudaBackendBase's ops (cuda_backend_impl.h): the recommender head, the diffusion ops and the
// window ops, split out of cuda_backend.cu to keep each file under ~600 lines.
#include <initializer_list>

#include "backend/bpr_shapes.h"
#include "backend/cuda/backend_checks.h"
#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_ops.cuh"
#include "backend/cuda/window_ops.cuh"
#include "backend/diffusion_shapes.h"
#include "backend/norm_modulate_shapes.h"

namespace ft::cuda {

// ---- recommender head (bpr.cu); item ids are device data, not checked here: the kernels
// never read outside E (see Backend::bpr_forward_backward)
void CudaBackendBase::bpr_forward_backward(Tensor losses, Tensor dh, Tensor dE, Tensor h, Tensor E,
                                           Tensor pos, Tensor neg, float dloss) {
  const char* op = "bpr_forward_backward";
  check_float(h, op);
  check_same(E, h, op);
  const auto [N, C, Vp, K] = bpr::check_bpr(losses, dh, dE, h, E, pos, neg, dloss);
  if (dloss != 0.f) {
    check_same(dh, h, op);
    check_same(dE, h, op);
  }
  cuda::bpr_forward_backward(ctx_, h.dtype, static_cast<float*>(losses.data), dh.data, dE.data,
                             h.data, E.data, static_cast<const int*>(pos.data),
                             static_cast<const int*>(neg.data), N, C, K, Vp, dloss);
}
void CudaBackendBase::item_scores(Tensor out, Tensor h, Tensor E, Tensor items) {
  const char* op = "item_scores";
  check_float(h, op);
  check_same(E, h, op);
  const auto [N, C, Vp, M] = bpr::check_item_scores(out, h, E, items);
  cuda::item_scores(ctx_, h.dtype, static_cast<float*>(out.data), h.data, E.data,
                    static_cast<const int*>(items.data), N, M, C, Vp);
}

// ---- diffusion (patchify.cu, diffusion.cu, rmsnorm.cu; shapes: diffusion_shapes.h) ----
void CudaBackendBase::patchify(Tensor out, Tensor img, int p) {
  const auto d = diffusion::check_patchify("patchify", img, out, p);
  check_float(img, "patchify"), check_float(out, "patchify");
  cuda::patchify(ctx_, out.dtype, out.data, img.dtype, img.data, d.B, d.C, d.H, d.W, d.p);
}
void CudaBackendBase::unpatchify(Tensor img, Tensor tokens, int p) {
  const auto d = diffusion::check_patchify("unpatchify", img, tokens, p);
  check_float(img, "unpatchify"), check_float(tokens, "unpatchify");
  cuda::unpatchify(ctx_, img.dtype, img.data, tokens.dtype, tokens.data, d.B, d.C, d.H, d.W, d.p);
}
void CudaBackendBase::diffusion_mix(Tensor out, Tensor noise_out, Tensor x, Tensor y, Tensor coef,
                                    Tensor keys, uint64_t seed) {
  const auto [B, n] = diffusion::check_mix(out, noise_out, x, y, coef, keys);
  for (const Tensor* t : {&out, &noise_out, &x, &y})
    if (!t->empty()) check_float(*t, "diffusion_mix");
  cuda::diffusion_mix(ctx_, cuda::any_of(out), cuda::any_of(noise_out), cuda::cany_of(x), cuda::cany_of(y),
                      static_cast<const float*>(coef.data), static_cast<const int*>(keys.data), seed, B, n);
}
void CudaBackendBase::patch_embed_forward(Tensor out, Tensor x, Tensor wx, Tensor c, Tensor wc, Tensor bias,
                                          Tensor table) {
  const char* op = "patch_embed_forward";
  const auto d = diffusion::check_patch_embed(op, out, x, wx, c, wc, bias, table, false);
  check_float(x, op);
  for (const Tensor* t : {&out, &wx, &c, &wc, &bias, &table})
    if (!t->empty()) check_same(*t, x, op);
  cuda::patch_embed_forward(ctx_, x.dtype, out.data, x.data, wx.data, c.data, wc.data, bias.data, table.data, d.N,
                            d.O, d.Kx, d.Kc, d.T);
}
void CudaBackendBase::patch_embed_backward(Tensor dwx, Tensor dwc, Tensor dbias, Tensor dout, Tensor x, Tensor c,
                                           GradWrite gw) {
  const char* op = "patch_embed_backward";
  const auto d = diffusion::check_patch_embed(op, dout, x, dwx, c, dwc, dbias, Tensor(), true);
  check_float(x, op);
  for (const Tensor* t : {&dout, &dwx, &c, &dwc, &dbias})
    if (!t->empty()) check_same(*t, x, op);
  cuda::patch_embed_backward(ctx_, x.dtype, dwx.data, dwc.data, dbias.data, dout.data, x.data, c.data, d.N, d.O,
                             d.Kx, d.Kc, gw == GradWrite::add ? 1.f : 0.f);
}
void CudaBackendBase::mse_loss(Tensor losses, Tensor dpred, Tensor pred, Tensor target, float dloss) {
  const auto [B, n] = diffusion::check_mse(losses, dpred, pred, target, dloss);
  check_float(pred, "mse_loss"), check_float(target, "mse_loss");
  if (dloss != 0.f) check_same(dpred, pred, "mse_loss");
  cuda::mse_loss(ctx_, static_cast<float*>(losses.data), cuda::any_of(dpred), cuda::cany_of(pred),
                 cuda::cany_of(target), B, n, dloss);
}
void CudaBackendBase::timestep_embedding(Tensor out, Tensor t, float max_period) {
  const auto [B, D] = diffusion::check_timestep(out, t, max_period);
  check_float(out, "timestep_embedding");
  cuda::timestep_embedding(ctx_, cuda::any_of(out), static_cast<const float*>(t.data), B, D, max_period);
}
void CudaBackendBase::rmsnorm_forward(Tensor out, Tensor rstd, Tensor inp) {
  const auto [N, C] = diffusion::check_rmsnorm("rmsnorm_forward", inp, rstd, {{&out, "out"}});
  cuda::check_elementwise("rmsnorm_forward", inp, {&out});
  cuda::rmsnorm_forward(ctx_, inp.dtype, out.data, static_cast<float*>(rstd.data), inp.data, N, C);
}
void CudaBackendBase::rmsnorm_backward(Tensor dinp, Tensor dout, Tensor inp, Tensor rstd) {
  const auto [N, C] = diffusion::check_rmsnorm("rmsnorm_backward", inp, rstd, {{&dinp, "dinp"}, {&dout, "dout"}});
  cuda::check_elementwise("rmsnorm_backward", inp, {&dinp, &dout});
  cuda::rmsnorm_backward(ctx_, inp.dtype, dinp.data, dout.data, inp.data,
                         static_cast<const float*>(rstd.data), N, C);
}
// The checks of the gated residual's and of norm + modulate's calls, shared by those ops and
// by the fused calls that do both (each names its own op in an error).
namespace {
struct GatedDims {
  int64_t B, T, C;
  window::Geom g;  // y's window geometry when yo is active
};
GatedDims check_gated_forward(const char* op, Tensor out, Tensor res, Tensor y, Tensor gate, const WindowOrder& yo,
                              const char* out_name = "out") {
  const auto [B, T, C] = check_row_broadcast(op, y, {&out, &res}, {&gate});
  GatedDims d{B, T, C, {}};
  if (yo.active()) {
    d.g = window::check_window_order(op, res, y, yo.grid_h, yo.grid_w, yo.window, yo.shift);
    FT_CHECK(out.data != y.data, op, ": ", out_name, " must not alias y in window order");
  }
  return d;
}
GatedDims check_gated_backward(const char* op, Tensor dy, Tensor dgate, Tensor dout, Tensor y, Tensor gate,
                               const WindowOrder& yo, Tensor dbias_y) {
  const auto [B, T, C] = check_row_broadcast(op, y, {&dy, &dout}, {&dgate, &gate});
  FT_CHECK(dy.data != dout.data, op, ": dy must not alias dout (dout is the residual's gradient)");
  GatedDims d{B, T, C, {}};
  if (yo.active()) d.g = window::check_window_order(op, dout, y, yo.grid_h, yo.grid_w, yo.window, yo.shift);
  if (!dbias_y.empty()) {
    check_same(dbias_y, y, op);
    FT_CHECK(dbias_y.numel() == C, op, ": dbias_y ", dbias_y.shape_str(), " should hold the ", C, " columns of y");
  }
  return d;
}
normmod::Dims check_nm_forward(const char* op, Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor shift,
                               Tensor scale, const NormModulateOptions& o) {
  const normmod::Dims d = normmod::check_forward(out, mean, rstd, inp, shift, scale, o);
  check_float(inp, op);
  for (const Tensor* t : {&out, &shift, &scale}) check_same(*t, inp, op);
  return d;
}
normmod::Dims check_nm_backward(const char* op, Tensor dinp, Tensor dshift, Tensor dscale, Tensor dout, Tensor inp,
                                Tensor mean, Tensor rstd, Tensor scale, const NormModulateOptions& o) {
  const normmod::Dims d = normmod::check_backward(dinp, dshift, dscale, dout, inp, mean, rstd, scale, o);
  check_float(inp, op);
  for (const Tensor* t : {&dinp, &dshift, &dscale, &dout, &scale}) check_same(*t, inp, op);
  return d;
}
// The fused calls: the norm's rows and the gated residual's agree, and the gated residual's
// tensors have r's dtype.
void check_fused(const char* op, const normmod::Dims& n, const GatedDims& g, Tensor r, Tensor y,
                 std::initializer_list<const Tensor*> same) {
  FT_CHECK(n.B == g.B && n.T == g.T && n.C == g.C, op, ": r ", r.shape_str(), " and y ", y.shape_str(), " disagree");
  for (const Tensor* t : same) check_same(*t, r, op);
}
}  // namespace

void CudaBackendBase::gated_residual_forward(Tensor out, Tensor res, Tensor y, Tensor gate, const WindowOrder& yo) {
  const GatedDims d = check_gated_forward("gated_residual_forward", out, res, y, gate, yo);
  cuda::gated_residual_forward(ctx_, y.dtype, out.data, res.data, y.data, gate.data, d.B, d.T, d.C,
                               yo.active() ? &d.g : nullptr);
}
void CudaBackendBase::gated_residual_backward(Tensor dy, Tensor dgate, Tensor dout, Tensor y, Tensor gate,
                                              const WindowOrder& yo, Tensor dbias_y, GradWrite gw) {
  const GatedDims d = check_gated_backward("gated_residual_backward", dy, dgate, dout, y, gate, yo, dbias_y);
  cuda::gated_residual_backward(ctx_, y.dtype, dy.data, dgate.data, dout.data, y.data, gate.data, d.B, d.T, d.C,
                                yo.active() ? &d.g : nullptr, dbias_y.empty() ? nullptr : dbias_y.data,
                                gw == GradWrite::add ? 1.f : 0.f);
}
// ---- fused norm + modulate (norm_modulate.cu; shapes: norm_modulate_shapes.h) ----
void CudaBackendBase::norm_modulate_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor shift,
                                            Tensor scale, const NormModulateOptions& o) {
  const normmod::Dims d = check_nm_forward("norm_modulate_forward", out, mean, rstd, inp, shift, scale, o);
  cuda::norm_modulate_forward(ctx_, inp.dtype, out.data, mean.empty() ? nullptr : static_cast<float*>(mean.data),
                              static_cast<float*>(rstd.data), inp.data, shift.data, scale.data, d.B, d.T, d.C,
                              d.windowed ? &d.g : nullptr, o.norm == NormKind::rms, normmod::eps_of(o.norm));
}
void CudaBackendBase::norm_modulate_backward(Tensor dinp, Tensor dshift, Tensor dscale, Tensor dout, Tensor inp,
                                             Tensor mean, Tensor rstd, Tensor scale, const NormModulateOptions& o) {
  const normmod::Dims d =
      check_nm_backward("norm_modulate_backward", dinp, dshift, dscale, dout, inp, mean, rstd, scale, o);
  cuda::norm_modulate_backward(ctx_, inp.dtype, dinp.data, dshift.data, dscale.data, dout.data, inp.data,
                               mean.empty() ? nullptr : static_cast<const float*>(mean.data),
                               static_cast<const float*>(rstd.data), scale.data, d.B, d.T, d.C,
                               d.windowed ? &d.g : nullptr, o.norm == NormKind::rms, o.overwrite_dinp);
}
void CudaBackendBase::gated_residual_norm_modulate_forward(Tensor r, Tensor out, Tensor mean, Tensor rstd,
                                                          Tensor res, Tensor y, Tensor gate, const WindowOrder& yo,
                                                          Tensor shift, Tensor scale, const NormModulateOptions& o) {
  // the two ops' checks on the fused call's tensors; then one pass where the register kernel
  // holds the row (else, or with FT_RESIDUAL_NORM=separate, the two ops)
  const char* op = "gated_residual_norm_modulate_forward";
  const GatedDims g = check_gated_forward(op, r, res, y, gate, yo, "r");
  const normmod::Dims d = check_nm_forward(op, out, mean, rstd, r, shift, scale, o);
  check_fused(op, d, g, r, y, {&res, &y, &gate});
  FT_CHECK(out.data != res.data && out.data != y.data, op, ": out must not alias res or y");
  if (sw_.residual_norm_fused_fwd &&
      cuda::gated_residual_norm_modulate_forward(
          ctx_, r.dtype, r.data, out.data, mean.empty() ? nullptr : static_cast<float*>(mean.data),
          static_cast<float*>(rstd.data), res.data, y.data, gate.data, yo.active() ? &g.g : nullptr, shift.data,
          scale.data, d.B, d.T, d.C, d.windowed ? &d.g : nullptr, o.norm == NormKind::rms,
          normmod::eps_of(o.norm)))
    return;
  Backend::gated_residual_norm_modulate_forward(r, out, mean, rstd, res, y, gate, yo, shift, scale, o);
}
void CudaBackendBase::norm_modulate_gated_residual_backward(const ResidualNormGrads& a) {
  // the two ops' checks on the fused call's tensors; then one pass where the kernel takes the
  // rows (else, or with FT_RESIDUAL_NORM=forward or separate, the two ops)
  const char* op = "norm_modulate_gated_residual_backward";
  FT_CHECK(!a.o.overwrite_dinp, op, ": dr accumulates (overwrite_dinp is for norm_modulate_backward)");
  const normmod::Dims d =
      check_nm_backward(op, a.dr, a.dshift, a.dscale, a.dout, a.r, a.mean, a.rstd, a.scale, a.o);
  const GatedDims g = check_gated_backward(op, a.dy, a.dgate, a.dr, a.y, a.gate, a.y_order, a.dbias_y);
  check_fused(op, d, g, a.r, a.y, {&a.dy, &a.dgate, &a.y, &a.gate});
  FT_CHECK(a.dy.data != a.dout.data && a.dy.data != a.r.data, op, ": dy must not alias dout or r");
  if (sw_.residual_norm_fused_bwd &&
      cuda::norm_modulate_gated_residual_backward(
          ctx_, a.r.dtype, a.dr.data, a.dshift.data, a.dscale.data, a.dout.data, a.r.data,
          a.mean.empty() ? nullptr : static_cast<const float*>(a.mean.data), static_cast<const float*>(a.rstd.data),
          a.scale.data, d.windowed ? &d.g : nullptr, a.dy.data, a.dgate.data, a.y.data, a.gate.data,
          a.y_order.active() ? &g.g : nullptr, a.dbias_y.empty() ? nullptr : a.dbias_y.data,
          a.gw == GradWrite::add ? 1.f : 0.f, d.B, d.T, d.C, a.o.norm == NormKind::rms, sw_.residual_norm_staged))
    return;
  Backend::norm_modulate_gated_residual_backward(a);
}

// ---- window ops (window_ops.cu; shapes: window_shapes.h) ----
void CudaBackendBase::window_partition(Tensor o, Tensor x, int h, int w, int win, int s) {
  window_op(window::Op::partition, o, x, h, w, win, s);
}
void CudaBackendBase::window_reverse(Tensor x, Tensor o, int h, int w, int win, int s) {
  window_op(window::Op::reverse, x, o, h, w, win, s);
}
void CudaBackendBase::patch_merge(Tensor o, Tensor x, int h, int w) {
  window_op(window::Op::merge, o, x, h, w);
}
void CudaBackendBase::patch_split(Tensor x, Tensor o, int h, int w) {
  window_op(window::Op::split, x, o, h, w);
}
void CudaBackendBase::upsample_nearest(Tensor o, Tensor x, int h, int w) {
  window_op(window::Op::upsample, o, x, h, w);
}
void CudaBackendBase::upsample_nearest_backward(Tensor dx, Tensor d, int h, int w) {
  window_op(window::Op::upsample_bwd, dx, d, h, w);
}
void CudaBackendBase::grid_transpose(Tensor o, Tensor x, int h, int w) { window_op(window::Op::transpose, o, x, h, w); }
void CudaBackendBase::window_op(window::Op op, Tensor dst, Tensor src, int h, int w, int win, int s) {
  const window::Geom g = window::check(op, dst, src, h, w, win, s);
  check_float(dst, window::op_name(op)), check_float(src, window::op_name(op));
  cuda::window_op(ctx_, op, cuda::any_of(dst), cuda::cany_of(src), g);
}

}  // namespace ft::cuda
