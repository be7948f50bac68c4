// GPU sum_squares with inf/NaN gradients (what fp16's loss scaler relies on). Its values and
// AdamW's against the CPU reference: the op table (GPU_OpTable.sum_squares_*, adamw_*).
#include "gpu_test_util.h"

namespace ft::gputest {

// fp16's loss scaler skips a step when the gradients' sum of squares is not finite, so one
// inf or NaN anywhere (including the unvectorised tail) must make the result inf / NaN.
TEST(GPU_SumSquares, NonFiniteGradientsPropagate) {
  if (!ft::cuda_available()) GTEST_SKIP() << "no CUDA device";
  GpuEnv env({1, 1, 64, 1, 64, 64});
  for (DType dt : kDtypes) {
    for (int64_t at : {int64_t(0), int64_t(777), int64_t(12344)}) {  // 12344: in the tail
      SCOPED_TRACE(std::string(dtype_name(dt)) + " at=" + std::to_string(at));
      const int64_t n = 12345;
      std::mt19937 g(9);
      auto x = round_to(dt, randn(n, g));
      Tensor tx = env.upload(dt, {n}, x);
      EXPECT_TRUE(std::isfinite(env.be().sum_squares(tx)));
      x[at] = INFINITY;
      env.put(tx, x);
      double s = env.be().sum_squares(tx);
      EXPECT_TRUE(std::isinf(s) && s > 0) << s;
      x[at] = -INFINITY;
      env.put(tx, x);
      s = env.be().sum_squares(tx);
      EXPECT_TRUE(std::isinf(s) && s > 0) << s;
      x[at] = NAN;
      env.put(tx, x);
      EXPECT_TRUE(std::isnan(env.be().sum_squares(tx)));
    }
    if (dt == DType::f16) {
      // A kernel result past fp16's range (65504) is stored as inf (not clamped to the
      // largest finite value), so such an overflow is seen too: 40000 + 40000 = inf.
      const int64_t n = 4096;
      std::vector<float> a(n, 1.f);
      a[100] = 40000.f;
      Tensor ta = env.upload(dt, {n}, a), tsum = env.tensor(dt, {n});
      env.be().residual_forward(tsum, ta, ta);
      EXPECT_TRUE(std::isinf(env.get(tsum)[100]));
      double s = env.be().sum_squares(tsum);
      EXPECT_TRUE(std::isinf(s) && s > 0) << s;
    }
  }
}

}  // namespace ft::gputest
