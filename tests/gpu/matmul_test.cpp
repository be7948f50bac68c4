// GPU matmul (cuBLASLt) forward/backward, with and without bias, vs a double CPU reference.
#include "gpu_test_util.h"

namespace ft::gputest {

TEST(GPU_Matmul, ForwardBackwardMatchCpu) {
  if (!ft::cuda_available()) GTEST_SKIP() << "no CUDA device";
  const int64_t B = 2, T = 33, C = 96, OC = 160, N = B * T;
  GpuEnv env({B, T, C, 4, 256, 250});
  for (DType dt : kDtypes) {
    for (bool with_bias : {true, false}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + (with_bias ? " bias" : " no bias"));
      std::mt19937 g(3 + with_bias);
      auto x = round_to(dt, randn(N * C, g)), w = round_to(dt, randn(OC * C, g, 0.1f)),
           bias = round_to(dt, randn(OC, g));
      Tensor tx = env.upload(dt, {B, T, C}, x), tw = env.upload(dt, {OC, C}, w);
      Tensor tbias = with_bias ? env.upload(dt, {OC}, bias) : Tensor();
      Tensor out = env.tensor(dt, {B, T, OC});
      env.poison(out);
      env.be().matmul_forward(out, tx, tw, tbias);
      std::vector<double> ref(N * OC);
      for (int64_t n = 0; n < N; ++n)
        for (int64_t o = 0; o < OC; ++o) {
          double s = with_bias ? bias[o] : 0.0;
          for (int64_t c = 0; c < C; ++c) s += (double)x[n * C + c] * w[o * C + c];
          ref[n * OC + o] = s;
        }
      EXPECT_LT(rel_err(env.get(out), ref), tol(dt, 1e-6));

      auto dout = round_to(dt, randn(N * OC, g));
      auto dw0 = round_to(dt, randn(OC * C, g)), db0 = round_to(dt, randn(OC, g));
      Tensor tdout = env.upload(dt, {B, T, OC}, dout), tdx = env.tensor(dt, {B, T, C});
      Tensor tdw = env.upload(dt, {OC, C}, dw0);
      Tensor tdb = with_bias ? env.upload(dt, {OC}, db0) : Tensor();
      env.poison(tdx);
      env.be().matmul_backward(tdx, tdw, tdb, tdout, tx, tw);
      std::vector<double> rdx(N * C, 0.0), rdw(dw0.begin(), dw0.end()), rdb(db0.begin(), db0.end());
      for (int64_t n = 0; n < N; ++n)
        for (int64_t o = 0; o < OC; ++o) {
          double d = dout[n * OC + o];
          rdb[o] += d;
          for (int64_t c = 0; c < C; ++c) {
            rdx[n * C + c] += d * w[o * C + c];
            rdw[o * C + c] += d * x[n * C + c];
          }
        }
      EXPECT_LT(rel_err(env.get(tdx), rdx), tol(dt, 1e-6));
      EXPECT_LT(rel_err(env.get(tdw), rdw), tol(dt, 1e-6));
      if (with_bias) EXPECT_LT(rel_err(env.get(tdb), rdb), tol(dt, 1e-6));

      // dinp empty: only dw (and dbias) accumulate again
      env.be().matmul_backward(Tensor(), tdw, tdb, tdout, tx, tw);
      for (int64_t i = 0; i < OC * C; ++i) rdw[i] += rdw[i] - dw0[i];
      EXPECT_LT(rel_err(env.get(tdw), rdw), tol(dt, 1e-6));
    }
  }
}

}  // namespace ft::gputest
