// GELU: known values, gradient by finite differences, overwrite, determinism.
#include "backend/cpu/gelu.h"

#include "op_test_util.h"

namespace ft::test {
namespace {

TEST(Gelu, KnownValues) {
  Harness h;
  std::vector<float> x = {0.0f, 1.0f, -1.0f, 3.0f}, out(4);
  h->gelu_forward(tf(out, {4}), tf(x, {4}));
  auto ref = [](double v) {
    return 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
  };
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_NEAR(out[1], 0.8411920, 1e-6);  // tanh-approx GELU(1)
  EXPECT_NEAR(out[2], -0.1588080, 1e-6);
  EXPECT_NEAR(out[3], ref(3.0), 1e-6);
}

TEST(Gelu, BackwardMatchesFiniteDifferencesAndOverwrites) {
  Harness h;
  const int64_t N = 2 * 5 * 8;
  std::vector<float> x = randn(N, 71, 2.0f), g = randn(N, 72), out(N);
  auto loss = [&] {
    h->gelu_forward(tf(out, {N}), tf(x, {N}));
    return dot(out, g);
  };
  std::vector<float> dx(N, 42.0f);
  h->gelu_backward(tf(dx, {N}), tf(x, {N}), tf(g, {N}));
  expect_grad_close(dx, numeric_grad(x, loss), "dinp");
}

TEST(Gelu, Deterministic) {
  Harness h;
  const int64_t N = 1000;
  std::vector<float> x = randn(N, 73), g = randn(N, 74), o1(N), o2(N), d1(N), d2(N);
  h->gelu_forward(tf(o1, {N}), tf(x, {N}));
  h->gelu_forward(tf(o2, {N}), tf(x, {N}));
  h->gelu_backward(tf(d1, {N}), tf(x, {N}), tf(g, {N}));
  h->gelu_backward(tf(d2, {N}), tf(x, {N}), tf(g, {N}));
  EXPECT_TRUE(bit_equal(o1, o2));
  EXPECT_TRUE(bit_equal(d1, d2));
}

}  // namespace
}  // namespace ft::test
