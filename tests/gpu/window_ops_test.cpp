// GPU window ops (CDEIT's stages) and the CDEIT model on CUDA: the op table's window cases in
// f32 and bf16 against the CPU reference, exact permutation round trips across dtypes
// (partition/reverse with a shift, merge/split), and one CDEIT training step and evaluation
// on CUDA (fp32) tracking the CPU (loss and every gradient), the same step's bits with and
// without dependent launch, from NaN gradients (its first micro-batch overwrites them), and with
// its inputs uploaded from page-locked memory on their own stream.
#include <cstdio>
#include <cstring>

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

// The small CDEIT of these steps: two stages, 4x4 windows with a shift.
static CDEITConfig small_cdeit() {
  CDEITConfig c;
  c.image = 16, c.patch = 2, c.heads = 2, c.depths = {2, 1}, c.widths = {64, 64}, c.windows = {4, 0};
  c.shift = 1, c.mlp_ratio = 2, c.freq_dim = 32;
  return c;
}

// A batch of B samples over the caller's fields (B images, B condition maps, B timesteps and
// noise keys).
static Batch cdeit_batch(const CDEITConfig& c, int64_t B, float* image, float* cond, int32_t* t, int32_t* keys) {
  Batch batch;
  batch.size = B;
  batch.fields.push_back(BatchField{FieldSpec{"image", DType::f32, c.image_elems()}, image});
  batch.fields.push_back(BatchField{FieldSpec{"cond", DType::f32, c.cond_elems()}, cond});
  batch.fields.push_back(BatchField{FieldSpec{"t", DType::i32, 1}, t});
  batch.fields.push_back(BatchField{FieldSpec{"noise_key", DType::i32, 1}, keys});
  return batch;
}

// m's initial parameters perturbed away from adaLN-Zero's zeros, into rt; returns their count.
static size_t load_perturbed_params(ModelRuntime& rt, const CDEIT& m) {
  std::vector<float> host(static_cast<size_t>(m.num_params()));
  m.init_params(3, host.data());
  Rng pr(4);
  for (float& x : host) x += 0.1f * static_cast<float>(pr.normal());
  rt.load_params_from_host(host.data());
  return host.size();
}

// One training step and an evaluation of a small CDEIT (silu(fch) kept in `kept` blocks: none
// or all five) on a
// backend: the loss, the evaluation loss and every gradient.
struct CdeitStep {
  double loss = 0, eval = 0;
  std::vector<float> grads;
  std::vector<float> grads_from_nan;  // again_from_nan: the same step's, its gradients NaN before
};
// again_from_nan: then every gradient byte set to 0xff (NaN) and the same step again: the
// runtime zeroes CDEIT's gradients only once (Model::overwrites_every_grad), so its first
// micro-batch must overwrite each one.
static CdeitStep cdeit_step(Backend& be, Precision p, int kept, bool again_from_nan = false) {
  const CDEITConfig c = small_cdeit();
  const int64_t B = 2;
  Rng rng(5);
  std::vector<float> image(static_cast<size_t>(B * c.image_elems())), cond(static_cast<size_t>(B * c.cond_elems()));
  for (float& x : image) x = 2.0f * rng.uniform() - 1.0f;
  for (float& x : cond) x = static_cast<float>(rng.normal());
  std::vector<int32_t> t = {17, 900}, keys = {3, -7};
  const Batch batch = cdeit_batch(c, B, image.data(), cond.data(), t.data(), keys.data());
  CDEIT m(c);
  PlanShape s;
  s.micro_batch = B;
  s.eval_batch = B;
  s.precision = p;
  s.keep_level = kept == 0 ? 0 : m.max_keep_level();  // none, or every block
  EXPECT_EQ(m.kept_blocks(s.keep_level), kept);
  ModelRuntime rt(m, be, s);
  const size_t P = load_perturbed_params(rt, m);
  rt.zero_grads();
  CdeitStep r;
  r.loss = rt.forward_backward(batch, 0.5f);
  r.grads.resize(P);
  rt.copy_grads_to_host(r.grads.data());
  if (again_from_nan) {
    const Tensor g = rt.grads();
    const std::vector<unsigned char> nan(g.bytes(), 0xff);
    be.copy_to_device(g.data, nan.data(), nan.size());
    rt.zero_grads();
    rt.forward_backward(batch, 0.5f);
    r.grads_from_nan.resize(P);
    rt.copy_grads_to_host(r.grads_from_nan.data());
  }
  r.eval = rt.eval_loss(batch);
  return r;
}

// The step on CUDA in precision p against the CPU in fp32.
static void cdeit_step_tracks_cpu(Precision p, double loss_tol, double grad_tol, int kept = 0) {
  auto cpu = make_cpu_backend();
  auto gpu = make_backend(DeviceKind::cuda);
  const CdeitStep a = cdeit_step(*cpu, Precision::fp32, 0), b = cdeit_step(*gpu, p, kept);
  EXPECT_NEAR(b.loss, a.loss, loss_tol * a.loss);
  EXPECT_NEAR(b.eval, a.eval, loss_tol * a.eval);
  double num = 0, den = 0;
  for (size_t i = 0; i < a.grads.size(); ++i)
    num += (b.grads[i] - a.grads[i]) * (b.grads[i] - a.grads[i]), den += a.grads[i] * a.grads[i];
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

// silu(fch) kept from the forward in every block (PlanShape::keep_level's highest: the SiLU
// pass and product in the forward, the SiLU backward without its write of silu(fch)), against the CPU
// recomputing it.
TEST(GPU_Cdeit, KeptSiluTrainingStepTracksTheCpu) {
  GPU_SKIP_IF_NONE();
  cdeit_step_tracks_cpu(Precision::fp32, 1e-5, 1e-4, /*kept=*/5);
  cdeit_step_tracks_cpu(Precision::bf16, 3e-2, 6e-2, /*kept=*/5);
}

// FT_DEPENDENT_LAUNCH=1 lets a kernel start behind the one before it, each waiting at its first
// statement for that one's writes; the arithmetic is the plain launch's, so with the
// deterministic switches (FT_ATTENTION=fittrain, FT_MATMUL_AUTOTUNE=0) the bits must be the
// same. A kernel launched that way without its wait would read (or overwrite) its input while
// the kernel before it is still writing (reading) it.
TEST(GPU_Cdeit, DependentLaunchGivesTheSameBits) {
  GPU_SKIP_IF_NONE();
  ScopedEnv attention("FT_ATTENTION", "fittrain"), autotune("FT_MATMUL_AUTOTUNE", "0");
  for (int kept : {0, 5}) {
    CdeitStep r[2];
    for (int dl = 0; dl < 2; ++dl) {
      ScopedEnv e("FT_DEPENDENT_LAUNCH", dl ? "1" : "0");
      auto be = make_backend(DeviceKind::cuda);
      r[dl] = cdeit_step(*be, Precision::bf16, kept);
    }
    EXPECT_EQ(r[0].loss, r[1].loss) << "kept " << kept;
    EXPECT_EQ(r[0].eval, r[1].eval) << "kept " << kept;
    ASSERT_EQ(r[0].grads.size(), r[1].grads.size());
    EXPECT_EQ(0, std::memcmp(r[0].grads.data(), r[1].grads.data(), r[0].grads.size() * sizeof(float)))
        << "kept " << kept;
  }
}

// Every fused CUDA path of the backward (bias sums folded into SiLU, norm and gated-residual
// kernels, cuBLASLt with beta 0) overwrites on a step's first micro-batch: the same bits from
// NaN gradients as from the step before, with 0 and every block's silu kept.
TEST(GPU_Cdeit, FirstMicroBatchOverwritesEveryGradient) {
  GPU_SKIP_IF_NONE();
  ScopedEnv attention("FT_ATTENTION", "fittrain"), autotune("FT_MATMUL_AUTOTUNE", "0");
  auto be = make_backend(DeviceKind::cuda);
  for (int kept : {0, 5}) {
    const CdeitStep r = cdeit_step(*be, Precision::bf16, kept, /*again_from_nan=*/true);
    ASSERT_EQ(r.grads.size(), r.grads_from_nan.size());
    EXPECT_EQ(0, std::memcmp(r.grads.data(), r.grads_from_nan.data(), r.grads.size() * sizeof(float)))
        << "kept " << kept;
  }
}

// A micro-batch's image and condition map from upload sources (Backend::alloc_upload_source,
// where the trainer's loader puts a batch) go up on their own stream (InputUploads), behind
// only the previous micro-batch's last read of them; from ordinary memory, on the compute
// stream. Two micro-batches (the second accumulating, its upload queued behind the first's
// backward), then a second step: the same losses and gradient bits either way.
TEST(GPU_Cdeit, InputsUploadedOnTheirOwnStreamGiveTheSameBits) {
  GPU_SKIP_IF_NONE();
  ScopedEnv attention("FT_ATTENTION", "fittrain"), autotune("FT_MATMUL_AUTOTUNE", "0");
  const CDEITConfig c = small_cdeit();
  const int64_t B = 2, IE = B * c.image_elems(), CE = B * c.cond_elems();
  auto be = make_backend(DeviceKind::cuda);
  std::vector<float> grads[2];
  std::vector<double> losses[2];
  for (int pinned = 0; pinned < 2; ++pinned) {
    CDEIT m(c);
    PlanShape s;
    s.micro_batch = B;
    s.eval_batch = B;
    s.precision = Precision::bf16;
    ModelRuntime rt(m, *be, s);
    const size_t P = load_perturbed_params(rt, m);
    // three micro-batches' fields, each in its own block (upload sources or ordinary memory)
    std::vector<std::vector<float>> plain(3);
    std::vector<float*> image(3), cond(3);
    for (int k = 0; k < 3; ++k) {
      const size_t bytes = static_cast<size_t>(IE + CE) * sizeof(float);
      float* at = nullptr;
      if (pinned) {
        at = static_cast<float*>(be->alloc_upload_source(bytes));
        ASSERT_NE(at, nullptr) << "no page-locked memory";
      } else {
        plain[static_cast<size_t>(k)].resize(static_cast<size_t>(IE + CE));
        at = plain[static_cast<size_t>(k)].data();
      }
      Rng rng(50 + static_cast<uint64_t>(k));
      for (int64_t i = 0; i < IE; ++i) at[i] = 2.0f * rng.uniform() - 1.0f;
      for (int64_t i = IE; i < IE + CE; ++i) at[i] = static_cast<float>(rng.normal());
      image[static_cast<size_t>(k)] = at, cond[static_cast<size_t>(k)] = at + IE;
    }
    std::vector<int32_t> t = {17, 900}, keys = {3, -7};
    auto batch = [&](int k) {
      return cdeit_batch(c, B, image[static_cast<size_t>(k)], cond[static_cast<size_t>(k)], t.data(), keys.data());
    };
    rt.zero_grads();
    losses[pinned].push_back(rt.forward_backward(batch(0), 0.25f));
    losses[pinned].push_back(rt.forward_backward(batch(1), 0.25f));
    rt.zero_grads();
    losses[pinned].push_back(rt.forward_backward(batch(2), 0.25f));
    grads[pinned].resize(P);
    rt.copy_grads_to_host(grads[pinned].data());
    if (pinned)
      for (float* p : image) be->free_upload_source(p);
  }
  EXPECT_EQ(losses[0], losses[1]);
  ASSERT_EQ(grads[0].size(), grads[1].size());
  EXPECT_EQ(0, std::memcmp(grads[0].data(), grads[1].data(), grads[0].size() * sizeof(float)));
}

}  // namespace ft::gputest
