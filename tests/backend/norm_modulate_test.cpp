// The fused adaLN input (Backend::norm_modulate_forward/backward) on the CPU reference against
// the separate ops it replaces: layernorm_forward (no affine) or rmsnorm_forward, then
// modulate_forward, then window_partition (windowed); and the backward against
// window_reverse of dout, modulate_backward, then layernorm_backward / rmsnorm_backward.
// Also: dinp accumulates, dshift/dscale overwrite, repeated runs are bitwise equal, and bad
// shapes and dtypes are refused naming the op. The op table (tests/ops/ops_norm_modulate.cpp)
// has the finite-difference gradients and the GPU comparisons.
#include <algorithm>
#include <cmath>
#include <string>

#include "backend/norm_modulate_shapes.h"
#include "core/error.h"
#include "op_test_util.h"

namespace ft::test {
namespace {

template <class F> void expect_refused(F&& f, const std::string& words) {
  try {
    f();
    ADD_FAILURE() << "accepted; expected an error naming: " << words;
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::fabs(double(a[i]) - b[i]));
  return m;
}
double max_abs(const std::vector<float>& a) {
  double m = 0;
  for (float x : a) m = std::max(m, std::fabs(double(x)));
  return m;
}

// One shape: B samples of an H x W grid of C features; window 0: no windows.
struct Case {
  int64_t B, H, W, C;
  int window, shift;
  NormKind norm;
  int64_t T() const { return H * W; }
  NormModulateOptions opts() const {
    NormModulateOptions o;
    o.norm = norm;
    if (window > 0) o.out_order = {int(H), int(W), window, shift};
    return o;
  }
};

struct Data {
  std::vector<float> x, shift, scale, dout, dinp0;
};
Data make(const Case& k, uint32_t seed) {
  const size_t n = size_t(k.B * k.T() * k.C), bc = static_cast<size_t>(k.B * k.C);
  Data d{randn(n, seed, 2.f), randn(bc, seed + 1), randn(bc, seed + 2, 0.5f), randn(n, seed + 3), randn(n, seed + 4)};
  for (size_t i = 0; i < n; ++i) d.x[i] += 0.3f * float((i / static_cast<size_t>(k.C)) % 5);  // row means differ
  return d;
}

const Case kCases[] = {
    {2, 5, 3, 16, 0, 0, NormKind::layer}, {2, 5, 3, 16, 0, 0, NormKind::rms},  // no windows
    {3, 1, 7, 37, 0, 0, NormKind::layer}, {3, 1, 7, 37, 0, 0, NormKind::rms},  // C off any pack
    {2, 8, 8, 12, 4, 0, NormKind::layer}, {2, 8, 8, 12, 4, 2, NormKind::layer},
    {2, 8, 8, 12, 4, 0, NormKind::rms},   {2, 8, 8, 12, 4, 2, NormKind::rms},
    {1, 6, 4, 5, 2, 1, NormKind::layer},  {1, 6, 4, 5, 2, 1, NormKind::rms},   // non-square grid
};

std::string name(const Case& k) {
  return std::string(k.norm == NormKind::rms ? "rms" : "layer") + " B" + std::to_string(k.B) + " " +
         std::to_string(k.H) + "x" + std::to_string(k.W) + " C" + std::to_string(k.C) + " w" +
         std::to_string(k.window) + " s" + std::to_string(k.shift);
}

TEST(NormModulate, ForwardEqualsSeparateOps) {
  Harness h;
  for (const Case& k : kCases) {
    SCOPED_TRACE(name(k));
    const int64_t B = k.B, T = k.T(), C = k.C, N = B * T;
    Data d = make(k, 7);
    const bool rms = k.norm == NormKind::rms;
    // separate ops
    std::vector<float> xn(static_cast<size_t>(N * C)), mean(static_cast<size_t>(N)), rstd(static_cast<size_t>(N)), mod(static_cast<size_t>(N * C)), want(static_cast<size_t>(N * C));
    if (rms) h->rmsnorm_forward(tf(xn, {N, C}), tf(rstd, {N}), tf(d.x, {N, C}));
    else h->layernorm_forward(tf(xn, {N, C}), tf(mean, {N}), tf(rstd, {N}), tf(d.x, {N, C}), Tensor(), Tensor());
    h->modulate_forward(tf(mod, {B, T, C}), tf(xn, {B, T, C}), tf(d.shift, {B, C}), tf(d.scale, {B, C}));
    const int64_t ww = k.window * k.window;
    if (k.window > 0) h->window_partition(tf(want, {N / ww, ww, C}), tf(mod, {B, T, C}), int(k.H), int(k.W), k.window, k.shift);
    else want = mod;
    // fused
    std::vector<float> out(static_cast<size_t>(N * C), NAN), fmean(static_cast<size_t>(N), NAN), frstd(static_cast<size_t>(N), NAN);
    h->norm_modulate_forward(tf(out, {B, T, C}), rms ? Tensor() : tf(fmean, {N}), tf(frstd, {N}), tf(d.x, {B, T, C}),
                             tf(d.shift, {B, C}), tf(d.scale, {B, C}), k.opts());
    EXPECT_LE(max_abs_diff(out, want), 1e-6 * std::max(1.0, max_abs(want)));
    EXPECT_TRUE(bit_equal(frstd, rstd));  // the same statistics, bit for bit
    if (!rms) EXPECT_TRUE(bit_equal(fmean, mean));
  }
}

TEST(NormModulate, BackwardEqualsSeparateOps) {
  Harness h;
  for (const Case& k : kCases) {
    SCOPED_TRACE(name(k));
    const int64_t B = k.B, T = k.T(), C = k.C, N = B * T;
    Data d = make(k, 11);
    const bool rms = k.norm == NormKind::rms;
    std::vector<float> out(static_cast<size_t>(N * C)), mean(static_cast<size_t>(N)), rstd(static_cast<size_t>(N));
    h->norm_modulate_forward(tf(out, {B, T, C}), rms ? Tensor() : tf(mean, {N}), tf(rstd, {N}), tf(d.x, {B, T, C}),
                             tf(d.shift, {B, C}), tf(d.scale, {B, C}), k.opts());
    // separate ops: dout back to grid order, modulate's backward (x = the normalized tensor),
    // then the norm's backward adding into dinp
    std::vector<float> dgrid(static_cast<size_t>(N * C)), xn(static_cast<size_t>(N * C)), m2(static_cast<size_t>(N)), r2(static_cast<size_t>(N));
    const int64_t ww = k.window * k.window;
    if (k.window > 0) h->window_reverse(tf(dgrid, {B, T, C}), tf(d.dout, {N / ww, ww, C}), int(k.H), int(k.W), k.window, k.shift);
    else dgrid = d.dout;
    if (rms) h->rmsnorm_forward(tf(xn, {N, C}), tf(r2, {N}), tf(d.x, {N, C}));
    else h->layernorm_forward(tf(xn, {N, C}), tf(m2, {N}), tf(r2, {N}), tf(d.x, {N, C}), Tensor(), Tensor());
    std::vector<float> dxn(static_cast<size_t>(N * C)), dshift_w(static_cast<size_t>(B * C)), dscale_w(static_cast<size_t>(B * C)), dinp_w = d.dinp0;
    h->modulate_backward(tf(dxn, {B, T, C}), tf(dshift_w, {B, C}), tf(dscale_w, {B, C}), tf(dgrid, {B, T, C}),
                         tf(xn, {B, T, C}), tf(d.scale, {B, C}));
    if (rms) h->rmsnorm_backward(tf(dinp_w, {N, C}), tf(dxn, {N, C}), tf(d.x, {N, C}), tf(r2, {N}));
    else h->layernorm_backward(tf(dinp_w, {N, C}), Tensor(), Tensor(), tf(dxn, {N, C}), tf(d.x, {N, C}), Tensor(),
                               tf(m2, {N}), tf(r2, {N}));
    // fused: dinp starts from the same values (it accumulates), dshift/dscale from NaN (overwritten)
    std::vector<float> dinp = d.dinp0, dshift(static_cast<size_t>(B * C), NAN), dscale(static_cast<size_t>(B * C), NAN);
    auto run = [&] {
      h->norm_modulate_backward(tf(dinp, {B, T, C}), tf(dshift, {B, C}), tf(dscale, {B, C}), tf(d.dout, {B, T, C}),
                                tf(d.x, {B, T, C}), rms ? Tensor() : tf(mean, {N}), tf(rstd, {N}),
                                tf(d.scale, {B, C}), k.opts());
    };
    run();
    EXPECT_LE(max_abs_diff(dinp, dinp_w), 1e-5 * std::max(1.0, max_abs(dinp_w)));
    EXPECT_LE(max_abs_diff(dshift, dshift_w), 1e-5 * std::max(1.0, max_abs(dshift_w)));
    EXPECT_LE(max_abs_diff(dscale, dscale_w), 1e-5 * std::max(1.0, max_abs(dscale_w)));
    // dinp accumulates: a second call adds the same gradient again; the sums repeat bitwise
    const std::vector<float> dinp1 = dinp, dshift1 = dshift, dscale1 = dscale;
    run();
    std::vector<float> twice(dinp1.size());
    for (size_t i = 0; i < twice.size(); ++i) twice[i] = 2.f * dinp1[i] - d.dinp0[i];
    EXPECT_LE(max_abs_diff(dinp, twice), 1e-5 * std::max(1.0, max_abs(twice)));
    EXPECT_TRUE(bit_equal(dshift, dshift1));
    EXPECT_TRUE(bit_equal(dscale, dscale1));
  }
}

TEST(NormModulate, OpShapeAndEpsilons) {
  const OpShape s = OpShape::norm_modulate(32, 4096, 512);
  EXPECT_EQ(s.kind, OpShape::Kind::norm_modulate);
  EXPECT_EQ(s.rows, 32 * 4096);
  EXPECT_EQ(s.cols, 512);
  EXPECT_EQ(s.batch, 32);
  EXPECT_EQ(s.seq, 4096);
  EXPECT_EQ(normmod::eps_of(NormKind::layer), kLayerNormEps);
  EXPECT_EQ(normmod::eps_of(NormKind::rms), diffusion::kRmsNormEps);
}

TEST(NormModulate, RefusesBadArguments) {
  Harness h;
  const int64_t B = 2, H = 4, W = 4, T = H * W, C = 8, N = B * T;
  std::vector<float> x(static_cast<size_t>(N * C), 1.f), out(static_cast<size_t>(N * C)), mean(static_cast<size_t>(N)), rstd(static_cast<size_t>(N)), sh(static_cast<size_t>(B * C)),
      sc(static_cast<size_t>(B * C)), dx(static_cast<size_t>(N * C)), dout(static_cast<size_t>(N * C)), dsh(static_cast<size_t>(B * C)), dsc(static_cast<size_t>(B * C)),
      small(static_cast<size_t>(B * C - 1)), other(static_cast<size_t>(N * C));
  std::vector<int32_t> xi(static_cast<size_t>(N * C));
  NormModulateOptions lay, rms, win;
  rms.norm = NormKind::rms;
  win.out_order = {int(H), int(W), 2, 1};
  Backend& be = *h.be;
  auto fwd = [&](Tensor o, Tensor m, Tensor r, Tensor i, Tensor s1, Tensor s2, const NormModulateOptions& opt) {
    be.norm_modulate_forward(o, m, r, i, s1, s2, opt);
  };
  const std::string F = "norm_modulate_forward", Bw = "norm_modulate_backward";
  // a good call for reference
  fwd(tf(out, {B, T, C}), tf(mean, {N}), tf(rstd, {N}), tf(x, {B, T, C}), tf(sh, {B, C}), tf(sc, {B, C}), lay);
  expect_refused([&] { fwd(tf(out, {B, T, C}), tf(mean, {N}), tf(rstd, {N}), tf(x, {N, C}), tf(sh, {B, C}), tf(sc, {B, C}), lay); },
                 F + ": inp");
  expect_refused([&] { fwd(tf(out, {B, T, C}), tf(mean, {N}), tf(rstd, {N}), tf(x, {B, T, C}), tf(small, {B * C - 1}), tf(sc, {B, C}), lay); },
                 F + ": shift");
  expect_refused([&] { fwd(tf(out, {B, T, C}), tf(mean, {N}), tf(rstd, {N}), tf(x, {B, T, C}), tf(sh, {B, C}), tf(sc, {B, C}), rms); },
                 F + ": mean");  // RMSNorm has no mean
  expect_refused([&] { fwd(tf(out, {B, T, C}), Tensor(), tf(rstd, {N}), tf(x, {B, T, C}), tf(sh, {B, C}), tf(sc, {B, C}), lay); },
                 F + ": mean");
  expect_refused([&] { fwd(tf(out, {B, T, C}), tf(mean, {N}), tf(small, {B * C - 1}), tf(x, {B, T, C}), tf(sh, {B, C}), tf(sc, {B, C}), lay); },
                 F + ": rstd");
  expect_refused([&] { fwd(tf(x, {B, T, C}), tf(mean, {N}), tf(rstd, {N}), tf(x, {B, T, C}), tf(sh, {B, C}), tf(sc, {B, C}), lay); },
                 "must not alias inp");
  expect_refused([&] { fwd(tf(out, {B, T * 2, C / 2}), tf(mean, {N}), tf(rstd, {N}), tf(x, {B, T, C}), tf(sh, {B, C}), tf(sc, {B, C}), lay); },
                 F + ": out");
  expect_refused([&] {
    fwd(Tensor(xi.data(), DType::i32, {B, T, C}), tf(mean, {N}), tf(rstd, {N}), tf(x, {B, T, C}), tf(sh, {B, C}), tf(sc, {B, C}), lay);
  }, F + ": out must be f32");
  // windows: the geometry is window_partition's
  fwd(tf(out, {B * 4, 4, C}), tf(mean, {N}), tf(rstd, {N}), tf(x, {B, T, C}), tf(sh, {B, C}), tf(sc, {B, C}), win);
  NormModulateOptions bad = win;
  bad.out_order.window = 3;
  expect_refused([&] { fwd(tf(out, {B, T, C}), tf(mean, {N}), tf(rstd, {N}), tf(x, {B, T, C}), tf(sh, {B, C}), tf(sc, {B, C}), bad); },
                 F + ": bad window geometry");
  bad = win, bad.out_order.shift = 2;
  expect_refused([&] { fwd(tf(out, {B, T, C}), tf(mean, {N}), tf(rstd, {N}), tf(x, {B, T, C}), tf(sh, {B, C}), tf(sc, {B, C}), bad); },
                 "shift");
  bad = win, bad.out_order.grid_h = 2;
  expect_refused([&] { fwd(tf(out, {B, T, C}), tf(mean, {N}), tf(rstd, {N}), tf(x, {B, T, C}), tf(sh, {B, C}), tf(sc, {B, C}), bad); },
                 F + ": bad window geometry");
  bad = lay, bad.out_order.window = -1;
  expect_refused([&] { fwd(tf(out, {B, T, C}), tf(mean, {N}), tf(rstd, {N}), tf(x, {B, T, C}), tf(sh, {B, C}), tf(sc, {B, C}), bad); },
                 F + ": window");
  // backward
  auto bwd = [&](Tensor di, Tensor d1, Tensor d2, Tensor dy, const NormModulateOptions& opt) {
    be.norm_modulate_backward(di, d1, d2, dy, tf(x, {B, T, C}), opt.norm == NormKind::rms ? Tensor() : tf(mean, {N}),
                              tf(rstd, {N}), tf(sc, {B, C}), opt);
  };
  bwd(tf(dx, {B, T, C}), tf(dsh, {B, C}), tf(dsc, {B, C}), tf(dout, {B, T, C}), lay);
  expect_refused([&] { bwd(tf(dout, {B, T, C}), tf(dsh, {B, C}), tf(dsc, {B, C}), tf(dout, {B, T, C}), lay); },
                 Bw + ": dinp must not alias dout");
  expect_refused([&] { bwd(tf(dx, {B * T, C}), tf(dsh, {B, C}), tf(dsc, {B, C}), tf(dout, {B, T, C}), lay); },
                 Bw + ": dinp");
  expect_refused([&] { bwd(tf(dx, {B, T, C}), tf(small, {B * C - 1}), tf(dsc, {B, C}), tf(dout, {B, T, C}), lay); },
                 Bw + ": dshift");
  expect_refused([&] { bwd(tf(dx, {B, T, C}), tf(dsh, {B, C}), tf(dsc, {B, C}), tf(other, {B, T * 2, C / 2}), lay); },
                 Bw + ": dout");
  bad = win, bad.out_order.window = 3;
  expect_refused([&] { bwd(tf(dx, {B, T, C}), tf(dsh, {B, C}), tf(dsc, {B, C}), tf(dout, {B, T, C}), bad); },
                 Bw + ": bad window geometry");
}

}  // namespace
}  // namespace ft::test
