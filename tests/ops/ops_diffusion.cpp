// Op table entries for the diffusion ops (DiT, CDEIT): patchify / unpatchify (each one's
// backward is the other), diffusion_mix (q_sample and a DDIM step), the per-sample MSE loss,
// the sinusoidal timestep embedding, LayerNorm without affine and RMSNorm (no affine), and the
// patch embedding as one pass (patch_embed: CDEIT's input layer).
// Operands that the models keep in f32 (images, x0, the eps target, losses) are Store::f32,
// so the bf16/f16 runs also check the mixed-dtype paths. Test shapes cover ragged sizes (n
// not a multiple of the noise block of 4, C off the 16-byte pack, odd D); perf shapes are
// DiT-S/4 on 64x64 images (B=256, Cin=2, p=4: T=256, hidden 384) and CDEIT on 128x128
// (p=2: T=4096, hidden 512, B=32).
#include <cmath>

#include "ops/op_table.h"

namespace ft::ops {

namespace {

Dims img(int64_t B, int64_t C, int64_t H, int64_t W, int64_t p) {
  Dims d;
  d.B = B, d.C = C, d.H = H, d.W = W, d.P = p;
  return d;
}
Dims samples(int64_t B, int64_t n) {
  Dims d;
  d.B = B, d.n = n;
  return d;
}
Dims rows(int64_t N, int64_t C) {  // row-wise norms: N rows (Dims::B) of C
  Dims d;
  d.B = N, d.C = C;
  return d;
}
int64_t img_numel(const Dims& d) { return d.B * d.C * d.H * d.W; }
int64_t tokens_T(const Dims& d) { return (d.H / d.P) * (d.W / d.P); }

// ---- patchify ---------------------------------------------------------------------------------

std::vector<Dims> patch_shapes() {
  // non-square with 3 channels, p = 1 (a plain transpose), odd grid, DiT-S/4's image
  return {img(2, 3, 8, 12, 4), img(3, 1, 6, 10, 2), img(1, 4, 5, 5, 1), img(2, 2, 64, 64, 4)};
}
std::vector<Dims> patch_perf() { return {img(256, 2, 64, 64, 4), img(32, 1, 128, 128, 2)}; }

// img [B,C,H,W] (s_img) and its tokens [B,T,C*p*p] (s_tok); gradients d<name> likewise
void patch_inputs(const Dims& d, Gen& g, HostSet& hs, Store s_img, Store s_tok, bool from_img) {
  const int64_t n = img_numel(d), T = tokens_T(d), F = d.C * d.P * d.P;
  if (from_img) {
    hs.in("img", {d.B, d.C, d.H, d.W}, g.randn(n), s_img);
    hs.out("tokens", {d.B, T, F}, s_tok);
    hs.in("dtokens", {d.B, T, F}, g.randn(n), s_tok);
    hs.out("dimg", {d.B, d.C, d.H, d.W}, s_img);
  } else {
    hs.in("tokens", {d.B, T, F}, g.randn(n), s_tok);
    hs.out("img", {d.B, d.C, d.H, d.W}, s_img);
    hs.in("dimg", {d.B, d.C, d.H, d.W}, g.randn(n), s_img);
    hs.out("dtokens", {d.B, T, F}, s_tok);
  }
}
void patchify_fwd(OpRun& r) { r.be.patchify(r.t("tokens"), r.t("img"), static_cast<int>(r.d.P)); }
void unpatchify_fwd(OpRun& r) { r.be.unpatchify(r.t("img"), r.t("tokens"), static_cast<int>(r.d.P)); }
Work patch_work(const Dims& d, size_t in_bytes, size_t out_bytes) {
  return Work{0, static_cast<double>(img_numel(d)) * static_cast<double>(in_bytes + out_bytes)};
}

// ---- diffusion_mix ------------------------------------------------------------------------------

std::vector<Dims> mix_shapes() { return {samples(4, 1003), samples(3, 7), samples(2, 3 * 4096), samples(5, 1)}; }
std::vector<Dims> mix_perf() { return {samples(256, 2 * 64 * 64), samples(32, 128 * 128)}; }

// Keys with a repeat, a negative one (read as uint32) and a large one; coefficients as a
// q_sample's (sqrt(ab), 0, sqrt(1 - ab)) or a DDIM step's (any three).
void mix_inputs(const Dims& d, Gen& g, HostSet& hs, bool ddim) {
  const int64_t B = d.B, n = d.n;
  std::vector<int32_t> keys(B);
  const int32_t pool[] = {7, -3, 2147483647, 7, 0, 123456};
  for (int64_t b = 0; b < B; ++b)  // past 6 samples: shifted copies (wrapping as uint32)
    keys[b] = static_cast<int32_t>(static_cast<uint32_t>(pool[b % 6]) + 1000u * static_cast<uint32_t>(b / 6));
  hs.tokens("keys", {B}, keys);
  std::vector<float> coef(B * 3);
  const auto ab = g.randu(B, 0.01f, 0.99f);
  const auto any = g.randn(B * 3, 0.7f);
  for (int64_t b = 0; b < B; ++b) {
    coef[b * 3] = ddim ? any[b * 3] : std::sqrt(ab[b]);
    coef[b * 3 + 1] = ddim ? any[b * 3 + 1] : 0.0f;
    coef[b * 3 + 2] = ddim ? any[b * 3 + 2] : std::sqrt(1.0f - ab[b]);
  }
  hs.in("coef", {B, 3}, coef, Store::f32);
  if (ddim) {  // x_t kept in f32, the model's prediction in the activation dtype
    hs.in("x", {B, n}, g.randn(B * n), Store::f32);
    hs.in("y", {B, n}, g.randn(B * n));
    hs.out("out", {B, n}, Store::f32);
  } else {  // x0 (an image, f32) -> x_t (the model's input) and eps (the target), activations
    hs.in("x", {B, n}, g.randn(B * n), Store::f32);
    hs.out("out", {B, n});
    hs.out("noise", {B, n});
  }
}
void mix_run(OpRun& r) {
  r.be.diffusion_mix(r.t("out"), r.maybe("noise"), r.t("x"),
                     r.maybe("y"), r.t("coef"), r.t("keys"), 0x5eed5eed12345ull);
}

// ---- mse_loss ---------------------------------------------------------------------------------

constexpr float kDloss = 0.37f;  // the gradient's weight (1 / samples in a real step)
std::vector<Dims> mse_shapes() { return {samples(4, 1003), samples(2, 2 * 64 * 64), samples(3, 1), samples(1, 777)}; }
std::vector<Dims> mse_perf() { return {samples(256, 256 * 2 * 16), samples(32, 4096 * 4)}; }

void mse_inputs(const Dims& d, Gen& g, HostSet& hs, Store s_target) {
  const int64_t B = d.B, n = d.n;
  hs.in("pred", {B, n}, g.randn(B * n));
  hs.in("target", {B, n}, g.randn(B * n), s_target);
  hs.out("losses", {B}, Store::f32);
  hs.out("dpred", {B, n});
  hs.in("dlosses", {B}, std::vector<float>(B, kDloss), Store::f32);  // grad mode's cotangent
}
void mse_eval(OpRun& r) { r.be.mse_loss(r.t("losses"), Tensor(), r.t("pred"), r.t("target"), 0.0f); }
void mse_train(OpRun& r) { r.be.mse_loss(r.t("losses"), r.t("dpred"), r.t("pred"), r.t("target"), kDloss); }

// ---- layernorm without affine, rmsnorm ----------------------------------------------------------

// C = 64, 384 (DiT-S), 512 (CDEIT), 1152 (DiT-XL) in packs; 72 an odd number of bf16 packs.
std::vector<Dims> norm_shapes() { return {rows(77, 64), rows(300, 384), rows(33, 512), rows(77, 1152), rows(132, 72)}; }
// RMSNorm also takes any C (the element path): 37, 1
std::vector<Dims> rms_shapes() {
  auto v = norm_shapes();
  v.push_back(rows(13, 37));
  v.push_back(rows(5, 1));
  return v;
}

void norm_inputs(const Dims& d, Gen& g, HostSet& hs, bool backward, bool rms) {
  const int64_t N = d.B, C = d.C;
  auto x = g.randn(N * C, 2.f);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) x[n * C + c] += 0.5f * n / N;  // nonzero row means
  hs.in("x", {N, C}, x);
  hs.out("out", {N, C});
  if (!rms) hs.out("mean", {N}, Store::f32);
  hs.out("rstd", {N}, Store::f32);
  if (!backward) return;
  hs.in("dout", {N, C}, g.randn(N * C));
  hs.inout("dx", {N, C}, g.randn(N * C));  // accumulates (the residual stream's gradient)
}
void ln_fwd(OpRun& r) { r.be.layernorm_forward(r.t("out"), r.t("mean"), r.t("rstd"), r.t("x"), Tensor(), Tensor()); }
void ln_bwd(OpRun& r) {
  r.be.layernorm_backward(r.t("dx"), Tensor(), Tensor(), r.t("dout"), r.t("x"), Tensor(), r.t("mean"), r.t("rstd"));
}
void rms_fwd(OpRun& r) { r.be.rmsnorm_forward(r.t("out"), r.t("rstd"), r.t("x")); }
void rms_bwd(OpRun& r) { r.be.rmsnorm_backward(r.t("dx"), r.t("dout"), r.t("x"), r.t("rstd")); }

void add_patch_ops(std::vector<OpCase>& t) {
  OpCase c;
  c.seed = 21;
  c.shapes = patch_shapes();
  c.perf_shapes = patch_perf();
  c.grad_shapes = {img(2, 2, 4, 6, 2), img(1, 3, 3, 3, 3)};
  c.grad.fwd_out = "tokens";
  c.grad.cotangent = "dtokens";
  // f32 image -> activation tokens (the model's input); its backward, activation gradients
  // -> an f32 image gradient
  c.name = "patchify_fwd";
  c.make = [](const Dims& d, Precision, Gen& g, HostSet& hs) { patch_inputs(d, g, hs, Store::f32, Store::act, true); };
  c.run = patchify_fwd;
  c.checks = {{"tokens", tol(1e-7)}};  // a copy: exact in f32, one rounding in bf16/f16
  c.work = [](const Dims& d, size_t a) { return patch_work(d, 4, a); };
  t.push_back(c);

  c.name = "patchify_bwd";
  c.run = [](OpRun& r) { r.be.unpatchify(r.t("dimg"), r.t("dtokens"), static_cast<int>(r.d.P)); };
  c.checks = {{"dimg", tol(1e-7)}};
  c.grad.forward = patchify_fwd;
  c.grad.wrt = {{"img", "dimg"}};
  c.work = [](const Dims& d, size_t a) { return patch_work(d, a, 4); };
  t.push_back(c);

  // activation tokens (the final layer's) -> an activation image; backward the other way
  c.name = "unpatchify_fwd";
  c.make = [](const Dims& d, Precision, Gen& g, HostSet& hs) { patch_inputs(d, g, hs, Store::act, Store::act, false); };
  c.run = unpatchify_fwd;
  c.checks = {{"img", tol(1e-7)}};
  c.grad = {};
  c.work = [](const Dims& d, size_t a) { return patch_work(d, a, a); };
  t.push_back(c);

  c.name = "unpatchify_bwd";
  c.run = [](OpRun& r) { r.be.patchify(r.t("dtokens"), r.t("dimg"), static_cast<int>(r.d.P)); };
  c.checks = {{"dtokens", tol(1e-7)}};
  c.grad.forward = unpatchify_fwd;
  c.grad.fwd_out = "img";
  c.grad.cotangent = "dimg";
  c.grad.wrt = {{"tokens", "dtokens"}};
  t.push_back(c);
}

// ---- patch embedding (one pass: narrow product of [x | c], bias, position table) ---------------
// Dims: B samples of T tokens, C = O output columns, K = Kx, n = Kc (0: no second input),
// P = 1: with the position table [T, O]; bias as for the products.
Dims embed(int64_t B, int64_t T, int64_t O, int64_t Kx, int64_t Kc, bool table, bool bias = true) {
  Dims d;
  d.B = B, d.T = T, d.C = O, d.K = Kx, d.n = Kc, d.P = table ? 1 : 0, d.bias = bias;
  return d;
}
void embed_inputs(const Dims& d, Gen& g, HostSet& hs, Role grads) {
  const int64_t N = d.B * d.T;
  hs.in("x", {d.B, d.T, d.K}, g.randn(N * d.K));
  hs.in("wx", {d.C, d.K}, g.randn(d.C * d.K, 0.5f));
  if (d.n > 0) {
    hs.in("c", {d.B, d.T, d.n}, g.randn(N * d.n));
    hs.in("wc", {d.C, d.n}, g.randn(d.C * d.n, 0.5f));
  }
  if (d.bias) hs.in("bias", {d.C}, g.randn(d.C));
  if (d.P) hs.in("table", {d.T, d.C}, g.randn(d.T * d.C));
  hs.out("out", {d.B, d.T, d.C});
  // dout with a per-row offset, so that a dropped or doubled row group shows in the sums
  auto dout = g.randn(N * d.C);
  for (int64_t r = 0; r < N; ++r)
    for (int64_t o = 0; o < d.C; ++o) dout[r * d.C + o] += (r % 7) * 0.25f;
  hs.in("dout", {d.B, d.T, d.C}, dout);
  const float big = std::sqrt(static_cast<float>(N));  // the sums' size: overwriting fails an add
  auto grad = [&](const char* name, std::vector<int64_t> shape, int64_t numel) {
    if (grads == Role::out) hs.out(name, std::move(shape));
    else hs.inout(name, std::move(shape), g.randn(numel, big));
  };
  grad("dwx", {d.C, d.K}, d.C * d.K);
  if (d.n > 0) grad("dwc", {d.C, d.n}, d.C * d.n);
  if (d.bias) grad("dbias", {d.C}, d.C);
}
void embed_fwd(OpRun& r) {
  r.be.patch_embed_forward(r.t("out"), r.t("x"), r.t("wx"), r.maybe("c"), r.maybe("wc"), r.maybe("bias"),
                           r.maybe("table"));
}

void add_patch_embed_ops(std::vector<OpCase>& t) {
  OpCase c;
  c.seed = 27;
  // CDEIT's (4 + 4 inputs, table) on whole and ragged packs (O = 37: CUDA's element path),
  // a DiT-like single input of 16 without table or bias, 24 inputs (three backward passes of
  // 8), and 48 (a 4x4 patch of three channels and their condition: two CUDA forward launches)
  c.shapes = {embed(2, 37, 64, 4, 4, true),  embed(3, 9, 37, 4, 4, true),  embed(2, 300, 512, 4, 4, true),
              embed(2, 33, 96, 16, 0, false, false), embed(1, 50, 64, 12, 12, true), embed(2, 40, 64, 24, 24, true),
              embed(2, 40000, 64, 4, 4, true)};  // over 256 rows a row group: inputs staged in several chunks
  c.grad_shapes = {embed(2, 5, 12, 4, 3, true), embed(1, 7, 9, 5, 0, false, false)};
  c.perf_shapes = {embed(32, 4096, 512, 4, 4, true)};  // CDEIT's at batch 32
  c.grad.forward = embed_fwd;
  c.grad.fwd_out = "out";
  c.grad.cotangent = "dout";
  c.name = "patch_embed_fwd";
  c.make = [](const Dims& d, Precision, Gen& g, HostSet& hs) { embed_inputs(d, g, hs, Role::inout); };
  c.run = embed_fwd;
  c.checks = {{"out", tol(1e-5)}};
  c.work = [](const Dims& d, size_t a) {
    return Work{0, static_cast<double>(d.B * d.T) * static_cast<double>(d.C + d.K + d.n) * a};
  };
  GradSpec grad = c.grad;
  c.grad = {};
  t.push_back(c);

  c.name = "patch_embed_bwd";
  c.run = [](OpRun& r) {
    r.be.patch_embed_backward(r.t("dwx"), r.maybe("dwc"), r.maybe("dbias"), r.t("dout"), r.t("x"), r.maybe("c"),
                              GradWrite::add);
  };
  c.checks = {{"dwx", tol(1e-5)}, {"dwc", tol(1e-5)}, {"dbias", tol(1e-5)}};
  c.grad = grad;
  c.grad.wrt = {{"wx", "dwx"}, {"wc", "dwc"}, {"bias", "dbias"}};
  t.push_back(c);

  // GradWrite::overwrite (a step's first micro-batch): NaN before must not leak through
  c.name = "patch_embed_bwd_overwrite";
  c.make = [](const Dims& d, Precision, Gen& g, HostSet& hs) { embed_inputs(d, g, hs, Role::out); };
  c.run = [](OpRun& r) {
    r.be.patch_embed_backward(r.t("dwx"), r.maybe("dwc"), r.maybe("dbias"), r.t("dout"), r.t("x"), r.maybe("c"),
                              GradWrite::overwrite);
  };
  c.perf_shapes = {};
  t.push_back(c);
}

}  // namespace

void add_diffusion_ops(std::vector<OpCase>& t) {
  add_patch_ops(t);
  add_patch_embed_ops(t);
  {
    OpCase c;
    c.name = "diffusion_mix_qsample";
    c.seed = 22;
    c.shapes = mix_shapes();
    c.perf_shapes = mix_perf();
    c.make = [](const Dims& d, Precision, Gen& g, HostSet& hs) { mix_inputs(d, g, hs, false); };
    c.run = mix_run;
    // the noise is the same function on both backends (double transform rounded once)
    c.checks = {{"out", tol(1e-6)}, {"noise", tol(1e-6)}};
    // reads x (f32), writes x_t and eps (activation dtype)
    c.work = [](const Dims& d, size_t a) { return Work{0, static_cast<double>(d.B * d.n) * (4.0 + 2.0 * a)}; };
    t.push_back(c);

    c.name = "diffusion_mix_ddim";
    c.make = [](const Dims& d, Precision, Gen& g, HostSet& hs) { mix_inputs(d, g, hs, true); };
    c.checks = {{"out", tol(1e-6)}};
    c.work = [](const Dims& d, size_t a) { return Work{0, static_cast<double>(d.B * d.n) * (8.0 + a)}; };
    t.push_back(c);
  }
  {
    OpCase c;
    c.name = "mse_loss";
    c.seed = 23;
    c.shapes = mse_shapes();
    c.perf_shapes = mse_perf();
    // the eps target in f32; the losses are fp32 sums of the same rounded inputs everywhere
    c.make = [](const Dims& d, Precision, Gen& g, HostSet& hs) { mse_inputs(d, g, hs, Store::f32); };
    c.run = mse_train;
    c.checks = {{"losses", {1e-5, 1e-5, 1e-5}}, {"dpred", tol(1e-6)}};
    c.grad_shapes = {samples(3, 7), samples(2, 1)};
    c.grad.forward = mse_eval;
    c.grad.fwd_out = "losses";
    c.grad.cotangent = "dlosses";  // kDloss everywhere: d(kDloss * sum_b losses) / d pred
    c.grad.wrt = {{"pred", "dpred"}};
    c.work = [](const Dims& d, size_t a) { return Work{0, static_cast<double>(d.B * d.n) * (4.0 + 2.0 * a)}; };
    t.push_back(c);

    c.name = "mse_loss_eval";  // dloss = 0: losses only; dpred must stay untouched (NaN)
    c.make = [](const Dims& d, Precision, Gen& g, HostSet& hs) { mse_inputs(d, g, hs, Store::act); };
    c.run = mse_eval;
    c.checks = {{"losses", {1e-5, 1e-5, 1e-5}}};
    c.grad = {};
    c.extra = [](const Dims&, Precision, const HostSet&, const Values& got) {
      for (double v : got.at("dpred"))
        if (!std::isnan(v)) return std::vector<std::string>{"dpred written with dloss = 0"};
      return std::vector<std::string>{};
    };
    c.work = [](const Dims& d, size_t a) { return Work{0, static_cast<double>(d.B * d.n) * 2.0 * a}; };
    t.push_back(c);
  }
  {
    OpCase c;
    c.name = "timestep_embedding";
    c.seed = 24;
    auto te = [](int64_t B, int64_t D) {
      Dims d;
      d.B = B, d.C = D;
      return d;
    };
    // DiT's 256 frequencies, odd D (a zero column), D = 2 and D = 1 (no frequencies)
    c.shapes = {te(37, 256), te(5, 255), te(3, 2), te(2, 1)};
    c.perf_shapes = {te(256, 256)};
    c.make = [](const Dims& d, Precision, Gen& g, HostSet& hs) {
      auto tv = g.randu(d.B, 0.f, 1000.f);  // DiT: integer steps; CDEIT: continuous ones
      for (int64_t b = 0; b < d.B; b += 2) tv[b] = std::floor(tv[b]);
      tv[0] = 0.f;
      hs.in("t", {d.B}, tv, Store::f32);
      hs.out("out", {d.B, d.C});
    };
    c.run = [](OpRun& r) { r.be.timestep_embedding(r.t("out"), r.t("t")); };
    c.checks = {{"out", tol(1e-6)}};
    c.work = [](const Dims& d, size_t a) { return Work{0, static_cast<double>(d.B * d.C) * a}; };
    t.push_back(c);
  }
  {
    OpCase c;
    c.name = "layernorm_noaffine_fwd";
    c.seed = 25;
    c.shapes = norm_shapes();
    c.perf_shapes = {rows(256 * 256, 384)};  // DiT-S/4: B=256, T=256
    c.make = [](const Dims& d, Precision, Gen& g, HostSet& hs) { norm_inputs(d, g, hs, false, false); };
    c.run = ln_fwd;
    c.checks = {{"out", tol(1e-5)}, {"mean", {1e-5, 1e-5, 1e-5}}, {"rstd", {1e-5, 1e-5, 1e-5}}};
    c.work = [](const Dims& d, size_t a) { return Work{0, 2.0 * d.B * d.C * a}; };
    t.push_back(c);

    c.name = "layernorm_noaffine_bwd";
    c.make = [](const Dims& d, Precision, Gen& g, HostSet& hs) { norm_inputs(d, g, hs, true, false); };
    c.run = [](OpRun& r) {
      ln_fwd(r);  // the statistics the backward reads come from this backend
      ln_bwd(r);
    };
    c.timed = ln_bwd;
    c.checks = {{"dx", tol(1e-5)}};
    c.grad_shapes = {rows(10, 8)};
    c.grad.forward = ln_fwd;
    c.grad.fwd_out = "out";
    c.grad.cotangent = "dout";
    c.grad.wrt = {{"x", "dx"}};
    c.work = [](const Dims& d, size_t a) { return Work{0, 4.0 * d.B * d.C * a}; };
    t.push_back(c);
  }
  {
    OpCase c;
    c.name = "rmsnorm_fwd";
    c.seed = 26;
    c.shapes = rms_shapes();
    c.perf_shapes = {rows(32 * 4096, 512)};  // CDEIT: B=32, T=4096
    c.make = [](const Dims& d, Precision, Gen& g, HostSet& hs) { norm_inputs(d, g, hs, false, true); };
    c.run = rms_fwd;
    c.checks = {{"out", tol(1e-5)}, {"rstd", {1e-5, 1e-5, 1e-5}}};
    c.work = [](const Dims& d, size_t a) { return Work{0, 2.0 * d.B * d.C * a}; };
    t.push_back(c);

    c.name = "rmsnorm_bwd";
    c.make = [](const Dims& d, Precision, Gen& g, HostSet& hs) { norm_inputs(d, g, hs, true, true); };
    c.run = [](OpRun& r) {
      rms_fwd(r);
      rms_bwd(r);
    };
    c.timed = rms_bwd;
    c.checks = {{"dx", tol(1e-5)}};
    c.grad_shapes = {rows(10, 8), rows(3, 5)};  // C = 1: a gradient of ~eps, nothing to see
    c.grad.forward = rms_fwd;
    c.grad.fwd_out = "out";
    c.grad.cotangent = "dout";
    c.grad.wrt = {{"x", "dx"}};
    c.work = [](const Dims& d, size_t a) { return Work{0, 4.0 * d.B * d.C * a}; };
    t.push_back(c);
  }
}

}  // namespace ft::ops
