// GPU attention: the default AttentionOptions are GPT-2's path, and lengths all equal to T
// agree with none; packed samples (positions) each give what they give alone, and ignore
// the other samples' tokens bit for bit. Everything else about the options (non-causal,
// per-sample lengths, padded rows exactly 0, packed rows against the CPU reference, every
// route: default, FT_ATTENTION=fittrain, cuDNN non-causal) is the op table's:
// GPU_OpTable.attention_{fwd,bwd}_* and tests/gpu/op_paths_test.cpp's GPU_Attention.*.
#include <algorithm>

#include "core/error.h"
#include "gpu_test_util.h"

namespace ft::gputest {

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

namespace {
// Per-token positions of rows cut into samples of the given lengths (each row's sum is T).
std::vector<int32_t> packed_positions(const std::vector<std::vector<int64_t>>& rows) {
  std::vector<int32_t> pos;
  for (const auto& lens : rows)
    for (int64_t len : lens)
      for (int64_t i = 0; i < len; ++i) pos.push_back(static_cast<int32_t>(i));
  return pos;
}
std::vector<float> slice(const std::vector<float>& v, int64_t first, int64_t n) {
  return std::vector<float>(v.begin() + first, v.begin() + first + n);
}
}  // namespace

// Two rows of T = 200 packing samples that start and end inside tiles, a one-token sample and
// samples longer than a 128-row block: each sample's output and gradients equal the same
// sample run alone (one unpacked row of its length) to rounding; changing every token of the
// first sample leaves every other sample's output and gradients bitwise unchanged (their
// kernels see its keys only as masked zeros); positions 0..T-1 agree with no positions. fp32
// runs the CUDA-core kernels, bf16/f16 the tensor-core ones (head size 64).
TEST(GPU_AttentionOptions, PackedSamplesMatchEachSampleAloneAndIgnoreTheOthers) {
  GPU_SKIP_IF_NONE();
  const int64_t B = 2, T = 200, NH = 2, HS = 64, C = NH * HS;
  const std::vector<std::vector<int64_t>> rows = {{70, 1, 129}, {130, 3, 67}};
  std::optional<GpuEnv> holder;
  {
    ScopedEnv choose("FT_ATTENTION", "fittrain");  // the samples alone: deterministic too
    holder.emplace(OpDims{B, T, C, NH, 64, 64});
  }
  GpuEnv& env = *holder;
  AttentionOptions packed;
  packed.positions = env.upload_i32({B, T}, packed_positions(rows));
  const double tol[3] = {1e-5, 2e-2, 1e-2};  // fp32, bf16, f16: both sides round
  for (size_t di = 0; di < 3; ++di) {
    const DType dt = kDtypes[di];
    SCOPED_TRACE(dtype_name(dt));
    std::mt19937 g(77);
    auto qkv = round_to(dt, randn(B * T * 3 * C, g)), dout = round_to(dt, randn(B * T * C, g));
    Tensor tqkv = env.upload(dt, {B, T, 3 * C}, qkv), tdout = env.upload(dt, {B, T, C}, dout);
    Tensor out = env.tensor(dt, {B, T, C}), dqkv = env.tensor(dt, {B, T, 3 * C});
    Tensor saved = env.tensor(DType::f32, {B * NH * T});
    env.poison(out);
    env.poison(dqkv);
    env.be().attention_forward(out, saved, tqkv, (int)NH, packed);
    env.be().attention_backward(dqkv, tdout, tqkv, out, saved, (int)NH, packed);
    const auto o1 = env.get(out), d1 = env.get(dqkv);

    for (int64_t b = 0; b < B; ++b) {
      int64_t start = 0;
      for (int64_t len : rows[b]) {
        SCOPED_TRACE(::testing::Message() << "row " << b << " sample at " << start << " of " << len);
        const int64_t r0 = b * T + start;
        Tensor sq = env.upload(dt, {1, len, 3 * C}, slice(qkv, r0 * 3 * C, len * 3 * C));
        Tensor sd = env.upload(dt, {1, len, C}, slice(dout, r0 * C, len * C));
        Tensor so = env.tensor(dt, {1, len, C}), sdq = env.tensor(dt, {1, len, 3 * C});
        Tensor ss = env.tensor(DType::f32, {NH * len});
        env.be().attention_forward(so, ss, sq, (int)NH);
        env.be().attention_backward(sdq, sd, sq, so, ss, (int)NH);
        EXPECT_LT(rel_err(slice(o1, r0 * C, len * C), env.get(so)), tol[di]);
        EXPECT_LT(rel_err(slice(d1, r0 * 3 * C, len * 3 * C), env.get(sdq)), tol[di]);
        start += len;
      }
    }

    // every token (q, k and v) of row 0's first sample changed
    auto qkv2 = qkv;
    std::mt19937 g2(78);
    const auto other = round_to(dt, randn(rows[0][0] * 3 * C, g2, 3.f));
    std::copy(other.begin(), other.end(), qkv2.begin());
    env.put(tqkv, qkv2);
    env.be().attention_forward(out, saved, tqkv, (int)NH, packed);
    env.be().attention_backward(dqkv, tdout, tqkv, out, saved, (int)NH, packed);
    const auto o2 = env.get(out), d2 = env.get(dqkv);
    const int64_t a = rows[0][0];  // row 0's tokens [0, a) are sample A's
    EXPECT_NE(slice(o2, 0, a * C), slice(o1, 0, a * C));
    EXPECT_EQ(slice(o2, a * C, (B * T - a) * C), slice(o1, a * C, (B * T - a) * C));
    EXPECT_EQ(slice(d2, a * 3 * C, (B * T - a) * 3 * C), slice(d1, a * 3 * C, (B * T - a) * 3 * C));

    // one sample a row (positions 0..T-1): the unpacked causal kernels' results
    env.put(tqkv, qkv);
    AttentionOptions whole;
    whole.positions = env.upload_i32({B, T}, packed_positions({{T}, {T}}));
    env.be().attention_forward(out, saved, tqkv, (int)NH);
    env.be().attention_backward(dqkv, tdout, tqkv, out, saved, (int)NH);
    const auto o3 = env.get(out), d3 = env.get(dqkv);
    env.be().attention_forward(out, saved, tqkv, (int)NH, whole);
    env.be().attention_backward(dqkv, tdout, tqkv, out, saved, (int)NH, whole);
    EXPECT_LT(rel_err(env.get(out), o3), 1e-6);
    EXPECT_LT(rel_err(env.get(dqkv), d3), 1e-6);
  }
}

// Packed samples are causal only and exclude seq_lens, as on the CPU.
TEST(GPU_AttentionOptions, RefusesNonCausalOrPaddedPackedRows) {
  GPU_SKIP_IF_NONE();
  const int64_t B = 1, T = 8, NH = 1, C = 64;
  GpuEnv env(OpDims{B, T, C, NH, 64, 64});
  Tensor qkv = env.tensor(DType::bf16, {B, T, 3 * C}), out = env.tensor(DType::bf16, {B, T, C});
  Tensor saved = env.tensor(DType::f32, {B * NH * T});
  AttentionOptions o;
  o.positions = env.upload_i32({B, T}, packed_positions({{5, 3}}));
  o.causal = false;
  EXPECT_THROW(env.be().attention_forward(out, saved, qkv, (int)NH, o), InternalError);
  o.causal = true;
  o.seq_lens = env.upload_i32({B}, {(int32_t)T});
  EXPECT_THROW(env.be().attention_forward(out, saved, qkv, (int)NH, o), InternalError);
}

}  // namespace ft::gputest
