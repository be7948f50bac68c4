// GPU fused causal attention forward/backward vs a naive double-precision CPU reference
// (full softmax matrix), at sequence lengths that are and are not multiples of the tile.
#include "gpu_test_util.h"

namespace ft::gputest {

namespace {

struct AttnRef {
  std::vector<double> out, dqkv;
};

AttnRef attention_ref(const std::vector<float>& qkv, const std::vector<float>& dout, int64_t B,
                      int64_t T, int64_t NH, int64_t HS) {
  const int64_t C = NH * HS;
  AttnRef r{std::vector<double>(B * T * C, 0.0), std::vector<double>(B * T * 3 * C, 0.0)};
  const double scale = 1.0 / std::sqrt((double)HS);
  auto at = [&](int64_t b, int64_t t, int part, int64_t h) { return (b * T + t) * 3 * C + part * C + h * HS; };
  std::vector<double> p(T), dp(T);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h)
      for (int64_t i = 0; i < T; ++i) {
        const float* q = &qkv[at(b, i, 0, h)];
        double mx = -1e300;
        for (int64_t j = 0; j <= i; ++j) {
          double s = 0;
          for (int64_t d = 0; d < HS; ++d) s += (double)q[d] * qkv[at(b, j, 1, h) + d];
          p[j] = s * scale;
          mx = std::max(mx, p[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j <= i; ++j) sum += (p[j] = std::exp(p[j] - mx));
        for (int64_t j = 0; j <= i; ++j) p[j] /= sum;
        const float* dO = &dout[(b * T + i) * C + h * HS];
        double pdp = 0;
        for (int64_t j = 0; j <= i; ++j) {
          double s = 0;
          for (int64_t d = 0; d < HS; ++d) {
            r.out[(b * T + i) * C + h * HS + d] += p[j] * qkv[at(b, j, 2, h) + d];
            s += (double)dO[d] * qkv[at(b, j, 2, h) + d];
          }
          dp[j] = s;
          pdp += p[j] * s;
        }
        for (int64_t j = 0; j <= i; ++j) {
          double ds = p[j] * (dp[j] - pdp) * scale;
          for (int64_t d = 0; d < HS; ++d) {
            r.dqkv[at(b, j, 2, h) + d] += p[j] * dO[d];
            r.dqkv[at(b, i, 0, h) + d] += ds * qkv[at(b, j, 1, h) + d];
            r.dqkv[at(b, j, 1, h) + d] += ds * q[d];
          }
        }
      }
  return r;
}

// impl: FT_ATTENTION for the backend under test: "fittrain" (our kernels, all dtypes,
// deterministic backward) or "cudnn" (cuDNN's fused engines, bf16/f16 only; the backend
// fails rather than falling back, so the test checks the path it names).
void check_attention(const char* impl, int64_t B, int64_t T, int64_t NH, int64_t HS,
                     uint32_t seed) {
  const int64_t C = NH * HS;
  const bool cudnn = std::string(impl) == "cudnn";
  std::optional<GpuEnv> holder;
  {  // the switch is read when the backend is created
    ScopedEnv choose("FT_ATTENTION", impl);
    holder.emplace(OpDims{B, T, C, NH, 64, 64});
  }
  GpuEnv& env = *holder;
  for (DType dt : kDtypes) {
    if (cudnn && dt == DType::f32) continue;
    SCOPED_TRACE(std::string(impl) + " " + dtype_name(dt) + " T=" + std::to_string(T) +
                 " HS=" + std::to_string(HS));
    std::mt19937 g(seed);
    auto qkv = round_to(dt, randn(B * T * 3 * C, g));
    auto dout = round_to(dt, randn(B * T * C, g));
    Tensor tqkv = env.upload(dt, {B, T, 3 * C}, qkv), tdout = env.upload(dt, {B, T, C}, dout);
    Tensor out = env.tensor(dt, {B, T, C}), dqkv = env.tensor(dt, {B, T, 3 * C});
    OpDims d{B, T, C, NH, 64, 64};
    Tensor saved = env.tensor(DType::f32, {(int64_t)(env.be().attention_saved_bytes(d, Precision::bf16) / 4)});
    EXPECT_EQ(saved.numel(), B * NH * T);
    env.poison(out);
    env.poison(dqkv);
    env.poison(saved);
    env.be().attention_forward(out, saved, tqkv, (int)NH);
    env.be().attention_backward(dqkv, tdout, tqkv, out, saved, (int)NH);
    AttnRef ref = attention_ref(qkv, dout, B, T, NH, HS);
    EXPECT_LT(rel_err(env.get(out), ref.out), tol(dt));
    EXPECT_LT(rel_err(env.get(dqkv), ref.dqkv), tol(dt));
    // fittrain's backward is deterministic; cuDNN's accumulates dQ with atomics (a rerun
    // differs only by fp32 summation order)
    auto first = env.get(dqkv);
    env.be().attention_backward(dqkv, tdout, tqkv, out, saved, (int)NH);
    if (cudnn)
      EXPECT_LT(rel_err(env.get(dqkv), std::vector<double>(first.begin(), first.end())), tol(dt));
    else
      EXPECT_EQ(env.get(dqkv), first);
  }
}

}  // namespace

TEST(GPU_Attention, ForwardBackwardMatchCpu) {
  if (!ft::cuda_available()) GTEST_SKIP() << "no CUDA device";
  check_attention("fittrain", 2, 150, 3, 64, 11);  // partial last tile
  check_attention("fittrain", 1, 128, 2, 64, 12);  // exact tiles
  check_attention("fittrain", 2, 70, 2, 32, 13);
  check_attention("fittrain", 1, 65, 1, 128, 14);
}

// cuDNN before 9.16 runs the backward only for key lengths that are multiples of 128 (the
// backend then falls back to fittrain's kernels); these shapes run on every cuDNN 9.
TEST(GPU_Attention, CudnnMatchesCpu) {
  if (!ft::cuda_available()) GTEST_SKIP() << "no CUDA device";
#ifndef FITTRAIN_HAVE_CUDNN
  GTEST_SKIP() << "this build has no cuDNN";
#endif
  check_attention("cudnn", 2, 256, 3, 64, 21);
  check_attention("cudnn", 1, 128, 2, 32, 22);
  check_attention("cudnn", 1, 384, 1, 128, 23);
}

}  // namespace ft::gputest
