// LayerNorm: hand case, gradient by finite differences, dinp/dw/db accumulation, determinism.
#include "backend/cpu/layernorm.h"

#include "op_test_util.h"

namespace ft::test {
namespace {

TEST(LayerNorm, HandComputed) {
  Harness h;
  std::vector<float> x = {1, 2, 3}, w = {1, 1, 1}, b = {0, 0, 0}, out(3), mean(1), rstd(1);
  h->layernorm_forward(tf(out, {1, 3}), tf(mean, {1}), tf(rstd, {1}), tf(x, {1, 3}), tf(w, {3}),
                       tf(b, {3}));
  const double r = 1.0 / std::sqrt(2.0 / 3.0 + 1e-5);
  EXPECT_FLOAT_EQ(mean[0], 2.0f);
  EXPECT_NEAR(rstd[0], r, 1e-6);
  EXPECT_NEAR(out[0], -r, 1e-6);
  EXPECT_NEAR(out[1], 0.0, 1e-6);
  EXPECT_NEAR(out[2], r, 1e-6);
  // weight and bias
  w = {2, 2, 2};
  b = {1, 1, 1};
  h->layernorm_forward(tf(out, {1, 3}), tf(mean, {1}), tf(rstd, {1}), tf(x, {1, 3}), tf(w, {3}),
                       tf(b, {3}));
  EXPECT_NEAR(out[2], 2 * r + 1, 1e-5);
}

struct LnCase {
  int64_t B = 2, T = 5, C = 8;
  std::vector<float> x = randn(B * T * C, 11, 2.0f), w = randn(C, 12), b = randn(C, 13);
  std::vector<float> g = randn(B * T * C, 14);
  std::vector<float> out = std::vector<float>(B * T * C), mean = std::vector<float>(B * T),
                     rstd = std::vector<float>(B * T);
  void forward(Harness& h) {
    h->layernorm_forward(tf(out, {B, T, C}), tf(mean, {B, T}), tf(rstd, {B, T}), tf(x, {B, T, C}),
                         tf(w, {C}), tf(b, {C}));
  }
  void backward(Harness& h, std::vector<float>& dx, std::vector<float>& dw,
                std::vector<float>& db) {
    h->layernorm_backward(tf(dx, {B, T, C}), tf(dw, {C}), tf(db, {C}), tf(g, {B, T, C}),
                          tf(x, {B, T, C}), tf(w, {C}), tf(mean, {B, T}), tf(rstd, {B, T}));
  }
};

TEST(LayerNorm, BackwardMatchesFiniteDifferences) {
  Harness h;
  LnCase k;
  auto loss = [&] {
    k.forward(h);
    return dot(k.out, k.g);
  };
  k.forward(h);
  std::vector<float> dx(k.x.size(), 0.0f), dw(k.C, 0.0f), db(k.C, 0.0f);
  k.backward(h, dx, dw, db);
  expect_grad_close(dx, numeric_grad(k.x, loss), "dinp");
  expect_grad_close(dw, numeric_grad(k.w, loss), "dw");
  expect_grad_close(db, numeric_grad(k.b, loss), "db");
}

TEST(LayerNorm, BackwardAccumulatesIntoDinpDwDb) {
  Harness h;
  LnCase k;
  k.forward(h);
  std::vector<float> dx0(k.x.size(), 0.0f), dw0(k.C, 0.0f), db0(k.C, 0.0f);
  k.backward(h, dx0, dw0, db0);
  std::vector<float> dx = randn(k.x.size(), 20), dw = randn(k.C, 21), db = randn(k.C, 22);
  const std::vector<float> dxi = dx, dwi = dw, dbi = db;
  k.backward(h, dx, dw, db);
  for (size_t i = 0; i < dx.size(); ++i) EXPECT_NEAR(dx[i], dxi[i] + dx0[i], 1e-5);
  for (int64_t i = 0; i < k.C; ++i) EXPECT_NEAR(dw[i], dwi[i] + dw0[i], 1e-5);
  for (int64_t i = 0; i < k.C; ++i) EXPECT_NEAR(db[i], dbi[i] + db0[i], 1e-5);
}

TEST(LayerNorm, Deterministic) {
  Harness h;
  LnCase k;
  k.B = 4;
  k.T = 33;
  k.C = 70;
  k.x = randn(k.B * k.T * k.C, 1);
  k.w = randn(k.C, 2);
  k.b = randn(k.C, 3);
  k.g = randn(k.x.size(), 4);
  k.out.resize(k.x.size());
  k.mean.resize(k.B * k.T);
  k.rstd.resize(k.B * k.T);
  k.forward(h);
  const std::vector<float> o1 = k.out;
  k.forward(h);
  EXPECT_TRUE(bit_equal(o1, k.out));
  std::vector<float> dx1(k.x.size(), 0.0f), dw1(k.C, 0.0f), db1(k.C, 0.0f);
  std::vector<float> dx2 = dx1, dw2 = dw1, db2 = db1;
  k.backward(h, dx1, dw1, db1);
  k.backward(h, dx2, dw2, db2);
  EXPECT_TRUE(bit_equal(dx1, dx2));
  EXPECT_TRUE(bit_equal(dw1, dw2));
  EXPECT_TRUE(bit_equal(db1, db2));
}

}  // namespace
}  // namespace ft::test
