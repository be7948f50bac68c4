// Fused classifier: uniform logits, gradient by finite differences, padded vocabulary,
// ignored targets, loss-only mode, determinism.
#include "backend/cpu/classifier.h"

#include "core/error.h"
#include "op_test_util.h"

namespace ft::test {
namespace {

TEST(Classifier, UniformLogitsGiveLogVAndPaddingIsExcluded) {
  Harness h;
  const int64_t N = 3, V = 5, Vp = 8;
  std::vector<float> logits(N * Vp, 2.0f);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t v = V; v < Vp; ++v) logits[n * Vp + v] = 50.0f;  // padding must not count
  std::vector<int32_t> tgt = {0, 4, 2};
  std::vector<float> losses(N);
  const float dloss = 1.0f / 3;
  h->classifier_forward_backward(tf(losses, {N}), tf(logits, {N, Vp}), ti(tgt, {N}), V, dloss);
  for (int64_t n = 0; n < N; ++n) {
    EXPECT_NEAR(losses[n], std::log(5.0), 1e-6);
    for (int64_t v = 0; v < Vp; ++v) {
      const double want = v >= V ? 0.0 : (0.2 - (v == tgt[n] ? 1.0 : 0.0)) * dloss;
      EXPECT_NEAR(logits[n * Vp + v], want, 1e-7) << n << "," << v;
      if (v >= V) {
        EXPECT_EQ(logits[n * Vp + v], 0.0f);
      }
    }
  }
}

TEST(Classifier, GradientMatchesFiniteDifferences) {
  Harness h;
  const int64_t B = 2, T = 5, V = 7, Vp = 9, N = B * T;
  std::vector<float> x = randn(N * Vp, 81, 2.0f);
  std::vector<int32_t> tgt = randint(N, V, 82);
  tgt[4] = -1;  // ignored
  const float dloss = 1.0f / static_cast<float>(N - 1);
  std::vector<float> losses(N);
  auto loss = [&] {  // dloss == 0: losses only, logits untouched (so no copy is needed)
    h->classifier_forward_backward(tf(losses, {B, T}), tf(x, {B, T, Vp}), ti(tgt, {B, T}), V,
                                   0.0f);
    double s = 0.0;
    for (float l : losses) s += l;
    return s * dloss;
  };
  std::vector<float> grad = x;
  h->classifier_forward_backward(tf(losses, {B, T}), tf(grad, {B, T, Vp}), ti(tgt, {B, T}), V,
                                 dloss);
  expect_grad_close(grad, numeric_grad(x, loss), "dlogits", 1e-2, 5e-4);
}

TEST(Classifier, IgnoredTargetsAndLossOnlyMode) {
  Harness h;
  const int64_t N = 4, V = 6, Vp = 8;
  const std::vector<float> x0 = randn(N * Vp, 91);
  std::vector<int32_t> tgt = {1, -1, 5, -100};
  std::vector<float> x = x0, l0(N), l1(N, 7.0f);
  h->classifier_forward_backward(tf(l0, {N}), tf(x, {N, Vp}), ti(tgt, {N}), V, 0.0f);
  EXPECT_TRUE(bit_equal(x, x0));  // evaluation leaves logits as they were
  EXPECT_EQ(l0[1], 0.0f);
  EXPECT_EQ(l0[3], 0.0f);
  EXPECT_GT(l0[0], 0.0f);
  h->classifier_forward_backward(tf(l1, {N}), tf(x, {N, Vp}), ti(tgt, {N}), V, 0.25f);
  EXPECT_TRUE(bit_equal(l0, l1));  // same losses with or without the gradient
  for (int64_t v = 0; v < Vp; ++v) {
    EXPECT_EQ(x[1 * Vp + v], 0.0f);
    EXPECT_EQ(x[3 * Vp + v], 0.0f);
  }
  // a real row's gradient sums to zero over the vocabulary
  double s = 0.0;
  for (int64_t v = 0; v < Vp; ++v) s += x[v];
  EXPECT_NEAR(s, 0.0, 1e-7);
}

TEST(Classifier, StableForLargeLogitsAndDeterministic) {
  Harness h;
  const int64_t N = 16, V = 100, Vp = 128;
  std::vector<float> x = randn(N * Vp, 93, 1.0f);
  for (float& v : x) v += 1000.0f;  // exp would overflow without the max shift
  std::vector<int32_t> tgt = randint(N, V, 94);
  std::vector<float> a = x, b = x, la(N), lb(N);
  h->classifier_forward_backward(tf(la, {N}), tf(a, {N, Vp}), ti(tgt, {N}), V, 0.5f);
  h->classifier_forward_backward(tf(lb, {N}), tf(b, {N, Vp}), ti(tgt, {N}), V, 0.5f);
  for (float l : la) EXPECT_TRUE(std::isfinite(l));
  for (float g : a) EXPECT_TRUE(std::isfinite(g));
  EXPECT_TRUE(bit_equal(a, b));
  EXPECT_TRUE(bit_equal(la, lb));
}

TEST(Classifier, RejectsTargetsPastV) {
  Harness h;
  std::vector<float> x(8), l(1);
  std::vector<int32_t> tgt = {6};
  EXPECT_THROW(h->classifier_forward_backward(tf(l, {1}), tf(x, {1, 8}), ti(tgt, {1}), 6, 1.0f),
               InternalError);
}

}  // namespace
}  // namespace ft::test
