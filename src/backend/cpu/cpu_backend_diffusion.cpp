// CpuBackendBase's ops (cpu_backend_impl.h): the recommender head, the diffusion ops and the
// window ops, split out of cpu_backend.cpp to keep each file under ~600 lines.
#include <cstddef>
#include <cstdint>
#include <utility>

#include "backend/bpr_shapes.h"
#include "backend/cpu/adamw.h"
#include "backend/cpu/bpr.h"
#include "backend/cpu/cpu_backend_impl.h"
#include "backend/cpu/diffusion.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/norm_modulate.h"
#include "backend/cpu/patch_embed.h"
#include "backend/cpu/patchify.h"
#include "backend/cpu/rmsnorm.h"
#include "backend/cpu/window_ops.h"
#include "backend/diffusion_shapes.h"
#include "backend/norm_modulate_shapes.h"
#include "core/error.h"

namespace ft::cpu {

// ---- fused bias gradients of element-wise backward ops (matmul.h) ----

void CpuBackendBase::add_column_sums(const char* op, Tensor dbias, Tensor d, GradWrite gw) {
  check_f32(dbias, op, "dbias");
  const int64_t C = d.ndim >= 1 ? d.dim(d.ndim - 1) : 0;
  FT_CHECK(dbias.numel() == C && C > 0, op, ": dbias ", dbias.shape_str(), " should hold the ", C,
           " columns of ", d.shape_str());
  bias_backward_cpu(dbias.as<float>(), d.as<float>(), d.numel() / C, C, gw == GradWrite::add);
}

// ---- recommender head (bpr.h) ----

void CpuBackendBase::bpr_forward_backward(Tensor losses, Tensor dh, Tensor dE, Tensor h, Tensor E,
                                          Tensor pos, Tensor neg, float dloss) {
  const char* op = "bpr_forward_backward";
  check_f32(h, op, "h");
  check_f32(E, op, "E");
  const auto [N, C, Vp, K] = bpr::check_bpr(losses, dh, dE, h, E, pos, neg, dloss);
  const int32_t* ps = pos.as<int32_t>();
  const int32_t* ng = neg.as<int32_t>();
  for (int64_t n = 0; n < N; ++n) {
    if (ps[n] < 0) continue;
    FT_CHECK(ps[n] < Vp, op, ": positive item ", ps[n], " of row ", n, " is outside [0, ", Vp, ")");
    for (int64_t k = 0; k < K; ++k)
      FT_CHECK(ng[n * K + k] >= 0 && ng[n * K + k] < Vp, op, ": negative item ", ng[n * K + k],
               " of row ", n, " is outside [0, ", Vp, ")");
  }
  float* coef = nullptr;
  if (dloss != 0.0f) {
    check_f32(dh, op, "dh");
    check_f32(dE, op, "dE");
    const size_t need = static_cast<size_t>(bpr_coef_count(N, K)) * sizeof(float);
    FT_CHECK(workspace_ != nullptr && workspace_size_ >= need, op, ": workspace of ",
             workspace_size_, " bytes is too small (needs ", need,
             "); size it with OpShape::bpr in workspace_bytes() and call set_workspace()");
    coef = static_cast<float*>(workspace_);
  }
  bpr_forward_backward_cpu(losses.as<float>(), dloss != 0.0f ? dh.as<float>() : nullptr,
                           dloss != 0.0f ? dE.as<float>() : nullptr, coef, h.as<float>(),
                           E.as<float>(), ps, ng, N, C, K, dloss);
}
void CpuBackendBase::item_scores(Tensor out, Tensor h, Tensor E, Tensor items) {
  const char* op = "item_scores";
  check_f32(h, op, "h");
  check_f32(E, op, "E");
  const auto [N, C, Vp, M] = bpr::check_item_scores(out, h, E, items);
  const int32_t* it = items.as<int32_t>();
  for (int64_t i = 0; i < N * M; ++i)
    FT_CHECK(it[i] >= 0 && it[i] < Vp, op, ": item ", it[i], " at ", i, " is outside [0, ", Vp, ")");
  item_scores_cpu(out.as<float>(), h.as<float>(), E.as<float>(), it, N, M, C);
}

// ---- diffusion (patchify.h, diffusion.h, rmsnorm.h; shapes: diffusion_shapes.h) ----
void CpuBackendBase::patchify(Tensor out, Tensor img, int p) {
  const auto d = diffusion::check_patchify("patchify", img, out, p);
  check_f32(img, "patchify", "img"), check_f32(out, "patchify", "out");
  patchify_cpu(out.as<float>(), img.as<float>(), d.B, d.C, d.H, d.W, d.p);
}
void CpuBackendBase::patch_embed_forward(Tensor out, Tensor x, Tensor wx, Tensor c, Tensor wc, Tensor bias,
                                         Tensor table) {
  const char* op = "patch_embed_forward";
  const auto d = diffusion::check_patch_embed(op, out, x, wx, c, wc, bias, table, false);
  for (const auto& [t, name] : {std::pair<const Tensor*, const char*>{&out, "out"}, {&x, "x"}, {&wx, "wx"}, {&c, "c"},
                                {&wc, "wc"}, {&bias, "bias"}, {&table, "table"}})
    if (!t->empty()) check_f32(*t, op, name);
  patch_embed_forward_cpu(out.as<float>(), x.as<float>(), wx.as<float>(), c.empty() ? nullptr : c.as<float>(),
                          wc.empty() ? nullptr : wc.as<float>(), bias.empty() ? nullptr : bias.as<float>(),
                          table.empty() ? nullptr : table.as<float>(), d.N, d.O, d.Kx, d.Kc, d.T);
}
void CpuBackendBase::patch_embed_backward(Tensor dwx, Tensor dwc, Tensor dbias, Tensor dout, Tensor x, Tensor c,
                                          GradWrite gw) {
  const char* op = "patch_embed_backward";
  const auto d = diffusion::check_patch_embed(op, dout, x, dwx, c, dwc, dbias, Tensor(), true);
  for (const auto& [t, name] : {std::pair<const Tensor*, const char*>{&dout, "dout"}, {&x, "x"}, {&dwx, "dwx"},
                                {&c, "c"}, {&dwc, "dwc"}, {&dbias, "dbias"}})
    if (!t->empty()) check_f32(*t, op, name);
  patch_embed_backward_cpu(dwx.as<float>(), dwc.empty() ? nullptr : dwc.as<float>(),
                           dbias.empty() ? nullptr : dbias.as<float>(), dout.as<float>(), x.as<float>(),
                           c.empty() ? nullptr : c.as<float>(), d.N, d.O, d.Kx, d.Kc, gw == GradWrite::add);
}
void CpuBackendBase::unpatchify(Tensor img, Tensor tokens, int p) {
  const auto d = diffusion::check_patchify("unpatchify", img, tokens, p);
  check_f32(img, "unpatchify", "img"), check_f32(tokens, "unpatchify", "tokens");
  unpatchify_cpu(img.as<float>(), tokens.as<float>(), d.B, d.C, d.H, d.W, d.p);
}
void CpuBackendBase::diffusion_mix(Tensor out, Tensor noise_out, Tensor x, Tensor y, Tensor coef,
                                   Tensor keys, uint64_t seed) {
  const auto [B, n] = diffusion::check_mix(out, noise_out, x, y, coef, keys);
  for (const Named& t : {Named{out, "out"}, Named{x, "x"}, Named{y, "y"}, Named{noise_out, "noise_out"}})
    if (!t.t.empty()) check_f32(t.t, "diffusion_mix", t.name);
  diffusion_mix_cpu(out.as<float>(), noise_out.empty() ? nullptr : noise_out.as<float>(), x.as<float>(),
                    y.empty() ? nullptr : y.as<float>(), coef.as<float>(), keys.as<int32_t>(), seed, B, n);
}
void CpuBackendBase::mse_loss(Tensor losses, Tensor dpred, Tensor pred, Tensor target, float dloss) {
  const auto [B, n] = diffusion::check_mse(losses, dpred, pred, target, dloss);
  check_f32(pred, "mse_loss", "pred"), check_f32(target, "mse_loss", "target");
  if (dloss != 0.0f) check_f32(dpred, "mse_loss", "dpred");
  mse_loss_cpu(losses.as<float>(), dloss != 0.0f ? dpred.as<float>() : nullptr, pred.as<float>(),
               target.as<float>(), B, n, dloss);
}
void CpuBackendBase::timestep_embedding(Tensor out, Tensor t, float max_period) {
  const auto [B, D] = diffusion::check_timestep(out, t, max_period);
  check_f32(out, "timestep_embedding", "out");
  timestep_embedding_cpu(out.as<float>(), t.as<float>(), B, D, max_period);
}
void CpuBackendBase::rmsnorm_forward(Tensor out, Tensor rstd, Tensor inp) {
  const auto [N, C] = diffusion::check_rmsnorm("rmsnorm_forward", inp, rstd, {{&out, "out"}});
  check_elementwise("rmsnorm_forward", N * C, {{out, "out"}, {inp, "inp"}});
  rmsnorm_forward_cpu(out.as<float>(), rstd.as<float>(), inp.as<float>(), N, C, diffusion::kRmsNormEps);
}
void CpuBackendBase::rmsnorm_backward(Tensor dinp, Tensor dout, Tensor inp, Tensor rstd) {
  const auto [N, C] = diffusion::check_rmsnorm("rmsnorm_backward", inp, rstd, {{&dinp, "dinp"}, {&dout, "dout"}});
  check_elementwise("rmsnorm_backward", N * C, {{dinp, "dinp"}, {dout, "dout"}, {inp, "inp"}});
  rmsnorm_backward_cpu(dinp.as<float>(), dout.as<float>(), inp.as<float>(), rstd.as<float>(), N, C);
}
void CpuBackendBase::ema_update(Tensor out, Tensor src, float decay) {
  check_f32(out, "ema_update", "out");
  check_f32(src, "ema_update", "src");
  check_numel(out, src.numel(), "ema_update", "out");
  FT_CHECK(decay >= 0.f && decay <= 1.f, "ema_update: decay ", decay, " outside [0, 1]");
  ema_update_cpu(out.as<float>(), src.as<float>(), out.numel(), decay);
}

// ---- fused norm + modulate (norm_modulate.h; shapes: norm_modulate_shapes.h) ----
namespace {
NormModCpu norm_mod_cpu(const normmod::Dims& d, const NormModulateOptions& o) {
  NormModCpu n;
  n.B = d.B, n.T = d.T, n.C = d.C, n.windowed = d.windowed, n.g = d.g;
  n.rms = o.norm == NormKind::rms;
  n.eps = normmod::eps_of(o.norm);
  n.overwrite = o.overwrite_dinp;
  return n;
}
}  // namespace
void CpuBackendBase::norm_modulate_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor shift,
                                           Tensor scale, const NormModulateOptions& o) {
  const char* op = "norm_modulate_forward";
  const normmod::Dims d = normmod::check_forward(out, mean, rstd, inp, shift, scale, o);
  check_f32(out, op, "out"), check_f32(inp, op, "inp"), check_f32(shift, op, "shift"), check_f32(scale, op, "scale");
  norm_modulate_forward_cpu(out.as<float>(), mean.empty() ? nullptr : mean.as<float>(), rstd.as<float>(),
                            inp.as<float>(), shift.as<float>(), scale.as<float>(), norm_mod_cpu(d, o));
}
void CpuBackendBase::norm_modulate_backward(Tensor dinp, Tensor dshift, Tensor dscale, Tensor dout, Tensor inp,
                                            Tensor mean, Tensor rstd, Tensor scale, const NormModulateOptions& o) {
  const char* op = "norm_modulate_backward";
  const normmod::Dims d = normmod::check_backward(dinp, dshift, dscale, dout, inp, mean, rstd, scale, o);
  for (const Named& t : {Named{dinp, "dinp"}, Named{dshift, "dshift"}, Named{dscale, "dscale"}, Named{dout, "dout"},
                         Named{inp, "inp"}, Named{scale, "scale"}})
    check_f32(t.t, op, t.name);
  norm_modulate_backward_cpu(dinp.as<float>(), dshift.as<float>(), dscale.as<float>(), dout.as<float>(),
                             inp.as<float>(), mean.empty() ? nullptr : mean.as<float>(), rstd.as<float>(),
                             scale.as<float>(), norm_mod_cpu(d, o));
}

// ---- window ops (window_ops.h) ----
void CpuBackendBase::window_partition(Tensor o, Tensor x, int h, int w, int win, int s) {
  window_op_cpu(window::Op::partition, o, x, h, w, win, s);
}
void CpuBackendBase::window_reverse(Tensor x, Tensor o, int h, int w, int win, int s) {
  window_op_cpu(window::Op::reverse, x, o, h, w, win, s);
}
void CpuBackendBase::patch_merge(Tensor o, Tensor x, int h, int w) {
  window_op_cpu(window::Op::merge, o, x, h, w);
}
void CpuBackendBase::patch_split(Tensor x, Tensor o, int h, int w) {
  window_op_cpu(window::Op::split, x, o, h, w);
}
void CpuBackendBase::upsample_nearest(Tensor o, Tensor x, int h, int w) {
  window_op_cpu(window::Op::upsample, o, x, h, w);
}
void CpuBackendBase::upsample_nearest_backward(Tensor dx, Tensor d, int h, int w) {
  window_op_cpu(window::Op::upsample_bwd, dx, d, h, w);
}
void CpuBackendBase::grid_transpose(Tensor o, Tensor x, int h, int w) { window_op_cpu(window::Op::transpose, o, x, h, w); }

}  // namespace ft::cpu
