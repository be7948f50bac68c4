// Op table entries for the fused adaLN input (Backend::norm_modulate_forward/backward): a
// no-affine LayerNorm or RMSNorm, then modulate, in the input's order or in Swin window order.
// Dims: [B, T, C]; windowed cases also H, W (T = H*W), P = the window, n = the shift.
// Test shapes: C in packs (64, DiT-S's 384), C = 37 (the element path), one chunk a sample and
// many, windows 4x4 on an 8x8 grid with shift 0 and 2; grad shapes are small. Perf shapes:
// DiT-S (B=256, T=256, C=384) and CDEIT's first stage (B=32, 64x64 grid, windows of 16, C=512).
// The residual_norm_modulate_* cases put the gated residual in front (the block's middle).
// The backward cases run the forward first (the statistics the backward reads come from the
// backend under test); dinp accumulates, so it starts from random values (Role::inout), except
// in the *_overwrite cases (NormModulateOptions::overwrite_dinp), where it starts as NaN.
#include "ops/op_table.h"

namespace ft::ops {

namespace {

Dims btc(int64_t B, int64_t T, int64_t C) {
  Dims d;
  d.B = B, d.T = T, d.C = C;
  return d;
}
Dims grid(int64_t B, int64_t H, int64_t W, int64_t C, int64_t window, int64_t shift) {
  Dims d = btc(B, H * W, C);
  d.H = H, d.W = W, d.P = window, d.n = shift;
  return d;
}

// N rows of C random values whose means differ from row to row (so a wrong mean shows).
std::vector<float> rows_with_distinct_means(Gen& g, int64_t N, int64_t C) {
  auto x = g.randn(N * C, 2.f);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) x[n * C + c] += 0.5f * static_cast<float>(n % 7) - 1.f;
  return x;
}

NormModulateOptions options(const Dims& d, NormKind k, bool overwrite_dinp = false) {
  NormModulateOptions o;
  o.norm = k;
  o.out_order = d.window_order();
  o.overwrite_dinp = overwrite_dinp;
  return o;
}

void inputs(const Dims& d, Gen& g, HostSet& hs, NormKind k, bool backward, bool overwrite = false) {
  const int64_t B = d.B, T = d.T, C = d.C, N = B * T;
  hs.in("x", {B, T, C}, rows_with_distinct_means(g, N, C));
  hs.in("shift", {B, C}, g.randn(B * C));
  hs.in("scale", {B, C}, g.randn(B * C, 0.5f));
  hs.out("out", {B, T, C});
  if (k == NormKind::layer) hs.out("mean", {N}, Store::f32);
  hs.out("rstd", {N}, Store::f32);
  if (!backward) return;
  hs.in("dout", {B, T, C}, g.randn(N * C));
  if (overwrite) hs.out("dx", {B, T, C});      // written: NaN before must not leak through
  else hs.inout("dx", {B, T, C}, g.randn(N * C));  // accumulates (the residual stream's gradient)
  hs.out("dshift", {B, C});                   // overwritten: NaN before must not leak through
  hs.out("dscale", {B, C});
}

Tensor mean_of(OpRun& r, NormKind k) { return k == NormKind::layer ? r.t("mean") : Tensor(); }

void forward(OpRun& r, NormKind k) {
  r.be.norm_modulate_forward(r.t("out"), mean_of(r, k), r.t("rstd"), r.t("x"), r.t("shift"), r.t("scale"),
                             options(r.d, k));
}
void backward(OpRun& r, NormKind k, bool overwrite = false) {
  r.be.norm_modulate_backward(r.t("dx"), r.t("dshift"), r.t("dscale"), r.t("dout"), r.t("x"), mean_of(r, k),
                              r.t("rstd"), r.t("scale"), options(r.d, k, overwrite));
}

void add_kind(std::vector<OpCase>& t, NormKind k, bool windowed, uint32_t seed) {
  const std::string name = std::string("norm_modulate_") + (windowed ? "win_" : "");
  const std::string norm = k == NormKind::layer ? "layer" : "rms";
  OpCase c;
  c.seed = seed;
  if (windowed) {
    // 8x8 grids of 4x4 windows, shift 0 and 2; C off the pack; a CDEIT-like 32x32 grid of
    // 16x16 windows shifted by 8 (several backward chunks a sample)
    c.shapes = {grid(2, 8, 8, 64, 4, 0), grid(2, 8, 8, 64, 4, 2), grid(3, 8, 8, 37, 4, 2), grid(1, 4, 8, 16, 4, 0),
                grid(2, 32, 32, 64, 16, 8)};
    c.grad_shapes = {grid(2, 4, 4, 5, 2, 1), grid(1, 4, 4, 8, 2, 0)};
    c.perf_shapes = {grid(32, 64, 64, 512, 16, 8)};
  } else {
    // one chunk a sample (T = 9), several (T = 256), C = 37 on the element path, DiT-XL's width
    c.shapes = {btc(2, 37, 64), btc(3, 9, 37), btc(4, 256, 384), btc(1, 200, 1152), btc(2, 300, 72)};
    c.grad_shapes = {btc(2, 3, 5), btc(1, 4, 8)};
    c.perf_shapes = {btc(256, 256, 384), btc(32, 4096, 512)};
  }
  c.make = [k](const Dims& d, Precision, Gen& g, HostSet& hs) { inputs(d, g, hs, k, false); };
  c.run = [k](OpRun& r) { forward(r, k); };
  // xhat is not rounded to the storage type (the separate ops round it once): the same
  // tolerance as layernorm_noaffine_fwd; the statistics are f32 in every precision
  c.checks = {{"out", tol(1e-5)}, {"rstd", {1e-5, 1e-5, 1e-5}}};
  if (k == NormKind::layer) c.checks.push_back({"mean", {1e-5, 1e-5, 1e-5}});
  // bytes: inp read, out written (the [B,C] rows and the statistics are noise)
  c.work = [](const Dims& d, size_t a) { return Work{0, 2.0 * static_cast<double>(d.B * d.T * d.C) * a}; };
  c.name = name + "fwd_" + norm;
  t.push_back(c);

  c.name = name + "bwd_" + norm;
  c.make = [k](const Dims& d, Precision, Gen& g, HostSet& hs) { inputs(d, g, hs, k, true); };
  c.run = [k](OpRun& r) {
    forward(r, k);
    backward(r, k);
  };
  c.timed = [k](OpRun& r) { backward(r, k); };
  c.checks = {{"dx", tol(1e-5)}, {"dshift", tol(1e-5)}, {"dscale", tol(1e-5)}};
  c.grad.forward = [k](OpRun& r) { forward(r, k); };
  c.grad.fwd_out = "out";
  c.grad.cotangent = "dout";
  c.grad.wrt = {{"x", "dx"}, {"shift", "dshift"}, {"scale", "dscale"}};
  // bytes: dout and inp read, dinp read and written
  c.work = [](const Dims& d, size_t a) { return Work{0, 4.0 * static_cast<double>(d.B * d.T * d.C) * a}; };
  t.push_back(c);

  // dinp written, not added to (the first writer of a residual stream's gradient)
  c.name = name + "bwd_" + norm + "_overwrite";
  c.make = [k](const Dims& d, Precision, Gen& g, HostSet& hs) { inputs(d, g, hs, k, true, true); };
  c.run = [k](OpRun& r) {
    forward(r, k);
    backward(r, k, true);
  };
  c.timed = [k](OpRun& r) { backward(r, k, true); };
  c.work = [](const Dims& d, size_t a) { return Work{0, 3.0 * static_cast<double>(d.B * d.T * d.C) * a}; };
  t.push_back(c);
}

// ---- the block's middle: the gated residual straight into norm + modulate ----
// (Backend::gated_residual_norm_modulate_forward and norm_modulate_gated_residual_backward).
// Windowed shapes put y in window order (the attention projection's output in CDEIT) and out
// in token order (the MLP's input), or (winout) y in token order and out in window order (a
// block's closing gated residual into the next block's attention input). Grad mode checks the backward against the fused forward's
// derivatives w.r.t. res, y, gate, shift and scale; dbias (the columns of dy) in test mode.
void residual_inputs(const Dims& d, Gen& g, HostSet& hs, NormKind k, bool backward) {
  const int64_t B = d.B, T = d.T, C = d.C, N = B * T;
  hs.in("res", {B, T, C}, rows_with_distinct_means(g, N, C));
  hs.in("y", {B, T, C}, g.randn(N * C));
  hs.in("gate", {B, C}, g.randn(B * C, 0.5f));
  hs.in("shift", {B, C}, g.randn(B * C));
  hs.in("scale", {B, C}, g.randn(B * C, 0.5f));
  hs.out("r", {B, T, C});
  hs.out("out", {B, T, C});
  if (k == NormKind::layer) hs.out("mean", {N}, Store::f32);
  hs.out("rstd", {N}, Store::f32);
  if (!backward) return;
  hs.in("dout", {B, T, C}, g.randn(N * C));
  hs.out("dr", {B, T, C});  // zeroed by the run: the residual stream's gradient through out only
  for (const char* name : {"dshift", "dscale", "dgate"}) hs.out(name, {B, C});
  hs.out("dy", {B, T, C});
  hs.inout("dbias", {C}, g.randn(C));  // y's product's bias gradient: accumulates the columns of dy
}

// Which side a windowed case puts in window order.
enum class ResidualLayout { y_windows, out_windows };
NormModulateOptions out_options(const OpRun& r, NormKind k, ResidualLayout l) {
  NormModulateOptions o;
  o.norm = k;
  if (l == ResidualLayout::out_windows) o.out_order = r.d.window_order();
  return o;
}
WindowOrder y_order(const OpRun& r, ResidualLayout l) {
  return l == ResidualLayout::y_windows ? r.d.window_order() : WindowOrder{};
}
void residual_forward(OpRun& r, NormKind k, ResidualLayout l) {
  r.be.gated_residual_norm_modulate_forward(r.t("r"), r.t("out"), mean_of(r, k), r.t("rstd"), r.t("res"), r.t("y"),
                                            r.t("gate"), y_order(r, l), r.t("shift"), r.t("scale"),
                                            out_options(r, k, l));
}
void residual_backward(OpRun& r, NormKind k, ResidualLayout l) {
  r.be.zero(r.t("dr"));
  ResidualNormGrads g;
  g.dr = r.t("dr"), g.dshift = r.t("dshift"), g.dscale = r.t("dscale"), g.dout = r.t("dout"), g.r = r.t("r");
  g.mean = mean_of(r, k), g.rstd = r.t("rstd"), g.scale = r.t("scale"), g.o = out_options(r, k, l);
  g.dy = r.t("dy"), g.dgate = r.t("dgate"), g.y = r.t("y"), g.gate = r.t("gate"), g.y_order = y_order(r, l);
  g.dbias_y = r.t("dbias"), g.gw = GradWrite::add;
  r.be.norm_modulate_gated_residual_backward(g);
}

void add_residual_kind(std::vector<OpCase>& t, NormKind k, bool windowed, uint32_t seed,
                       ResidualLayout l = ResidualLayout::y_windows) {
  const std::string name = std::string("residual_norm_modulate_") +
                           (!windowed ? "" : l == ResidualLayout::y_windows ? "win_" : "winout_");
  const std::string norm = k == NormKind::layer ? "layer" : "rms";
  OpCase c;
  c.seed = seed;
  if (windowed) {
    c.shapes = {grid(2, 8, 8, 64, 4, 0), grid(2, 8, 8, 64, 4, 2), grid(3, 8, 8, 37, 4, 2), grid(2, 32, 32, 64, 16, 8)};
    c.grad_shapes = {grid(2, 4, 4, 5, 2, 1), grid(1, 4, 4, 8, 2, 0)};
    c.perf_shapes = {grid(32, 64, 64, 512, 16, 0)};  // CDEIT's first stage at batch 32
  } else {
    // C = 37: no register kernel (the two ops run); C = 2048: more packs than the kernel holds
    c.shapes = {btc(2, 37, 64), btc(3, 9, 37), btc(4, 256, 384), btc(1, 200, 1152), btc(2, 30, 2048)};
    c.grad_shapes = {btc(2, 3, 5), btc(1, 4, 8)};
    c.perf_shapes = {btc(256, 256, 384), btc(64, 256, 768)};  // DiT-S at 256, DiT-B at 64
  }
  c.make = [k](const Dims& d, Precision, Gen& g, HostSet& hs) { residual_inputs(d, g, hs, k, false); };
  c.run = [k, l](OpRun& r) { residual_forward(r, k, l); };
  // the statistics are those of r as stored: rounded to bf16/fp16 on the device, fp32 in the
  // reference, so they differ by that rounding (measured 1e-4 to 7e-4 relative in bf16)
  c.checks = {{"r", tol(1e-6)}, {"out", tol(1e-5)}, {"rstd", tol(1e-5)}};
  if (k == NormKind::layer) c.checks.push_back({"mean", tol(1e-5)});
  // bytes: res and y read, r and out written
  c.work = [](const Dims& d, size_t a) { return Work{0, 4.0 * static_cast<double>(d.B * d.T * d.C) * a}; };
  c.name = name + "fwd_" + norm;
  t.push_back(c);

  c.name = name + "bwd_" + norm;
  c.make = [k](const Dims& d, Precision, Gen& g, HostSet& hs) { residual_inputs(d, g, hs, k, true); };
  c.run = [k, l](OpRun& r) {
    residual_forward(r, k, l);
    residual_backward(r, k, l);
  };
  c.timed = [k, l](OpRun& r) { residual_backward(r, k, l); };
  c.checks = {{"dr", tol(1e-5)}, {"dshift", tol(1e-5)}, {"dscale", tol(1e-5)}, {"dy", tol(1e-5)},
              {"dgate", tol(1e-5)}, {"dbias", tol(1e-5)}};
  c.grad.forward = [k, l](OpRun& r) { residual_forward(r, k, l); };
  c.grad.fwd_out = "out";
  c.grad.cotangent = "dout";
  c.grad.wrt = {{"res", "dr"}, {"y", "dy"}, {"gate", "dgate"}, {"shift", "dshift"}, {"scale", "dscale"}};
  // bytes: dout, r and dr read, dr written, y read, dy written (the fused pass; the two ops also re-read dr)
  c.work = [](const Dims& d, size_t a) { return Work{0, 6.0 * static_cast<double>(d.B * d.T * d.C) * a}; };
  t.push_back(c);
}

}  // namespace

void add_norm_modulate_ops(std::vector<OpCase>& t) {
  add_kind(t, NormKind::layer, false, 51);
  add_kind(t, NormKind::rms, false, 52);
  add_kind(t, NormKind::layer, true, 53);
  add_kind(t, NormKind::rms, true, 54);
  add_residual_kind(t, NormKind::layer, false, 55);
  add_residual_kind(t, NormKind::rms, false, 56);
  add_residual_kind(t, NormKind::layer, true, 57);
  add_residual_kind(t, NormKind::rms, true, 58);
  add_residual_kind(t, NormKind::rms, true, 59, ResidualLayout::out_windows);  // CDEIT's block ends
}

}  // namespace ft::ops
