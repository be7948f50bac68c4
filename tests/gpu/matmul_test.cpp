// GPU matmul (cuBLASLt) forward/backward, with and without bias, vs a double CPU reference;
// the bias gradient both through the dW product's BGRADB epilogue and the two-kernel fallback.
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

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
      for (int64_t o = 0; o < OC; ++o) rdb[o] += rdb[o] - db0[o];
      EXPECT_LT(rel_err(env.get(tdw), rdw), tol(dt, 1e-6));
      if (with_bias) EXPECT_LT(rel_err(env.get(tdb), rdb), tol(dt, 1e-6));
    }
  }
}

// The projection with the residual add in its epilogue (C = residual, beta = 1): against the
// reference, with and without bias, and the residual left as it was. Twice, because the
// first call autotunes (it times several algorithms on these very operands).
TEST(GPU_Matmul, ResidualEpilogueMatchesCpu) {
  if (!ft::cuda_available()) GTEST_SKIP() << "no CUDA device";
  const int64_t B = 3, T = 41, C = 96, OC = 136, N = B * T;
  GpuEnv env({B, T, C, 4, 256, 250});
  for (DType dt : kDtypes) {
    for (bool with_bias : {true, false}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + (with_bias ? " bias" : " no bias"));
      std::mt19937 g(11 + with_bias);
      auto x = round_to(dt, randn(N * C, g)), w = round_to(dt, randn(OC * C, g, 0.1f)),
           bias = round_to(dt, randn(OC, g)), res = round_to(dt, randn(N * OC, g, 3.f));
      Tensor tx = env.upload(dt, {N, C}, x), tw = env.upload(dt, {OC, C}, w);
      Tensor tbias = with_bias ? env.upload(dt, {OC}, bias) : Tensor();
      Tensor tres = env.upload(dt, {N, OC}, res), out = env.tensor(dt, {N, OC});
      std::vector<double> ref(N * OC);
      for (int64_t n = 0; n < N; ++n)
        for (int64_t o = 0; o < OC; ++o) {
          double s = res[n * OC + o] + (with_bias ? bias[o] : 0.0);
          for (int64_t c = 0; c < C; ++c) s += (double)x[n * C + c] * w[o * C + c];
          ref[n * OC + o] = s;
        }
      for (int rep = 0; rep < 2; ++rep) {
        env.poison(out);
        env.be().matmul_residual_forward(out, tx, tw, tbias, tres);
        EXPECT_LT(rel_err(env.get(out), ref), tol(dt, 1e-6)) << "call " << rep;
      }
      EXPECT_EQ(env.get(tres), res);
    }
  }
}


// dbias through the dW product's BGRADB epilogue (FT_BGRAD_EPILOGUE_STRICT=1: the backend
// throws rather than fall back, so bf16/f16 prove the epilogue runs; fp32 may lack it) and
// through the two-kernel reduction (FT_NO_BGRAD_EPILOGUE=1). Both must ADD onto a non-zero
// dbias (the epilogue itself overwrites), twice, and repeat bitwise from the same start.
TEST(GPU_Matmul, BiasGradEpilogueAndFallback) {
  if (!ft::cuda_available()) GTEST_SKIP() << "no CUDA device";
  // N = 518 rows is not a multiple of any tile, OC = 200 not a multiple of 64
  const int64_t B = 2, T = 259, C = 96, OC = 200, N = B * T;
  for (bool fused : {true, false}) {
    std::optional<GpuEnv> env;
    {  // the switches are read when the backend is created
      ScopedEnv strict("FT_BGRAD_EPILOGUE_STRICT", fused ? "1" : nullptr);
      ScopedEnv off("FT_NO_BGRAD_EPILOGUE", fused ? "0" : "1");
      env.emplace(OpDims{B, T, C, 4, 256, 250});
    }
    for (DType dt : kDtypes) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + (fused ? " BGRADB epilogue" : " two kernels"));
      std::mt19937 g(31);
      auto x = round_to(dt, randn(N * C, g)), w = round_to(dt, randn(OC * C, g, 0.1f));
      auto dout = round_to(dt, randn(N * OC, g));
      // dbias0 of the size of the column sums (~sqrt(N)): overwriting instead of adding fails
      auto dw0 = round_to(dt, randn(OC * C, g)), db0 = round_to(dt, randn(OC, g, 20.f));
      Tensor tx = env->upload(dt, {B, T, C}, x), tw = env->upload(dt, {OC, C}, w);
      Tensor tdout = env->upload(dt, {B, T, OC}, dout), tdx = env->tensor(dt, {B, T, C});
      Tensor tdw = env->upload(dt, {OC, C}, dw0), tdb = env->upload(dt, {OC}, db0);
      try {
        env->be().matmul_backward(tdx, tdw, tdb, tdout, tx, tw);
      } catch (const std::exception& e) {
        ASSERT_TRUE(fused && dt == DType::f32)
            << "the bf16/f16 BGRADB epilogue must be available: " << e.what();
        std::printf("[bgrad epilogue] f32: cuBLASLt has none here (falls back): %s\n", e.what());
        continue;
      }
      std::vector<double> rdw(dw0.begin(), dw0.end()), rdb(db0.begin(), db0.end());
      for (int64_t n = 0; n < N; ++n)
        for (int64_t o = 0; o < OC; ++o) {
          double d = dout[n * OC + o];
          rdb[o] += d;
          for (int64_t c = 0; c < C; ++c) rdw[o * C + c] += d * x[n * C + c];
        }
      const auto db1 = env->get(tdb), dw1 = env->get(tdw);
      const double e_db = rel_err(db1, rdb);
      std::printf("[bgrad epilogue] %s %s: dbias rel err %.2e\n", dtype_name(dt),
                  fused ? "epilogue" : "two kernels", e_db);
      EXPECT_LT(e_db, tol(dt, 1e-6));
      EXPECT_LT(rel_err(dw1, rdw), tol(dt, 1e-6));

      // accumulates again (no dinp this time)
      env->be().matmul_backward(Tensor(), tdw, tdb, tdout, tx, tw);
      std::vector<double> rdb2(OC);
      for (int64_t o = 0; o < OC; ++o) rdb2[o] = 2 * rdb[o] - db0[o];
      EXPECT_LT(rel_err(env->get(tdb), rdb2), tol(dt, 1e-6));

      // deterministic: the same start gives the same bits
      env->put(tdw, dw0);
      env->put(tdb, db0);
      env->be().matmul_backward(tdx, tdw, tdb, tdout, tx, tw);
      EXPECT_EQ(env->get(tdb), db1);
      EXPECT_EQ(env->get(tdw), dw1);
    }
  }
}

// fittrain's bias reduction where it splits dout into many row groups (~2 blocks per SM over
// the column blocks; OC = 200: 129 groups of 64 rows, the last one ragged; 768 and 3072: a
// few hundred rows each): the sum onto a non-zero dbias, and a bitwise repeat. The dW product
// is not checked here (the tests above do).
TEST(GPU_Matmul, BiasGradManyRowGroups) {
  if (!ft::cuda_available()) GTEST_SKIP() << "no CUDA device";
  const int64_t B = 3, T = 2731, C = 16, N = B * T;  // N = 8193
  std::optional<GpuEnv> env;
  {
    ScopedEnv off("FT_NO_BGRAD_EPILOGUE", "1");
    env.emplace(OpDims{B, T, C, 1, 3072, 3072}, 1ull << 30);
  }
  for (int64_t OC : {200, 768, 3072}) {
    for (DType dt : kDtypes) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " OC=" + std::to_string(OC));
      std::mt19937 g(OC);
      auto x = round_to(dt, randn(N * C, g)), w = round_to(dt, randn(OC * C, g, 0.1f));
      auto dout = round_to(dt, randn(N * OC, g)), db0 = round_to(dt, randn(OC, g, 90.f));
      // dout's rows carry an offset so that a dropped or doubled row group shows in the sums
      for (int64_t n = 0; n < N; ++n)
        for (int64_t o = 0; o < OC; ++o) dout[n * OC + o] += (n % 7) * 0.25f;
      dout = round_to(dt, dout);
      Tensor tx = env->upload(dt, {B, T, C}, x), tw = env->upload(dt, {OC, C}, w);
      Tensor tdout = env->upload(dt, {B, T, OC}, dout), tdw = env->tensor(dt, {OC, C});
      Tensor tdb = env->upload(dt, {OC}, db0);
      env->be().zero(tdw);
      env->be().matmul_backward(Tensor(), tdw, tdb, tdout, tx, tw);
      std::vector<double> rdb(db0.begin(), db0.end());
      for (int64_t n = 0; n < N; ++n)
        for (int64_t o = 0; o < OC; ++o) rdb[o] += dout[n * OC + o];
      const auto db1 = env->get(tdb);
      EXPECT_LT(rel_err(db1, rdb), tol(dt, 1e-6));
      env->put(tdb, db0);
      env->be().matmul_backward(Tensor(), tdw, tdb, tdout, tx, tw);
      EXPECT_EQ(env->get(tdb), db1);
    }
  }
}

}  // namespace ft::gputest
