// GPU attention: the default AttentionOptions are GPT-2's path, and lengths all equal to T
// agree with none. Everything else about the options (non-causal, per-sample lengths, padded
// rows exactly 0, every route: default, FT_ATTENTION=fittrain, cuDNN non-causal) is the op
// table's: GPU_OpTable.attention_{fwd,bwd}_* and tests/gpu/op_paths_test.cpp's GPU_Attention.*.
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

}  // namespace ft::gputest
