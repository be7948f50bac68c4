// GPU window ops (CDEIT's stages) and the CDEIT model on CUDA: the op table's window cases in
// f32 and bf16 against the CPU reference, exact permutation round trips across dtypes
// (partition/reverse with a shift, merge/split), and one CDEIT training step and evaluation
// on CUDA (fp32) tracking the CPU (loss and every gradient).
#include <cstdio>

#include "backend/cpu/cpu_backend.h"
#include "core/rng.h"
#include "gpu_test_util.h"
#include "models/cdeit.h"
#include "ops/op_table.h"
#include "train/runtime.h"

namespace ft::gputest {

namespace {

void expect_ok(const ops::Result& r) {
  for (const auto& n : r.notes) std::printf("  %s\n", n.c_str());
  for (const auto& f : r.failures) ADD_FAILURE() << f;
}

}  // namespace

TEST(GPU_WindowOps, TableCasesMatchCpu) {
  GPU_SKIP_IF_NONE();
  for (const char* op : {"window_partition_fwd", "window_partition_bwd", "window_reverse_fwd", "window_reverse_bwd",
                         "patch_merge_fwd", "patch_merge_bwd", "upsample_nearest_fwd", "upsample_nearest_bwd"}) {
    const ops::OpCase* c = ops::find_op(op);
    ASSERT_NE(c, nullptr) << op;
    for (Precision p : {Precision::fp32, Precision::bf16}) expect_ok(ops::run_test(*c, DeviceKind::cuda, p));
  }
}

TEST(GPU_WindowOps, PermutationsRoundTripExactly) {
  GPU_SKIP_IF_NONE();
  GpuEnv env(OpDims{2, 64, 64, 2, 64, 64});
  const int64_t B = 2, H = 16, W = 8, C = 12, w = 4, s = 2;
  std::vector<float> v(static_cast<size_t>(B * H * W * C));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(static_cast<int>(i % 251) - 125);  // bf16-exact
  for (DType t : kDtypes) {
    Tensor x = env.upload(t, {B, H * W, C}, v);
    Tensor win = env.tensor(t, {B * (H / w) * (W / w), w * w, C}), back = env.tensor(t, {B, H * W, C});
    env.poison(win), env.poison(back);
    env.be().window_partition(win, x, H, W, w, s);
    env.be().window_reverse(back, win, H, W, w, s);
    EXPECT_EQ(env.get(back), v) << dtype_name(t);
    Tensor m = env.tensor(t, {B, H * W / 4, 4 * C});
    env.poison(m), env.poison(back);
    env.be().patch_merge(m, x, H, W);
    env.be().patch_split(back, m, H, W);
    EXPECT_EQ(env.get(back), v) << dtype_name(t);
  }
}

// One training step and an evaluation on CUDA in precision p (silu(fch) kept in `kept` blocks)
// against the CPU in fp32.
static void cdeit_step_tracks_cpu(Precision p, double loss_tol, double grad_tol, int kept = 0) {
  CDEITConfig c;
  c.image = 16, c.patch = 2, c.heads = 2, c.depths = {2, 1}, c.widths = {64, 64}, c.windows = {4, 0};
  c.shift = 1, c.mlp_ratio = 2, c.freq_dim = 32;
  const int64_t B = 2;
  Rng rng(5);
  std::vector<float> image(static_cast<size_t>(B * c.image_elems())), cond(static_cast<size_t>(B * c.cond_elems()));
  for (float& x : image) x = 2.0f * rng.uniform() - 1.0f;
  for (float& x : cond) x = static_cast<float>(rng.normal());
  std::vector<int32_t> t = {17, 900}, keys = {3, -7};
  Batch batch;
  batch.size = B;
  batch.fields.push_back(BatchField{FieldSpec{"image", DType::f32, c.image_elems()}, image.data()});
  batch.fields.push_back(BatchField{FieldSpec{"cond", DType::f32, c.cond_elems()}, cond.data()});
  batch.fields.push_back(BatchField{FieldSpec{"t", DType::i32, 1}, t.data()});
  batch.fields.push_back(BatchField{FieldSpec{"noise_key", DType::i32, 1}, keys.data()});
  std::vector<float> g[2];
  double loss[2], eval[2];
  for (int dev = 0; dev < 2; ++dev) {
    auto be = dev ? make_backend(DeviceKind::cuda) : make_cpu_backend();
    CDEIT m(c);
    PlanShape s;
    s.micro_batch = B;
    s.eval_batch = B;
    s.precision = dev ? p : Precision::fp32;
    s.kept_blocks = dev ? kept : 0;
    if (dev) ASSERT_EQ(m.max_kept_blocks(), 5);
    ModelRuntime rt(m, *be, s);
    std::vector<float> host(static_cast<size_t>(m.num_params()));
    m.init_params(3, host.data());
    Rng pr(4);
    for (float& x : host) x += 0.1f * static_cast<float>(pr.normal());
    rt.load_params_from_host(host.data());
    rt.zero_grads();
    loss[dev] = rt.forward_backward(batch, 0.5f);
    g[dev].resize(host.size());
    rt.copy_grads_to_host(g[dev].data());
    eval[dev] = rt.eval_loss(batch);
  }
  EXPECT_NEAR(loss[1], loss[0], loss_tol * loss[0]);
  EXPECT_NEAR(eval[1], eval[0], loss_tol * eval[0]);
  double num = 0, den = 0;
  for (size_t i = 0; i < g[0].size(); ++i) num += (g[1][i] - g[0][i]) * (g[1][i] - g[0][i]), den += g[0][i] * g[0][i];
  EXPECT_LT(std::sqrt(num / den), grad_tol);
}

TEST(GPU_Cdeit, TrainingStepTracksTheCpu) {
  GPU_SKIP_IF_NONE();
  cdeit_step_tracks_cpu(Precision::fp32, 1e-5, 1e-4);  // GPT-2's fp32 GPU test tolerances (gpt2_gpu_test.cpp)
}

TEST(GPU_Cdeit, Bf16TrainingStepTracksTheCpu) {
  GPU_SKIP_IF_NONE();
  cdeit_step_tracks_cpu(Precision::bf16, 3e-2, 6e-2);
}

// silu(fch) kept from the forward in every block (PlanShape::kept_blocks: the SiLU pass and
// product in the forward, the SiLU backward without its write of silu(fch)), against the CPU
// recomputing it.
TEST(GPU_Cdeit, KeptSiluTrainingStepTracksTheCpu) {
  GPU_SKIP_IF_NONE();
  cdeit_step_tracks_cpu(Precision::fp32, 1e-5, 1e-4, /*kept=*/5);
  cdeit_step_tracks_cpu(Precision::bf16, 3e-2, 6e-2, /*kept=*/5);
}

}  // namespace ft::gputest
