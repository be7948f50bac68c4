// AdamW against a scalar reference (decay on/off slices, grad scale, bias correction), and
// sum_squares (value, double accumulation, determinism).
#include "backend/cpu/adamw.h"

#include "core/error.h"
#include "op_test_util.h"

namespace ft::test {
namespace {

// One AdamW step on one element, written out independently of the kernel, in double.
void adamw_ref(double& p, double g, double& m, double& v, const AdamWStep& s, bool decay) {
  g *= s.grad_scale;
  m = s.beta1 * m + (1 - s.beta1) * g;
  v = s.beta2 * v + (1 - s.beta2) * g * g;
  const double mhat = m / (1 - std::pow(static_cast<double>(s.beta1), static_cast<double>(s.t)));
  const double vhat = v / (1 - std::pow(static_cast<double>(s.beta2), static_cast<double>(s.t)));
  p -= s.lr * (mhat / (std::sqrt(vhat) + s.eps) + (decay ? s.weight_decay * p : 0.0));
}

TEST(AdamW, OneStepMatchesScalarReference) {
  Harness h;
  const int64_t n = 50;
  std::vector<float> p = randn(n, 101), g = randn(n, 102), m = randn(n, 103, 0.1f), v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = 0.01f * static_cast<float>(i % 7 + 1);
  const std::vector<float> p0 = p, m0 = m, v0 = v;
  // [0,20) decays, [20,35) does not, [35,45) decays, [45,50) belongs to no slice
  const ParamSlice sl[] = {{0, 20, true}, {20, 15, false}, {35, 10, true}};
  AdamWStep s;
  s.lr = 1e-2f;
  s.weight_decay = 0.1f;
  s.grad_scale = 0.5f;
  s.t = 3;
  h->adamw_update(tf(p, {n}), Tensor(), tf(g, {n}), tf(m, {n}), tf(v, {n}), sl, s);
  for (int64_t i = 0; i < n; ++i) {
    if (i >= 45) {
      EXPECT_EQ(p[i], p0[i]);
      EXPECT_EQ(m[i], m0[i]);
      EXPECT_EQ(v[i], v0[i]);
      continue;
    }
    const bool decay = i < 20 || i >= 35;
    double pr = p0[i], mr = m0[i], vr = v0[i];
    adamw_ref(pr, g[i], mr, vr, s, decay);
    EXPECT_NEAR(p[i], pr, 1e-6 + 1e-6 * std::fabs(pr)) << i;
    EXPECT_NEAR(m[i], mr, 1e-7 + 1e-6 * std::fabs(mr)) << i;
    EXPECT_NEAR(v[i], vr, 1e-8 + 1e-6 * std::fabs(vr)) << i;
  }
}

TEST(AdamW, FirstStepMovesByLearningRate) {
  // t=1 from zero state: mhat = g, vhat = g^2, so the step is lr * sign(g) (+ decay).
  Harness h;
  std::vector<float> p = {1.0f, 1.0f}, g = {3.0f, -2.0f}, m(2, 0.0f), v(2, 0.0f);
  const ParamSlice sl[] = {{0, 1, false}, {1, 1, true}};
  AdamWStep s;
  s.lr = 0.1f;
  s.weight_decay = 0.5f;
  h->adamw_update(tf(p, {2}), Tensor(), tf(g, {2}), tf(m, {2}), tf(v, {2}), sl, s);
  EXPECT_NEAR(p[0], 1.0 - 0.1, 1e-6);
  EXPECT_NEAR(p[1], 1.0 + 0.1 - 0.1 * 0.5, 1e-6);
}

TEST(AdamW, DeterministicAndRejectsMasterAndBadSlices) {
  Harness h;
  const int64_t n = 10000;
  std::vector<float> g = randn(n, 111), p1 = randn(n, 112), m1(n, 0.0f), v1(n, 0.0f);
  std::vector<float> p2 = p1, m2 = m1, v2 = v1;
  const ParamSlice sl[] = {{0, n, true}};
  AdamWStep s;
  s.lr = 6e-4f;
  h->adamw_update(tf(p1, {n}), Tensor(), tf(g, {n}), tf(m1, {n}), tf(v1, {n}), sl, s);
  h->adamw_update(tf(p2, {n}), Tensor(), tf(g, {n}), tf(m2, {n}), tf(v2, {n}), sl, s);
  EXPECT_TRUE(bit_equal(p1, p2));
  EXPECT_TRUE(bit_equal(m1, m2));
  EXPECT_TRUE(bit_equal(v1, v2));
  std::vector<float> master(n);
  EXPECT_THROW(h->adamw_update(tf(p1, {n}), tf(master, {n}), tf(g, {n}), tf(m1, {n}),
                               tf(v1, {n}), sl, s),
               InternalError);
  const ParamSlice bad[] = {{n - 5, 10, true}};
  EXPECT_THROW(
      h->adamw_update(tf(p1, {n}), Tensor(), tf(g, {n}), tf(m1, {n}), tf(v1, {n}), bad, s),
      InternalError);
}

TEST(SumSquares, ValueAndDeterminism) {
  Harness h;
  std::vector<float> x = {1, 2, 3};
  EXPECT_EQ(h->sum_squares(tf(x, {3})), 14.0);
  const int64_t n = 100003;
  std::vector<float> y = randn(n, 121);
  double ref = 0.0;
  for (float v : y) ref += static_cast<double>(v) * v;
  const double a = h->sum_squares(tf(y, {n})), b = h->sum_squares(tf(y, {n}));
  EXPECT_NEAR(a, ref, 1e-9 * ref);
  EXPECT_EQ(a, b);
  std::vector<float> empty_ok(1, 0.5f);
  EXPECT_EQ(h->sum_squares(tf(empty_ok, {1})), 0.25);
}

}  // namespace
}  // namespace ft::test
