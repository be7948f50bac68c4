// GPU layernorm forward/backward vs a double-precision CPU reference.
#include <utility>

#include "gpu_test_util.h"

namespace ft::gputest {

TEST(GPU_Layernorm, ForwardBackwardMatchCpu) {
  if (!ft::cuda_available()) GTEST_SKIP() << "no CUDA device";
  // N = 77: a few partial rows per parameter; N = 3000: ~190 (more than the reduction's 32
  // row slices per block, so every slice sums several). The backward keeps rows in registers
  // up to 32 lanes x 8 packs: C = 64 leaves most lanes idle, 768 fills 3 (bf16) or 6 (fp32)
  // packs per lane, 1600 is 8 packs with the last partly idle in bf16/f16 and the loop
  // kernel in fp32, 2560 the loop kernel in every dtype.
  const std::pair<int64_t, int64_t> shapes[] = {
      {77, 64}, {77, 768}, {3000, 768}, {77, 1600}, {77, 2560}};
  for (auto [N, C] : shapes) {
    GpuEnv env({N, 1, C, 4, 64, 64});
    for (DType dt : kDtypes) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " N=" + std::to_string(N) + " C=" +
                   std::to_string(C));
      std::mt19937 g(2 + C);
      auto x = randn(N * C, g, 2.f);
      for (int64_t n = 0; n < N; ++n)
        for (int64_t c = 0; c < C; ++c) x[n * C + c] += 0.5f * n / N;  // nonzero row means
      x = round_to(dt, x);
      auto w = round_to(dt, randu(C, g, 0.5f, 1.5f)), b = round_to(dt, randn(C, g, 0.1f));
      Tensor tx = env.upload(dt, {N, C}, x), tw = env.upload(dt, {C}, w), tb = env.upload(dt, {C}, b);
      Tensor out = env.tensor(dt, {N, C}), mean = env.tensor(DType::f32, {N}),
             rstd = env.tensor(DType::f32, {N});
      env.poison(out);
      env.poison(mean);
      env.poison(rstd);
      env.be().layernorm_forward(out, mean, rstd, tx, tw, tb);
      std::vector<double> ref(N * C), rm(N), rs(N), xhat(N * C);
      for (int64_t n = 0; n < N; ++n) {
        double m = 0, v = 0;
        for (int64_t c = 0; c < C; ++c) m += x[n * C + c];
        m /= C;
        for (int64_t c = 0; c < C; ++c) v += (x[n * C + c] - m) * (x[n * C + c] - m);
        double s = 1.0 / std::sqrt(v / C + 1e-5);
        rm[n] = m;
        rs[n] = s;
        for (int64_t c = 0; c < C; ++c) {
          xhat[n * C + c] = (x[n * C + c] - m) * s;
          ref[n * C + c] = xhat[n * C + c] * w[c] + b[c];
        }
      }
      EXPECT_LT(rel_err(env.get(out), ref), tol(dt));
      EXPECT_LT(rel_err(env.get(mean), rm), 1e-5);
      EXPECT_LT(rel_err(env.get(rstd), rs), 1e-5);

      auto dout = round_to(dt, randn(N * C, g));
      auto dx0 = round_to(dt, randn(N * C, g)), dw0 = round_to(dt, randn(C, g)),
           db0 = round_to(dt, randn(C, g));
      Tensor tdout = env.upload(dt, {N, C}, dout), tdx = env.upload(dt, {N, C}, dx0),
             tdw = env.upload(dt, {C}, dw0), tdb = env.upload(dt, {C}, db0);
      env.be().layernorm_backward(tdx, tdw, tdb, tdout, tx, tw, mean, rstd);
      std::vector<double> rdx(dx0.begin(), dx0.end()), rdw(dw0.begin(), dw0.end()),
          rdb(db0.begin(), db0.end());
      for (int64_t n = 0; n < N; ++n) {
        double md = 0, mdx = 0;
        for (int64_t c = 0; c < C; ++c) {
          double dn = (double)dout[n * C + c] * w[c];
          md += dn;
          mdx += dn * xhat[n * C + c];
        }
        md /= C;
        mdx /= C;
        for (int64_t c = 0; c < C; ++c) {
          double dn = (double)dout[n * C + c] * w[c];
          rdx[n * C + c] += (dn - md - xhat[n * C + c] * mdx) * rs[n];
          rdw[c] += dout[n * C + c] * xhat[n * C + c];
          rdb[c] += dout[n * C + c];
        }
      }
      EXPECT_LT(rel_err(env.get(tdx), rdx), tol(dt));
      EXPECT_LT(rel_err(env.get(tdw), rdw), tol(dt));
      EXPECT_LT(rel_err(env.get(tdb), rdb), tol(dt));

      // deterministic dw, db
      auto first = env.get(tdw), first_b = env.get(tdb);
      env.put(tdw, dw0);
      env.put(tdb, db0);
      env.be().layernorm_backward(tdx, tdw, tdb, tdout, tx, tw, mean, rstd);
      EXPECT_EQ(env.get(tdw), first);
      EXPECT_EQ(env.get(tdb), first_b);
    }
  }
}

}  // namespace ft::gputest
