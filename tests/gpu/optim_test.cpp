// GPU sum_squares and fused multi-slice AdamW vs double-precision CPU references.
#include "gpu_test_util.h"

namespace ft::gputest {

TEST(GPU_SumSquares, MatchesCpu) {
  if (!ft::cuda_available()) GTEST_SKIP() << "no CUDA device";
  GpuEnv env({1, 1, 64, 1, 64, 64});
  for (DType dt : kDtypes) {
    for (int64_t n : {int64_t(1) << 20, int64_t(12345)}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " n=" + std::to_string(n));
      std::mt19937 g(7 + n);
      auto x = round_to(dt, randn(n, g));
      Tensor tx = env.upload(dt, {n}, x);
      double ref = 0;
      for (float v : x) ref += (double)v * v;
      double got = env.be().sum_squares(tx);
      EXPECT_NEAR(got, ref, 1e-5 * ref);
    }
  }
}

TEST(GPU_AdamW, MatchesCpu) {
  if (!ft::cuda_available()) GTEST_SKIP() << "no CUDA device";
  const int64_t n = 70001;
  const std::vector<ParamSlice> slices = {{0, 30000, true}, {30000, 1, false}, {30001, 20000, true},
                                          {50001, 19000, false}};  // last 1000 untouched
  GpuEnv env({1, 1, 64, 1, 64, 64});
  for (DType dt : kDtypes) {
    SCOPED_TRACE(dtype_name(dt));
    std::mt19937 g(8);
    auto master = randn(n, g, 0.5f);
    auto params = round_to(dt, master);
    if (dt == DType::f32) master = params;
    auto grads = round_to(dt, randn(n, g, 0.01f));
    auto m = randn(n, g, 0.01f), v = randu(n, g, 1e-6f, 1e-4f);
    AdamWStep s;
    s.lr = 1e-3f;
    s.weight_decay = 0.1f;
    s.grad_scale = 0.7f;
    s.t = 5;
    Tensor tp = env.upload(dt, {n}, params), tg = env.upload(dt, {n}, grads);
    Tensor tm = env.upload(DType::f32, {n}, m), tv = env.upload(DType::f32, {n}, v);
    Tensor tmaster = dt == DType::f32 ? Tensor() : env.upload(DType::f32, {n}, master);
    env.be().adamw_update(tp, tmaster, tg, tm, tv, slices, s);

    std::vector<double> rp(n), rm(m.begin(), m.end()), rv(v.begin(), v.end());
    for (int64_t i = 0; i < n; ++i) rp[i] = master[i];
    const double bc1 = 1 - std::pow(0.9, 5), bc2 = 1 - std::pow(0.95, 5);
    for (const ParamSlice& sl : slices)
      for (int64_t i = sl.offset; i < sl.offset + sl.count; ++i) {
        double gi = (double)grads[i] * s.grad_scale;
        rm[i] = 0.9 * m[i] + 0.1 * gi;
        rv[i] = 0.95 * v[i] + 0.05 * gi * gi;
        double upd = (rm[i] / bc1) / (std::sqrt(rv[i] / bc2) + 1e-8);
        rp[i] -= 1e-3 * (upd + (sl.decay ? 0.1 * rp[i] : 0.0));
      }
    EXPECT_LT(rel_err(env.get(tm), rm), 1e-6);
    EXPECT_LT(rel_err(env.get(tv), rv), 1e-6);
    // compare the change, not the value: the update is ~1e-3 of the weight
    auto delta = [&](const std::vector<float>& now) {
      std::vector<double> d(n);
      for (int64_t i = 0; i < n; ++i) d[i] = now[i] - (double)master[i];
      return d;
    };
    std::vector<double> rdelta(n);
    for (int64_t i = 0; i < n; ++i) rdelta[i] = rp[i] - master[i];
    auto ddelta = delta(dt == DType::f32 ? env.get(tp) : env.get(tmaster));
    std::vector<float> fd(ddelta.begin(), ddelta.end());
    EXPECT_LT(rel_err(fd, rdelta), 1e-3);
    if (dt != DType::f32) {
      // params are the master weights rounded to bf16/f16
      auto p = env.get(tp), mw = env.get(tmaster);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(p[i], round_to(dt, mw[i])) << i;
    }
    // elements outside every slice are untouched
    auto p = env.get(tp);
    for (int64_t i = 69001; i < n; ++i) ASSERT_EQ(p[i], params[i]) << i;
  }
}

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
