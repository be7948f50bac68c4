// Matmul: hand 2x2, gradients by finite differences, overwrite vs accumulate, determinism.
#include "backend/cpu/matmul.h"

#include "core/error.h"
#include "op_test_util.h"

namespace ft::test {
namespace {

TEST(Matmul, HandComputed2x2) {
  Harness h;
  std::vector<float> x = {1, 2, 3, 4}, w = {5, 6, 7, 8}, bias = {1, 2}, out(4);
  h->matmul_forward(tf(out, {2, 2}), tf(x, {2, 2}), tf(w, {2, 2}), tf(bias, {2}));
  EXPECT_EQ(out, (std::vector<float>{18, 25, 40, 55}));
  h->matmul_forward(tf(out, {2, 2}), tf(x, {2, 2}), tf(w, {2, 2}), Tensor());
  EXPECT_EQ(out, (std::vector<float>{17, 23, 39, 53}));
}

struct MmCase {
  int64_t B = 2, T = 5, C = 8, OC = 12;
  std::vector<float> x = randn(B * T * C, 31), w = randn(OC * C, 32, 0.5f), bias = randn(OC, 33);
  std::vector<float> g = randn(B * T * OC, 34), out = std::vector<float>(B * T * OC);
  void forward(Harness& h) {
    h->matmul_forward(tf(out, {B, T, OC}), tf(x, {B, T, C}), tf(w, {OC, C}), tf(bias, {OC}));
  }
  void backward(Harness& h, std::vector<float>& dx, std::vector<float>& dw,
                std::vector<float>& db) {
    h->matmul_backward(tf(dx, {B, T, C}), tf(dw, {OC, C}), tf(db, {OC}), tf(g, {B, T, OC}),
                       tf(x, {B, T, C}), tf(w, {OC, C}));
  }
};

TEST(Matmul, BackwardMatchesFiniteDifferences) {
  Harness h;
  MmCase k;
  auto loss = [&] {
    k.forward(h);
    return dot(k.out, k.g);
  };
  std::vector<float> dx(k.x.size()), dw(k.w.size(), 0.0f), db(k.OC, 0.0f);
  k.backward(h, dx, dw, db);
  expect_grad_close(dx, numeric_grad(k.x, loss), "dinp");
  expect_grad_close(dw, numeric_grad(k.w, loss), "dw");
  expect_grad_close(db, numeric_grad(k.bias, loss), "dbias");
}

TEST(Matmul, DinpOverwritesParamGradsAccumulate) {
  Harness h;
  MmCase k;
  std::vector<float> dx0(k.x.size()), dw0(k.w.size(), 0.0f), db0(k.OC, 0.0f);
  k.backward(h, dx0, dw0, db0);
  std::vector<float> dx(k.x.size(), 123.0f), dw = randn(k.w.size(), 40), db = randn(k.OC, 41);
  const std::vector<float> dwi = dw, dbi = db;
  k.backward(h, dx, dw, db);
  EXPECT_TRUE(bit_equal(dx, dx0));  // overwritten, garbage gone
  for (size_t i = 0; i < dw.size(); ++i) EXPECT_NEAR(dw[i], dwi[i] + dw0[i], 1e-5);
  for (int64_t i = 0; i < k.OC; ++i) EXPECT_NEAR(db[i], dbi[i] + db0[i], 1e-5);
  // empty dinp and dbias are skipped; dw still accumulates
  std::vector<float> dw2(k.w.size(), 0.0f);
  h->matmul_backward(Tensor(), tf(dw2, {k.OC, k.C}), Tensor(), tf(k.g, {k.B, k.T, k.OC}),
                     tf(k.x, {k.B, k.T, k.C}), tf(k.w, {k.OC, k.C}));
  EXPECT_TRUE(bit_equal(dw2, dw0));
}

TEST(Matmul, GradWriteOverwriteIgnoresOldGradients) {
  Harness h;
  MmCase k;
  std::vector<float> dx0(k.x.size()), dw0(k.w.size(), 0.0f), db0(k.OC, 0.0f);
  k.backward(h, dx0, dw0, db0);
  // overwrite: whatever dw/db held (NaN here) is not read
  std::vector<float> dx(k.x.size()), dw(k.w.size(), NAN), db(k.OC, NAN);
  h->matmul_backward(tf(dx, {k.B, k.T, k.C}), tf(dw, {k.OC, k.C}), tf(db, {k.OC}),
                     tf(k.g, {k.B, k.T, k.OC}), tf(k.x, {k.B, k.T, k.C}), tf(k.w, {k.OC, k.C}),
                     GradWrite::overwrite);
  EXPECT_TRUE(bit_equal(dx, dx0));
  EXPECT_TRUE(bit_equal(dw, dw0));
  EXPECT_TRUE(bit_equal(db, db0));
}

TEST(Matmul, Deterministic) {
  Harness h;
  MmCase k;
  k.forward(h);
  const std::vector<float> o1 = k.out;
  k.forward(h);
  EXPECT_TRUE(bit_equal(o1, k.out));
  std::vector<float> dx1(k.x.size()), dw1(k.w.size(), 0.0f), db1(k.OC, 0.0f);
  std::vector<float> dx2 = dx1, dw2 = dw1, db2 = db1;
  k.backward(h, dx1, dw1, db1);
  k.backward(h, dx2, dw2, db2);
  EXPECT_TRUE(bit_equal(dx1, dx2));
  EXPECT_TRUE(bit_equal(dw1, dw2));
  EXPECT_TRUE(bit_equal(db1, db2));
}

TEST(Matmul, RejectsMismatchedShapes) {
  Harness h;
  std::vector<float> x(6), w(4), out(4);
  EXPECT_THROW(h->matmul_forward(tf(out, {2, 2}), tf(x, {2, 3}), tf(w, {2, 2}), Tensor()),
               InternalError);
}

}  // namespace
}  // namespace ft::test
