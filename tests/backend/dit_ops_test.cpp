// Element-wise ops a DiT needs (SiLU, adaLN modulation, gated residual) on the CPU reference:
// what the op table (tests/ops/ops_dit.cpp) cannot check, because on the CPU it compares the
// reference with itself: hand-computed forward values, the in-place calls backend.h allows
// (bitwise equal to the out-of-place ones), the one it forbids, and shape checks. The table
// has their finite-difference gradients (OpTable.{silu,modulate,gated_residual}_bwd_grad,
// which also check that every gradient is overwritten and that the residual's gradient is
// dout) and the GPU comparisons.
#include "core/error.h"
#include "op_test_util.h"

namespace ft::test {
namespace {

TEST(Silu, ValuesAndInPlace) {
  Harness h;
  std::vector<float> x = {0.0f, 1.0f, -2.0f, 3.5f}, out(4);
  h->silu_forward(tf(out, {4}), tf(x, {4}));
  for (size_t i = 0; i < x.size(); ++i)
    EXPECT_NEAR(out[i], x[i] / (1.0 + std::exp(-x[i])), 1e-6);
  // in place: out == inp
  std::vector<float> x2 = x;
  h->silu_forward(tf(x2, {4}), tf(x2, {4}));
  EXPECT_TRUE(bit_equal(x2, out));
  // in place: dinp == dout
  std::vector<float> xs = randn(37, 81, 2.0f), g = randn(37, 82), dx(37);
  h->silu_backward(tf(dx, {37}), tf(xs, {37}), tf(g, {37}));
  std::vector<float> d2 = g;
  h->silu_backward(tf(d2, {37}), tf(xs, {37}), tf(d2, {37}));
  EXPECT_TRUE(bit_equal(dx, d2));
  // the backward that recomputes the output: bitwise the two ops, out of place and aliased as
  // CDEIT calls it (dinp == dout, out == inp)
  std::vector<float> dx3(37), out3(37), fwd(37);
  h->silu_backward_recompute(tf(dx3, {37}), tf(out3, {37}), tf(xs, {37}), tf(g, {37}));
  h->silu_forward(tf(fwd, {37}), tf(xs, {37}));
  EXPECT_TRUE(bit_equal(dx3, dx));
  EXPECT_TRUE(bit_equal(out3, fwd));
  std::vector<float> xa = xs, da = g;
  h->silu_backward_recompute(tf(da, {37}), tf(xa, {37}), tf(xa, {37}), tf(da, {37}));
  EXPECT_TRUE(bit_equal(da, dx));
  EXPECT_TRUE(bit_equal(xa, fwd));
}

// The fused bias gradients: the column sums of the element-wise gradient, added or written
// (GradWrite), as matmul_backward's own reduction over that gradient gives them.
TEST(FusedBiasGradient, IsTheColumnSumOfTheGradient) {
  Harness h;
  const int64_t B = 2, T = 6, C = 5, N = B * T;
  std::vector<float> x = randn(N * C, 301, 2.0f), g = randn(N * C, 302), w = randn(C * C, 303);
  std::vector<float> dx(N * C), out(N * C), db0 = randn(C, 304), db = db0;
  h->silu_backward_recompute(tf(dx, {N, C}), tf(out, {N, C}), tf(x, {N, C}), tf(g, {N, C}), tf(db, {C}),
                             GradWrite::add);
  // matmul_backward's bias reduction over the same gradient
  std::vector<float> dw(C * C), want = db0;
  h->matmul_backward(Tensor(), tf(dw, {C, C}), tf(want, {C}), tf(dx, {N, C}), tf(x, {N, C}), tf(w, {C, C}),
                     GradWrite::add);
  EXPECT_TRUE(bit_equal(db, want));
  h->silu_backward_recompute(tf(dx, {N, C}), tf(out, {N, C}), tf(x, {N, C}), tf(g, {N, C}), tf(db, {C}),
                             GradWrite::overwrite);
  for (int64_t c = 0; c < C; ++c) EXPECT_NEAR(db[c], want[c] - db0[c], 1e-5);
  // the gated residual's, in window order: dy's columns whatever its row order
  const int64_t GH = 2, GW = 3;
  std::vector<float> y = randn(N * C, 305), gate = randn(B * C, 306), dy(N * C), dgate(B * C), dbg(C, 7.0f);
  h->gated_residual_backward(tf(dy, {B, T, C}), tf(dgate, {B, C}), tf(g, {B, T, C}), tf(y, {B, T, C}),
                             tf(gate, {B, C}), WindowOrder{int(GH), int(GW), 1, 0}, tf(dbg, {C}), GradWrite::overwrite);
  for (int64_t c = 0; c < C; ++c) {
    double s = 0;
    for (int64_t r = 0; r < N; ++r) s += dy[r * C + c];
    EXPECT_NEAR(dbg[c], s, 1e-5);
  }
  std::vector<float> bad(C + 1);
  EXPECT_THROW(h->silu_backward_recompute(tf(dx, {N, C}), tf(out, {N, C}), tf(x, {N, C}), tf(g, {N, C}),
                                          tf(bad, {C + 1})),
               InternalError);
}

// out empty (a model that kept silu(inp) from its forward): dinp and dbias are bitwise the
// call's with out, with and without dbias, added or overwritten; dinp (NaN before) is wholly
// written and nothing else is: inp, which CDEIT's call with out overwrites (out == inp), keeps
// its bits, in place (dinp == dout) as out of place.
TEST(Silu, RecomputeWithoutOutIsTheSameGradient) {
  Harness h;
  const int64_t N = 7, C = 37;  // 37: no whole packs, like the element path
  const std::vector<float> x = randn(N * C, 401, 3.0f), g = randn(N * C, 402), db0 = randn(C, 403);
  auto nc = [&](std::vector<float>& v) { return tf(v, {N, C}); };
  struct Bias {
    bool on;
    GradWrite gw;
  };
  for (const Bias b : {Bias{false, GradWrite::add}, Bias{true, GradWrite::add}, Bias{true, GradWrite::overwrite}}) {
    SCOPED_TRACE(!b.on ? "no dbias" : b.gw == GradWrite::add ? "dbias add" : "dbias overwrite");
    std::vector<float> xi = x, gi = g, dx_want(N * C), out(N * C), db_want = db0;
    h->silu_backward_recompute(nc(dx_want), nc(out), nc(xi), nc(gi), b.on ? tf(db_want, {C}) : Tensor(), b.gw);
    std::vector<float> dx(N * C, std::nanf("")), db = db0;
    h->silu_backward_recompute(nc(dx), Tensor(), nc(xi), nc(gi), b.on ? tf(db, {C}) : Tensor(), b.gw);
    EXPECT_TRUE(bit_equal(dx, dx_want));
    EXPECT_TRUE(bit_equal(db, db_want));
    EXPECT_TRUE(bit_equal(xi, x));
    EXPECT_TRUE(bit_equal(gi, g));
    // as CDEIT will call it for a block that kept silu(inp): dinp over dout
    std::vector<float> da = g, da_db = db0;
    h->silu_backward_recompute(nc(da), Tensor(), nc(xi), nc(da), b.on ? tf(da_db, {C}) : Tensor(), b.gw);
    EXPECT_TRUE(bit_equal(da, dx_want));
    EXPECT_TRUE(bit_equal(da_db, db_want));
    EXPECT_TRUE(bit_equal(xi, x));
  }
  // a given out is still checked
  std::vector<float> xi = x, gi = g, dx(N * C), bad(N * C - 1);
  EXPECT_THROW(h->silu_backward_recompute(nc(dx), tf(bad, {N * C - 1}), nc(xi), nc(gi)), InternalError);
}

struct DitCase {
  int64_t B = 2, T = 3, C = 5;
  std::vector<float> x = randn(B * T * C, 91), y = randn(B * T * C, 92), res = randn(B * T * C, 93),
                     shift = randn(B * C, 94), scale = randn(B * C, 95, 0.5f),
                     gate = randn(B * C, 96), g = randn(B * T * C, 97);
  std::vector<float> out = std::vector<float>(B * T * C);
  Tensor full(std::vector<float>& v) { return tf(v, {B, T, C}); }
  Tensor row(std::vector<float>& v) { return tf(v, {B, C}); }
};

TEST(Modulate, ForwardValues) {
  Harness h;
  DitCase k;
  h->modulate_forward(k.full(k.out), k.full(k.x), k.row(k.shift), k.row(k.scale));
  for (int64_t b = 0; b < k.B; ++b)
    for (int64_t t = 0; t < k.T; ++t)
      for (int64_t c = 0; c < k.C; ++c) {
        const int64_t i = (b * k.T + t) * k.C + c;
        EXPECT_FLOAT_EQ(k.out[i], k.x[i] * (1 + k.scale[b * k.C + c]) + k.shift[b * k.C + c]);
      }
  // in place: out == x
  std::vector<float> x2 = k.x;
  h->modulate_forward(k.full(x2), k.full(x2), k.row(k.shift), k.row(k.scale));
  EXPECT_TRUE(bit_equal(x2, k.out));
}

// dx may alias dout: the same bits as out of place, for all three outputs
TEST(Modulate, BackwardInPlace) {
  Harness h;
  DitCase k;
  std::vector<float> dx(k.x.size()), dshift(k.shift.size()), dscale(k.scale.size());
  h->modulate_backward(k.full(dx), k.row(dshift), k.row(dscale), k.full(k.g), k.full(k.x),
                       k.row(k.scale));
  std::vector<float> d2 = k.g, s2(k.shift.size()), c2(k.scale.size());
  h->modulate_backward(k.full(d2), k.row(s2), k.row(c2), k.full(d2), k.full(k.x), k.row(k.scale));
  EXPECT_TRUE(bit_equal(dx, d2));
  EXPECT_TRUE(bit_equal(dshift, s2));
  EXPECT_TRUE(bit_equal(dscale, c2));
}

TEST(GatedResidual, ForwardValuesAndAliasing) {
  Harness h;
  DitCase k;
  h->gated_residual_forward(k.full(k.out), k.full(k.res), k.full(k.y), k.row(k.gate));
  for (int64_t b = 0; b < k.B; ++b)
    for (int64_t t = 0; t < k.T; ++t)
      for (int64_t c = 0; c < k.C; ++c) {
        const int64_t i = (b * k.T + t) * k.C + c;
        EXPECT_FLOAT_EQ(k.out[i], k.res[i] + k.gate[b * k.C + c] * k.y[i]);
      }
  // in place: out == res (the residual stream updated where it lies)
  std::vector<float> r2 = k.res;
  h->gated_residual_forward(k.full(r2), k.full(r2), k.full(k.y), k.row(k.gate));
  EXPECT_TRUE(bit_equal(r2, k.out));
  // dy may alias y, not dout
  std::vector<float> dy(k.y.size()), dgate(k.gate.size());
  h->gated_residual_backward(k.full(dy), k.row(dgate), k.full(k.g), k.full(k.y), k.row(k.gate));
  std::vector<float> y2 = k.y, dg2(k.gate.size());
  h->gated_residual_backward(k.full(y2), k.row(dg2), k.full(k.g), k.full(y2), k.row(k.gate));
  EXPECT_TRUE(bit_equal(y2, dy));
  EXPECT_TRUE(bit_equal(dg2, dgate));
  std::vector<float> g2 = k.g;
  EXPECT_THROW(h->gated_residual_backward(k.full(g2), k.row(dg2), k.full(g2), k.full(k.y),
                                          k.row(k.gate)),
               InternalError);
}

// y in window order (CDEIT's attention projection): the forward is window_reverse then the
// token-order op, the backward the token-order op then window_partition of dy, bitwise; dy
// may alias y there too; a bad window geometry is refused.
TEST(GatedResidual, WindowOrderIsTheCopiesItReplaces) {
  Harness h;
  const int64_t B = 2, GH = 4, GW = 6, T = GH * GW, C = 5, N = B * T;
  for (const auto [w, s] : {std::pair{2, 0}, std::pair{2, 1}}) {
    const WindowOrder yo{int(GH), int(GW), w, s};
    std::vector<float> res = randn(N * C, 201), yw = randn(N * C, 202), gate = randn(B * C, 203),
                       g = randn(N * C, 204);
    auto btc = [&](std::vector<float>& v) { return tf(v, {B, T, C}); };
    auto wins = [&](std::vector<float>& v) { return tf(v, {N / (w * w), int64_t{w} * w, C}); };
    std::vector<float> ytok(N * C), want(N * C), got(N * C);
    h->window_reverse(btc(ytok), wins(yw), int(GH), int(GW), w, s);
    h->gated_residual_forward(btc(want), btc(res), btc(ytok), tf(gate, {B, C}));
    h->gated_residual_forward(btc(got), btc(res), btc(yw), tf(gate, {B, C}), yo);
    EXPECT_TRUE(bit_equal(got, want)) << "shift " << s;
    std::vector<float> dytok(N * C), dgw(B * C), dyw_want(N * C), dyw(N * C), dg(B * C);
    h->gated_residual_backward(btc(dytok), tf(dgw, {B, C}), btc(g), btc(ytok), tf(gate, {B, C}));
    h->window_partition(wins(dyw_want), btc(dytok), int(GH), int(GW), w, s);
    h->gated_residual_backward(btc(dyw), tf(dg, {B, C}), btc(g), btc(yw), tf(gate, {B, C}), yo);
    EXPECT_TRUE(bit_equal(dyw, dyw_want)) << "shift " << s;
    EXPECT_TRUE(bit_equal(dg, dgw)) << "shift " << s;
    std::vector<float> y2 = yw, dg2(B * C);
    h->gated_residual_backward(btc(y2), tf(dg2, {B, C}), btc(g), btc(y2), tf(gate, {B, C}), yo);
    EXPECT_TRUE(bit_equal(y2, dyw_want));
  }
  std::vector<float> a = randn(N * C, 1), y = randn(N * C, 2), gt = randn(B * C, 3);
  EXPECT_THROW(h->gated_residual_forward(tf(a, {B, T, C}), tf(a, {B, T, C}), tf(y, {B, T, C}), tf(gt, {B, C}),
                                         WindowOrder{int(GH), int(GW), 4, 0}),  // 4 does not divide 6
               InternalError);
  EXPECT_THROW(h->gated_residual_forward(tf(y, {B, T, C}), tf(a, {B, T, C}), tf(y, {B, T, C}), tf(gt, {B, C}),
                                         WindowOrder{int(GH), int(GW), 2, 0}),  // out aliases y
               InternalError);
}

TEST(DitOps, RejectShapeMismatches) {
  Harness h;
  DitCase k;
  std::vector<float> short_row(k.C);
  EXPECT_THROW(h->modulate_forward(k.full(k.out), k.full(k.x), tf(short_row, {1, k.C}),
                                   k.row(k.scale)),
               InternalError);
  EXPECT_THROW(h->gated_residual_forward(k.full(k.out), k.full(k.res), tf(k.y, {k.B * k.T * k.C}),
                                         k.row(k.gate)),
               InternalError);
}

}  // namespace
}  // namespace ft::test
