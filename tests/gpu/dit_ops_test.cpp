// GPU SiLU, adaLN modulation and gated residual (forward and backward) vs double-precision
// CPU references, for every storage type, with C a multiple of the 16-byte pack (vector path)
// and not (element path); backward sums must be deterministic (reruns bit-equal).
#include "gpu_test_util.h"

namespace ft::gputest {

TEST(GPU_DitOps, SiluMatchesCpu) {
  GPU_SKIP_IF_NONE();
  GpuEnv env({1, 1, 64, 1, 64, 64});
  for (DType dt : kDtypes)
    for (int64_t n : {int64_t(4096), int64_t(1003)}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " n=" + std::to_string(n));
      std::mt19937 g(7 + n);
      auto x = round_to(dt, randn(n, g, 3.f)), dout = round_to(dt, randn(n, g));
      Tensor tx = env.upload(dt, {n}, x), tdout = env.upload(dt, {n}, dout);
      Tensor out = env.tensor(dt, {n}), dx = env.tensor(dt, {n});
      env.poison(out);
      env.poison(dx);
      env.be().silu_forward(out, tx);
      env.be().silu_backward(dx, tx, tdout);
      std::vector<double> r(n), rd(n);
      for (int64_t i = 0; i < n; ++i) {
        const double s = 1.0 / (1.0 + std::exp(-(double)x[i]));
        r[i] = x[i] * s;
        rd[i] = s * (1 + x[i] * (1 - s)) * dout[i];
      }
      EXPECT_LT(rel_err(env.get(out), r), tol(dt, 1e-5));
      EXPECT_LT(rel_err(env.get(dx), rd), tol(dt, 1e-5));
    }
}

namespace {
struct Shapes {
  int64_t B, T, C;
};
const Shapes kShapes[] = {{2, 37, 64}, {3, 9, 37}, {1, 200, 1152}};
}  // namespace

TEST(GPU_DitOps, ModulateMatchesCpu) {
  GPU_SKIP_IF_NONE();
  GpuEnv env({1, 1, 64, 1, 64, 64});
  for (DType dt : kDtypes)
    for (const auto [B, T, C] : kShapes) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " B=" + std::to_string(B) + " T=" +
                   std::to_string(T) + " C=" + std::to_string(C));
      std::mt19937 g(11 + C);
      auto x = round_to(dt, randn(B * T * C, g)), dout = round_to(dt, randn(B * T * C, g));
      auto shift = round_to(dt, randn(B * C, g)), scale = round_to(dt, randn(B * C, g, 0.5f));
      Tensor tx = env.upload(dt, {B, T, C}, x), tdout = env.upload(dt, {B, T, C}, dout);
      Tensor tsh = env.upload(dt, {B, C}, shift), tsc = env.upload(dt, {B, C}, scale);
      Tensor out = env.tensor(dt, {B, T, C}), dx = env.tensor(dt, {B, T, C});
      Tensor dsh = env.tensor(dt, {B, C}), dsc = env.tensor(dt, {B, C});
      for (Tensor t : {out, dx, dsh, dsc}) env.poison(t);
      env.be().modulate_forward(out, tx, tsh, tsc);
      env.be().modulate_backward(dx, dsh, dsc, tdout, tx, tsc);
      std::vector<double> r(B * T * C), rdx(B * T * C), rsh(B * C, 0.0), rsc(B * C, 0.0);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < T; ++t)
          for (int64_t c = 0; c < C; ++c) {
            const int64_t i = (b * T + t) * C + c, k = b * C + c;
            r[i] = (double)x[i] * (1.0 + scale[k]) + shift[k];
            rdx[i] = (double)dout[i] * (1.0 + scale[k]);
            rsh[k] += dout[i];
            rsc[k] += (double)dout[i] * x[i];
          }
      EXPECT_LT(rel_err(env.get(out), r), tol(dt, 1e-6));
      EXPECT_LT(rel_err(env.get(dx), rdx), tol(dt, 1e-6));
      EXPECT_LT(rel_err(env.get(dsh), rsh), tol(dt, 1e-5));
      EXPECT_LT(rel_err(env.get(dsc), rsc), tol(dt, 1e-5));
      const auto s1 = env.get(dsh), c1 = env.get(dsc);
      env.be().modulate_backward(dx, dsh, dsc, tdout, tx, tsc);
      EXPECT_EQ(env.get(dsh), s1);
      EXPECT_EQ(env.get(dsc), c1);
    }
}

TEST(GPU_DitOps, GatedResidualMatchesCpu) {
  GPU_SKIP_IF_NONE();
  GpuEnv env({1, 1, 64, 1, 64, 64});
  for (DType dt : kDtypes)
    for (const auto [B, T, C] : kShapes) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " B=" + std::to_string(B) + " T=" +
                   std::to_string(T) + " C=" + std::to_string(C));
      std::mt19937 g(13 + C);
      auto res = round_to(dt, randn(B * T * C, g)), y = round_to(dt, randn(B * T * C, g));
      auto dout = round_to(dt, randn(B * T * C, g)), gate = round_to(dt, randn(B * C, g));
      Tensor tres = env.upload(dt, {B, T, C}, res), ty = env.upload(dt, {B, T, C}, y);
      Tensor tdout = env.upload(dt, {B, T, C}, dout), tgate = env.upload(dt, {B, C}, gate);
      Tensor out = env.tensor(dt, {B, T, C}), dy = env.tensor(dt, {B, T, C});
      Tensor dgate = env.tensor(dt, {B, C});
      for (Tensor t : {out, dy, dgate}) env.poison(t);
      env.be().gated_residual_forward(out, tres, ty, tgate);
      env.be().gated_residual_backward(dy, dgate, tdout, ty, tgate);
      std::vector<double> r(B * T * C), rdy(B * T * C), rdg(B * C, 0.0);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < T; ++t)
          for (int64_t c = 0; c < C; ++c) {
            const int64_t i = (b * T + t) * C + c, k = b * C + c;
            r[i] = (double)res[i] + (double)gate[k] * y[i];
            rdy[i] = (double)gate[k] * dout[i];
            rdg[k] += (double)dout[i] * y[i];
          }
      EXPECT_LT(rel_err(env.get(out), r), tol(dt, 1e-6));
      EXPECT_LT(rel_err(env.get(dy), rdy), tol(dt, 1e-6));
      EXPECT_LT(rel_err(env.get(dgate), rdg), tol(dt, 1e-5));
      const auto g1 = env.get(dgate);
      env.be().gated_residual_backward(dy, dgate, tdout, ty, tgate);
      EXPECT_EQ(env.get(dgate), g1);
      // in place: out == res (the residual stream updated where it lies)
      env.be().gated_residual_forward(tres, tres, ty, tgate);
      EXPECT_LT(rel_err(env.get(tres), r), tol(dt, 1e-6));
    }
}

}  // namespace ft::gputest
