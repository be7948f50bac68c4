// Shape checks of the diffusion ops (Backend::patchify, unpatchify, diffusion_mix, mse_loss,
// timestep_embedding, rmsnorm_forward/backward), shared by the CPU and CUDA backends so both
// refuse the same arguments (as bpr_shapes.h does for the recommender head). Which float
// dtypes a tensor may have is each backend's business (the CPU is f32 only); the fixed ones
// (f32 statistics and coefficients, i32 keys) are checked here. Host code only.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <utility>

#include "core/error.h"
#include "core/tensor.h"

namespace ft::diffusion {

// RMSNorm's epsilon: CDEIT's own RMSNorm uses 1e-6 (torch.nn.RMSNorm(eps=None) would take
// finfo(dtype).eps, 1.2e-7 in fp32 and 7.8e-3 in bf16: a precision-dependent model).
constexpr float kRmsNormEps = 1e-6f;

struct PatchDims {
  int64_t B = 0, C = 0, H = 0, W = 0, p = 0, T = 0, F = 0;  // F = C*p*p features a token
};

// img [B,C,H,W] with H, W multiples of p; tokens [B, T=(H/p)*(W/p), F=C*p*p].
inline PatchDims check_patchify(const char* op, const Tensor& img, const Tensor& tokens, int p) {
  FT_CHECK(!img.empty() && !tokens.empty(), op, ": img ", img.shape_str(), " and tokens ", tokens.shape_str(),
           " must both be given");
  FT_CHECK(img.ndim == 4, op, ": img ", img.shape_str(), " should be [B,C,H,W]");
  FT_CHECK(p >= 1, op, ": patch size p=", p, " must be >= 1");
  PatchDims d;
  d.B = img.dim(0), d.C = img.dim(1), d.H = img.dim(2), d.W = img.dim(3), d.p = p;
  FT_CHECK(d.H % p == 0 && d.W % p == 0, op, ": image ", d.H, "x", d.W, " (img ", img.shape_str(),
           ") is not a whole number of ", p, "x", p, " patches: H and W must be multiples of p");
  d.T = (d.H / p) * (d.W / p);
  d.F = d.C * p * p;
  FT_CHECK(tokens.ndim == 3 && tokens.dim(0) == d.B && tokens.dim(1) == d.T && tokens.dim(2) == d.F, op,
           ": tokens ", tokens.shape_str(), " should be [B=", d.B, ",T=", d.T, ",C*p*p=", d.F, "] for img ",
           img.shape_str(), " and p=", p);
  FT_CHECK(img.data != tokens.data, op, ": img and tokens must not alias (a permutation is not in place)");
  return d;
}

struct SampleDims {
  int64_t B = 0, n = 0;  // samples, elements a sample
};

// `x` [B,...] gives B = x.dim(0) and n = x.numel()/B; every tensor of `same` (when not empty)
// must hold B*n elements in B rows.
inline SampleDims sample_dims(const char* op, const char* xname, const Tensor& x,
                              std::initializer_list<std::pair<const Tensor*, const char*>> same) {
  FT_CHECK(!x.empty() && x.ndim >= 1 && x.dim(0) > 0, op, ": ", xname, " ", x.shape_str(),
           " should be [B,...] with B >= 1");
  SampleDims d{x.dim(0), x.numel() / x.dim(0)};
  for (const auto& [t, name] : same)
    if (!t->empty())
      FT_CHECK(t->ndim >= 1 && t->dim(0) == d.B && t->numel() == d.B * d.n, op, ": ", name, " ", t->shape_str(),
               " should be [B=", d.B, ",...] with ", d.n, " elements a sample, as ", xname, " ", x.shape_str());
  return d;
}

// diffusion_mix: x, out, y (optional), noise_out (optional) [B, n]; coef f32 [B,3]; keys i32 [B].
inline SampleDims check_mix(const Tensor& out, const Tensor& noise_out, const Tensor& x, const Tensor& y,
                            const Tensor& coef, const Tensor& keys) {
  const char* op = "diffusion_mix";
  FT_CHECK(!out.empty(), op, ": out is empty");
  const SampleDims d = sample_dims(op, "x", x, {{&out, "out"}, {&y, "y"}, {&noise_out, "noise_out"}});
  FT_CHECK(coef.dtype == DType::f32 && coef.numel() == d.B * 3, op, ": coef ", coef.shape_str(),
           " should be f32[", d.B, ",3]");
  FT_CHECK(keys.dtype == DType::i32 && keys.numel() == d.B, op, ": keys ", keys.shape_str(), " should be i32[",
           d.B, "]");
  FT_CHECK((out.data != x.data || out.dtype == x.dtype) && (out.data != y.data || out.dtype == y.dtype), op,
           ": out aliases x or y with another dtype (in place needs the same dtype)");
  if (!noise_out.empty())
    FT_CHECK(noise_out.data != out.data && noise_out.data != x.data && noise_out.data != y.data, op,
             ": noise_out must not alias out, x or y");
  return d;
}

// mse_loss: pred, target (and dpred when dloss != 0) [B, n]; losses f32 [B].
inline SampleDims check_mse(const Tensor& losses, const Tensor& dpred, const Tensor& pred, const Tensor& target,
                            float dloss) {
  const char* op = "mse_loss";
  FT_CHECK(!target.empty(), op, ": target is empty");
  if (dloss != 0.0f) FT_CHECK(!dpred.empty(), op, ": dpred is empty but dloss=", dloss, " asks for it");
  const Tensor none;
  const SampleDims d =
      sample_dims(op, "pred", pred, {{&target, "target"}, {dloss != 0.0f ? &dpred : &none, "dpred"}});
  FT_CHECK(losses.dtype == DType::f32 && losses.numel() == d.B, op, ": losses ", losses.shape_str(),
           " should be f32[", d.B, "]");
  return d;
}

// timestep_embedding: t f32 [B], out [B, D].
inline SampleDims check_timestep(const Tensor& out, const Tensor& t, float max_period) {
  const char* op = "timestep_embedding";
  FT_CHECK(t.dtype == DType::f32 && t.ndim == 1 && t.numel() >= 1, op, ": t ", t.shape_str(),
           " should be f32[B]");
  FT_CHECK(out.ndim == 2 && out.dim(0) == t.numel() && out.dim(1) >= 1, op, ": out ", out.shape_str(),
           " should be [B=", t.numel(), ",D]");
  FT_CHECK(max_period > 0.0f, op, ": max_period=", max_period, " must be > 0");
  return {out.dim(0), out.dim(1)};
}

// rmsnorm: x (out, dinp, dout) [N, C] like inp; rstd f32 [N]. Returns B = N rows, n = C.
inline SampleDims check_rmsnorm(const char* op, const Tensor& inp, const Tensor& rstd,
                                std::initializer_list<std::pair<const Tensor*, const char*>> like) {
  FT_CHECK(!inp.empty() && inp.ndim >= 1 && inp.dim(-1) >= 1, op, ": inp ", inp.shape_str(), " should be [N,C]");
  const int64_t C = inp.dim(-1), N = inp.numel() / C;
  for (const auto& [t, name] : like)
    FT_CHECK(!t->empty() && t->numel() == N * C && t->dim(-1) == C, op, ": ", name, " ", t->shape_str(),
             " should be [", N, ",", C, "] as inp ", inp.shape_str());
  FT_CHECK(rstd.dtype == DType::f32 && rstd.numel() == N, op, ": rstd ", rstd.shape_str(), " should be f32[", N,
           "]");
  return {N, C};
}

// patch_embed_forward/backward (Backend::patch_embed_*): N rows of x [..., Kx] (and c [..., Kc])
// into O columns. The weights' roles are the gradients' in the backward (dwx [O, Kx] ...).
struct PatchEmbedDims {
  int64_t N = 0, O = 0, Kx = 0, Kc = 0, T = 0;  // T: the table's rows (0: no table)
};
// out: out (forward) or dout (backward); table: empty in the backward.
inline PatchEmbedDims check_patch_embed(const char* op, const Tensor& out, const Tensor& x, const Tensor& wx,
                                        const Tensor& c, const Tensor& wc, const Tensor& bias, const Tensor& table,
                                        bool backward) {
  const char* wn = backward ? "dwx" : "wx";
  const char* cn = backward ? "dwc" : "wc";
  const char* bn = backward ? "dbias" : "bias";
  const char* on = backward ? "dout" : "out";
  FT_CHECK(!x.empty() && x.ndim >= 1 && x.dim(-1) >= 1, op, ": x ", x.shape_str(), " should be [...,Kx]");
  PatchEmbedDims d;
  d.Kx = x.dim(-1), d.N = x.numel() / d.Kx;
  FT_CHECK(!out.empty() && out.ndim >= 1 && out.dim(-1) >= 1 && out.numel() == d.N * out.dim(-1), op, ": ", on, " ",
           out.shape_str(), " should be [...,O] with the ", d.N, " rows of x ", x.shape_str());
  d.O = out.dim(-1);
  FT_CHECK(wx.ndim == 2 && wx.dim(0) == d.O && wx.dim(1) == d.Kx, op, ": ", wn, " ", wx.shape_str(), " should be [O=",
           d.O, ",Kx=", d.Kx, "]");
  FT_CHECK(c.empty() == wc.empty() || (backward && wc.empty()), op, ": c ", c.shape_str(), " and ", cn, " ",
           wc.shape_str(), " must be given together");
  if (!c.empty()) {
    FT_CHECK(c.ndim >= 1 && c.dim(-1) >= 1 && c.numel() == d.N * c.dim(-1), op, ": c ", c.shape_str(),
             " should be [...,Kc] with the ", d.N, " rows of x ", x.shape_str());
    d.Kc = c.dim(-1);
    if (!wc.empty())
      FT_CHECK(wc.ndim == 2 && wc.dim(0) == d.O && wc.dim(1) == d.Kc, op, ": ", cn, " ", wc.shape_str(),
               " should be [O=", d.O, ",Kc=", d.Kc, "]");
  }
  if (!bias.empty())
    FT_CHECK(bias.numel() == d.O, op, ": ", bn, " ", bias.shape_str(), " should be [O=", d.O, "]");
  if (!table.empty()) {
    FT_CHECK(table.ndim == 2 && table.dim(1) == d.O && table.dim(0) >= 1 && d.N % table.dim(0) == 0, op,
             ": table ", table.shape_str(), " should be [T,O=", d.O, "] with T dividing the ", d.N, " rows");
    d.T = table.dim(0);
  }
  for (const Tensor* t : {&x, &c, &wx, &wc, &bias, &table})
    FT_CHECK(t->empty() || t->data != out.data, op, ": ", on, " must not alias an input");
  return d;
}

}  // namespace ft::diffusion
