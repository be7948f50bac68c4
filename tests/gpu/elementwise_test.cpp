// GPU GELU forward/backward and residual add vs double-precision CPU references.
#include "gpu_test_util.h"

namespace ft::gputest {

namespace {
double gelu_ref(double x) {
  const double k = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1 + std::tanh(k * (x + 0.044715 * x * x * x)));
}
double gelu_grad_ref(double x) {
  const double k = std::sqrt(2.0 / M_PI);
  double u = k * (x + 0.044715 * x * x * x), th = std::tanh(u);
  return 0.5 * (1 + th) + 0.5 * x * (1 - th * th) * k * (1 + 3 * 0.044715 * x * x);
}
}  // namespace

TEST(GPU_Gelu, ForwardBackwardMatchCpu) {
  if (!ft::cuda_available()) GTEST_SKIP() << "no CUDA device";
  GpuEnv env({1, 1, 64, 1, 64, 64});
  for (DType dt : kDtypes) {
    for (int64_t n : {int64_t(4096), int64_t(1003)}) {  // 1003: a tail past the last full pack
      SCOPED_TRACE(std::string(dtype_name(dt)) + " n=" + std::to_string(n));
      std::mt19937 g(4 + n);
      auto x = round_to(dt, randn(n, g, 2.f)), dout = round_to(dt, randn(n, g));
      Tensor tx = env.upload(dt, {n}, x), tdout = env.upload(dt, {n}, dout);
      Tensor out = env.tensor(dt, {n}), dx = env.tensor(dt, {n});
      env.poison(out);
      env.poison(dx);
      env.be().gelu_forward(out, tx);
      env.be().gelu_backward(dx, tx, tdout);
      std::vector<double> r(n), rd(n);
      for (int64_t i = 0; i < n; ++i) {
        r[i] = gelu_ref(x[i]);
        rd[i] = gelu_grad_ref(x[i]) * dout[i];
      }
      EXPECT_LT(rel_err(env.get(out), r), tol(dt, 1e-5));
      EXPECT_LT(rel_err(env.get(dx), rd), tol(dt, 1e-5));
    }
  }
}

TEST(GPU_Residual, ForwardMatchesCpu) {
  if (!ft::cuda_available()) GTEST_SKIP() << "no CUDA device";
  GpuEnv env({1, 1, 64, 1, 64, 64});
  for (DType dt : kDtypes) {
    for (int64_t n : {int64_t(8192), int64_t(77)}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " n=" + std::to_string(n));
      std::mt19937 g(5 + n);
      auto a = round_to(dt, randn(n, g)), b = round_to(dt, randn(n, g));
      Tensor ta = env.upload(dt, {n}, a), tb = env.upload(dt, {n}, b), out = env.tensor(dt, {n});
      env.poison(out);
      env.be().residual_forward(out, ta, tb);
      std::vector<double> r(n);
      for (int64_t i = 0; i < n; ++i) r[i] = (double)a[i] + b[i];
      EXPECT_LT(rel_err(env.get(out), r), tol(dt, 1e-7));
    }
  }
}

}  // namespace ft::gputest
