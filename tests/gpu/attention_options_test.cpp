// GPU attention with AttentionOptions (non-causal, per-sample lengths, both) vs a
// double-precision CPU reference, for fittrain's kernels (FT_ATTENTION=fittrain: the fp32
// CUDA-core kernels and, for bf16/f16 head size 64, the tensor-core ones) and the default
// routing (auto: cuDNN where it runs the shape, i.e. without seq_lens; fittrain's otherwise).
// Padded query rows must give exactly 0 output and 0 gradient.
#include <cuda_runtime.h>

#include "backend/cpu/cpu_backend.h"
#include "gpu_test_util.h"

namespace ft::gputest {

namespace {

struct Ref {
  std::vector<double> out, dqkv;
};

// lens empty: every sample T long.
Ref reference(const std::vector<float>& qkv, const std::vector<float>& dout, int64_t B, int64_t T,
              int64_t NH, int64_t HS, bool causal, const std::vector<int32_t>& lens) {
  const int64_t C = NH * HS;
  Ref r{std::vector<double>(B * T * C, 0.0), std::vector<double>(B * T * 3 * C, 0.0)};
  const double scale = 1.0 / std::sqrt((double)HS);
  auto at = [&](int64_t b, int64_t t, int part, int64_t h) {
    return (b * T + t) * 3 * C + part * C + h * HS;
  };
  std::vector<double> p(T), dp(T);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t len = lens.empty() ? T : lens[b];
    for (int64_t h = 0; h < NH; ++h)
      for (int64_t i = 0; i < len; ++i) {  // padded rows stay 0
        const int64_t kend = causal ? i + 1 : len;
        const float* q = &qkv[at(b, i, 0, h)];
        double mx = -1e300;
        for (int64_t j = 0; j < kend; ++j) {
          double s = 0;
          for (int64_t d = 0; d < HS; ++d) s += (double)q[d] * qkv[at(b, j, 1, h) + d];
          p[j] = s * scale;
          mx = std::max(mx, p[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j < kend; ++j) sum += (p[j] = std::exp(p[j] - mx));
        for (int64_t j = 0; j < kend; ++j) p[j] /= sum;
        const float* dO = &dout[(b * T + i) * C + h * HS];
        double pdp = 0;
        for (int64_t j = 0; j < kend; ++j) {
          double s = 0;
          for (int64_t d = 0; d < HS; ++d) {
            r.out[(b * T + i) * C + h * HS + d] += p[j] * qkv[at(b, j, 2, h) + d];
            s += (double)dO[d] * qkv[at(b, j, 2, h) + d];
          }
          dp[j] = s;
          pdp += p[j] * s;
        }
        for (int64_t j = 0; j < kend; ++j) {
          double ds = p[j] * (dp[j] - pdp) * scale;
          for (int64_t d = 0; d < HS; ++d) {
            r.dqkv[at(b, j, 2, h) + d] += p[j] * dO[d];
            r.dqkv[at(b, i, 0, h) + d] += ds * qkv[at(b, j, 1, h) + d];
            r.dqkv[at(b, j, 1, h) + d] += ds * q[d];
          }
        }
      }
  }
  return r;
}

// impl: FT_ATTENTION ("fittrain", "auto" or "cudnn"). Every dtype (cudnn: bf16/f16 only).
void check(const char* impl, int64_t B, int64_t T, int64_t NH, int64_t HS, bool causal,
           std::vector<int32_t> lens, uint32_t seed) {
  const int64_t C = NH * HS;
  const bool cudnn = std::string(impl) == "cudnn";
  std::optional<GpuEnv> holder;
  {  // the switch is read when the backend is created
    ScopedEnv choose("FT_ATTENTION", impl);
    holder.emplace(OpDims{B, T, C, NH, 64, 64});
  }
  GpuEnv& env = *holder;
  // workspace planned for exactly this attention (cuDNN's non-causal plans included)
  const std::vector<OpShape> ops{OpShape::attention(B, T, NH, HS, causal, !lens.empty())};
  for (Precision p : {Precision::bf16, Precision::fp16})
    EXPECT_EQ(env.be().unsupported(ops[0], p), "");
  const size_t ws = std::max(env.be().workspace_bytes(ops, Precision::bf16),
                             env.be().workspace_bytes(ops, Precision::fp16));
  env.be().set_workspace(env.take(ws), ws);
  AttentionOptions opt;
  opt.causal = causal;
  if (!lens.empty()) opt.seq_lens = env.upload_i32({B}, lens);
  for (DType dt : kDtypes) {
    if (cudnn && dt == DType::f32) continue;
    SCOPED_TRACE(std::string(impl) + " " + dtype_name(dt) + (causal ? " causal" : " non-causal") +
                 (lens.empty() ? "" : " seq_lens") + " T=" + std::to_string(T) +
                 " HS=" + std::to_string(HS));
    std::mt19937 g(seed);
    auto qkv = round_to(dt, randn(B * T * 3 * C, g));
    auto dout = round_to(dt, randn(B * T * C, g));
    Tensor tqkv = env.upload(dt, {B, T, 3 * C}, qkv), tdout = env.upload(dt, {B, T, C}, dout);
    Tensor out = env.tensor(dt, {B, T, C}), dqkv = env.tensor(dt, {B, T, 3 * C});
    const OpShape att = OpShape::attention(B, T, NH, HS, causal, !lens.empty());
    Tensor saved = env.tensor(
        DType::f32, {(int64_t)(env.be().attention_saved_bytes(att, Precision::bf16) / 4)});
    env.poison(out);
    env.poison(dqkv);
    env.poison(saved);
    env.be().attention_forward(out, saved, tqkv, (int)NH, opt);
    env.be().attention_backward(dqkv, tdout, tqkv, out, saved, (int)NH, opt);
    Ref ref = reference(qkv, dout, B, T, NH, HS, causal, lens);
    const std::vector<float> o = env.get(out), d = env.get(dqkv);
    EXPECT_LT(rel_err(o, ref.out), tol(dt));
    EXPECT_LT(rel_err(d, ref.dqkv), tol(dt));
    // and against the CPU backend itself (fp32), on the same rounded inputs
    auto cpu = make_cpu_backend();
    std::vector<float> ws(cpu->workspace_bytes(ops, Precision::fp32) / 4 + 1);
    cpu->set_workspace(ws.data(), ws.size() * 4);
    std::vector<float> cq = qkv, cg = dout, co(B * T * C), cd(B * T * 3 * C), catt(B * NH * T * T);
    std::vector<int32_t> cl = lens;
    AttentionOptions copt;
    copt.causal = causal;
    if (!cl.empty()) copt.seq_lens = Tensor(cl.data(), DType::i32, {B});
    Tensor cqt(cq.data(), DType::f32, {B, T, 3 * C}), cot(co.data(), DType::f32, {B, T, C});
    Tensor cat(catt.data(), DType::f32, {B, NH, T, T});
    cpu->attention_forward(cot, cat, cqt, (int)NH, copt);
    cpu->attention_backward(Tensor(cd.data(), DType::f32, {B, T, 3 * C}),
                            Tensor(cg.data(), DType::f32, {B, T, C}), cqt, cot, cat, (int)NH, copt);
    EXPECT_LT(rel_err(o, co), tol(dt));
    EXPECT_LT(rel_err(d, cd), tol(dt));
    // padded rows: exactly 0
    for (int64_t b = 0; b < B && !lens.empty(); ++b)
      for (int64_t t = lens[b]; t < T; ++t) {
        for (int64_t c = 0; c < C; ++c) ASSERT_EQ(o[(b * T + t) * C + c], 0.f) << b << "," << t;
        for (int64_t c = 0; c < 3 * C; ++c)
          ASSERT_EQ(d[(b * T + t) * 3 * C + c], 0.f) << b << "," << t;
      }
  }
}

void check_all_masks(const char* impl) {
  for (bool causal : {true, false}) {
    check(impl, 2, 150, 3, 64, causal, {}, 31);            // partial last tile
    check(impl, 2, 150, 3, 64, causal, {150, 77}, 32);     // one full, one padded
    check(impl, 3, 128, 2, 64, causal, {1, 64, 100}, 33);  // length 1, tile boundaries
    check(impl, 2, 70, 2, 32, causal, {70, 33}, 34);       // fp32-kernel head size for every dtype
    check(impl, 1, 65, 1, 128, causal, {40}, 35);
  }
}

}  // namespace

TEST(GPU_AttentionOptions, FittrainMatchesCpu) {
  GPU_SKIP_IF_NONE();
  check_all_masks("fittrain");
}

TEST(GPU_AttentionOptions, AutoMatchesCpu) {
  GPU_SKIP_IF_NONE();
  check_all_masks("auto");
}

// Non-causal through cuDNN itself (no fallback allowed). Key lengths multiples of 128 run on
// every cuDNN 9.
TEST(GPU_AttentionOptions, CudnnNonCausalMatchesCpu) {
  GPU_SKIP_IF_NONE();
#ifndef FITTRAIN_HAVE_CUDNN
  GTEST_SKIP() << "this build has no cuDNN";
#endif
  check("cudnn", 2, 256, 3, 64, false, {}, 41);
  check("cudnn", 1, 128, 2, 32, false, {}, 42);
}

// The default options run GPT-2's kernels: explicit {causal = true} gives the same bits, and
// seq_lens all equal to T (the masked kernels) agree to rounding.
TEST(GPU_AttentionOptions, DefaultIsCausalAndFullLengthsAgree) {
  GPU_SKIP_IF_NONE();
  const int64_t B = 2, T = 96, NH = 2, HS = 64, C = NH * HS;
  std::optional<GpuEnv> holder;
  {
    ScopedEnv choose("FT_ATTENTION", "fittrain");  // deterministic backward: bits comparable
    holder.emplace(OpDims{B, T, C, NH, 64, 64});
  }
  GpuEnv& env = *holder;
  for (DType dt : kDtypes) {
    SCOPED_TRACE(dtype_name(dt));
    std::mt19937 g(51);
    auto qkv = round_to(dt, randn(B * T * 3 * C, g)), dout = round_to(dt, randn(B * T * C, g));
    Tensor tqkv = env.upload(dt, {B, T, 3 * C}, qkv), tdout = env.upload(dt, {B, T, C}, dout);
    Tensor out = env.tensor(dt, {B, T, C}), dqkv = env.tensor(dt, {B, T, 3 * C});
    Tensor saved = env.tensor(DType::f32, {B * NH * T});
    env.be().attention_forward(out, saved, tqkv, (int)NH);
    env.be().attention_backward(dqkv, tdout, tqkv, out, saved, (int)NH);
    const auto o1 = env.get(out), d1 = env.get(dqkv);
    AttentionOptions causal;
    env.be().attention_forward(out, saved, tqkv, (int)NH, causal);
    env.be().attention_backward(dqkv, tdout, tqkv, out, saved, (int)NH, causal);
    EXPECT_EQ(env.get(out), o1);
    EXPECT_EQ(env.get(dqkv), d1);
    AttentionOptions full;
    full.seq_lens = env.upload_i32({B}, {(int32_t)T, (int32_t)T});
    env.be().attention_forward(out, saved, tqkv, (int)NH, full);
    env.be().attention_backward(dqkv, tdout, tqkv, out, saved, (int)NH, full);
    EXPECT_LT(rel_err(env.get(out), o1), 1e-6);
    EXPECT_LT(rel_err(env.get(dqkv), d1), 1e-6);
  }
}

}  // namespace ft::gputest
