// GPT-2 end to end on the CUDA backend against the CPU backend: the same init and batches,
// a few training steps (forward + backward + grad norm + AdamW) and an evaluation pass.
// fp32 on the GPU must track the CPU closely; bf16 and fp16 (loss-scaled) within
// mixed-precision tolerance. Also
// checks that the plan is exact on the device (arena high-water == planned bytes).
#include <cstring>

#include "backend/cpu/cpu_backend.h"
#include "core/arena.h"
#include "core/rng.h"
#include "gpu_test_util.h"
#include "models/gpt2_harness.h"

namespace ft::gputest {

namespace {

struct ModelRun {
  std::unique_ptr<Backend> be;
  std::unique_ptr<testing::GPT2Harness> model;
  ModelRun(std::unique_ptr<Backend> b, const GPT2Config& c, int64_t mb, Precision p, Recompute rc)
      : be(std::move(b)) {
    PlanShape s;
    s.micro_batch = mb;
    s.eval_batch = mb;
    s.precision = p;
    s.recompute = rc;
    model = std::make_unique<testing::GPT2Harness>(*be, c, s, 42);
  }
  std::vector<float> grads() { return model->grads(); }
  std::vector<float> params() { return model->params(); }
};

// loss_scale != 1 runs the GPU model the way the trainer runs fp16: the loss gradient is
// multiplied by the scale and AdamW's grad_scale undoes it (the CPU reference is unscaled).
void check_against_cpu(Precision p, Recompute rc, double loss_tol, double grad_tol,
                       double param_tol, float loss_scale = 1.f) {
  const GPT2Config c{2, 4, 256, 96, 300};  // head size 64: the tensor-core attention path
  const int64_t mb = 2, n = mb * c.seq_len;
  ModelRun cpu(make_cpu_backend(), c, mb, Precision::fp32, Recompute::none);
  ModelRun gpu(make_cuda_backend(), c, mb, p, rc);
  Rng rng(17);
  std::vector<int32_t> tok(n), tgt(n);
  for (int step = 1; step <= 3; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    for (auto& x : tok) x = static_cast<int32_t>(rng.next_u64() % c.vocab_size);
    for (auto& x : tgt) x = static_cast<int32_t>(rng.next_u64() % c.vocab_size);
    tgt[5] = -1;  // an ignored position
    double l[2];
    double ss[2];
    ModelRun* runs[2] = {&cpu, &gpu};
    for (int k = 0; k < 2; ++k) {
      const float scale = k == 1 ? loss_scale : 1.f;
      runs[k]->model->zero_grads();
      l[k] = runs[k]->model->forward_backward(tok.data(), tgt.data(), mb, scale / (n - 1));
      ss[k] = runs[k]->model->grad_sum_squares() / ((double)scale * scale);
    }
    ASSERT_TRUE(std::isfinite(ss[1])) << "gradients overflowed at loss scale " << loss_scale;
    EXPECT_NEAR(l[1], l[0], loss_tol * std::fabs(l[0]));
    EXPECT_NEAR(ss[1], ss[0], 4 * grad_tol * ss[0]);
    if (step == 1) {
      auto g = gpu.grads();
      for (float& x : g) x /= loss_scale;
      EXPECT_LT(rel_err(g, cpu.grads()), grad_tol);
    }
    AdamWStep st;
    st.lr = 1e-3f;
    st.t = step;
    cpu.model->adamw_step(st);
    st.grad_scale = 1.f / loss_scale;
    gpu.model->adamw_step(st);
  }
  EXPECT_LT(rel_err(gpu.params(), cpu.params()), param_tol);
  double e0 = cpu.model->eval_loss(tok.data(), tgt.data(), mb);
  double e1 = gpu.model->eval_loss(tok.data(), tgt.data(), mb);
  EXPECT_NEAR(e1, e0, loss_tol * std::fabs(e0));
  GenerateOptions go;  // generation touches the KV cache and the decode phase's buffers
  go.max_new_tokens = 2;
  gpu.model->model().generate(std::vector<std::vector<int32_t>>(mb, {1, 2}), go);
  EXPECT_EQ(gpu.model->arena().high_water_bytes(), gpu.model->plan().total_bytes);
}

}  // namespace

TEST(GPU_Gpt2, Fp32TracksCpu) {
  if (!ft::cuda_available()) GTEST_SKIP() << "no CUDA device";
  check_against_cpu(Precision::fp32, Recompute::none, 1e-5, 1e-4, 1e-4);
}

TEST(GPU_Gpt2, Bf16TracksCpu) {
  if (!ft::cuda_available()) GTEST_SKIP() << "no CUDA device";
  check_against_cpu(Precision::bf16, Recompute::none, 1e-2, 5e-2, 3e-2);
  check_against_cpu(Precision::bf16, Recompute::block, 1e-2, 5e-2, 3e-2);
}

// fp16 as the trainer runs it: dloss scaled by 1024 (without it the per-token logit gradients,
// ~p/(B*T), fall into fp16's subnormals), unscaled in AdamW's grad_scale. More mantissa than
// bf16, so tighter tolerances.
TEST(GPU_Gpt2, Fp16LossScaledTracksCpu) {
  if (!ft::cuda_available()) GTEST_SKIP() << "no CUDA device";
  check_against_cpu(Precision::fp16, Recompute::none, 5e-3, 2e-2, 1.5e-2, 1024.f);
  check_against_cpu(Precision::fp16, Recompute::block, 5e-3, 2e-2, 1.5e-2, 1024.f);
}

// What RELIABILITY.md promises: with FT_ATTENTION=fittrain and FT_MATMUL_AUTOTUNE=0 two runs
// from the same start give the same bits (every other kernel's reductions, cuBLASLt's bias
// gradient epilogues included, have a fixed order). Two training steps of two separate
// backends, with the first step's product overwriting and the second accumulating.
TEST(GPU_Gpt2, DeterministicSwitchesRepeatBitwise) {
  if (!ft::cuda_available()) GTEST_SKIP() << "no CUDA device";
  ScopedEnv attention("FT_ATTENTION", "fittrain"), autotune("FT_MATMUL_AUTOTUNE", "0");
  const GPT2Config c{2, 4, 256, 128, 300};
  const int64_t mb = 2, n = mb * c.seq_len;
  ModelRun a(make_cuda_backend(), c, mb, Precision::bf16, Recompute::none);
  ModelRun b(make_cuda_backend(), c, mb, Precision::bf16, Recompute::none);
  Rng rng(5);
  std::vector<int32_t> tok(n), tgt(n);
  for (int step = 1; step <= 2; ++step) {
    for (auto& x : tok) x = static_cast<int32_t>(rng.next_u64() % c.vocab_size);
    for (auto& x : tgt) x = static_cast<int32_t>(rng.next_u64() % c.vocab_size);
    double loss[2];
    ModelRun* runs[2] = {&a, &b};
    for (int k = 0; k < 2; ++k) {
      runs[k]->model->zero_grads();
      loss[k] = runs[k]->model->forward_backward(tok.data(), tgt.data(), mb, 1.f / n);
      loss[k] += runs[k]->model->forward_backward(tok.data(), tgt.data(), mb, 1.f / n);
      AdamWStep st;
      st.lr = 1e-3f;
      st.t = step;
      runs[k]->model->adamw_step(st);
    }
    EXPECT_EQ(loss[0], loss[1]) << "step " << step;
    auto ga = a.grads(), gb = b.grads();
    EXPECT_EQ(0, std::memcmp(ga.data(), gb.data(), ga.size() * sizeof(float))) << "step " << step;
  }
  auto pa = a.params(), pb = b.params();
  EXPECT_EQ(0, std::memcmp(pa.data(), pb.data(), pa.size() * sizeof(float)));
}

// The CUDA path's backward reports the same gradient ranges, in the same calls, as the CPU's,
// and the same from step to step (overwriting, then adding; other batches): a rank whose
// backward failed replays the last step's reports (GradReducer::drain), and the data-parallel
// tests that would show it need two GPUs.
TEST(GPU_Gpt2, GradientReportsRepeatEveryStepAndMatchTheCpu) {
  if (!ft::cuda_available()) GTEST_SKIP() << "no CUDA device";
  using Calls = std::vector<std::vector<std::pair<int64_t, int64_t>>>;
  const GPT2Config c{2, 4, 256, 96, 300};
  const int64_t mb = 2, n = mb * c.seq_len;
  for (Recompute rc : {Recompute::none, Recompute::block}) {
    SCOPED_TRACE(recompute_name(rc));
    ModelRun cpu(make_cpu_backend(), c, mb, Precision::fp32, rc);
    ModelRun gpu(make_cuda_backend(), c, mb, Precision::bf16, rc);
    Rng rng(23);
    std::vector<int32_t> tok(n), tgt(n);
    std::vector<Calls> seen[2];  // per backend, each backward's reports
    for (int micro = 0; micro < 2; ++micro) {
      for (auto& x : tok) x = static_cast<int32_t>(rng.next_u64() % c.vocab_size);
      for (auto& x : tgt) x = static_cast<int32_t>(rng.next_u64() % c.vocab_size);
      ModelRun* runs[2] = {&cpu, &gpu};
      for (int k = 0; k < 2; ++k) {
        if (micro == 0) runs[k]->model->zero_grads();
        Calls calls;
        runs[k]->model->forward_backward(tok.data(), tgt.data(), mb, 1.f / n, [&](std::span<const ParamRange> rs) {
          calls.emplace_back();
          for (const ParamRange& r : rs) calls.back().emplace_back(r.offset, r.count);
        });
        seen[k].push_back(std::move(calls));
      }
    }
    ASSERT_FALSE(seen[1][0].empty());
    EXPECT_EQ(seen[1][0], seen[1][1]) << "the GPU's reports changed from one backward to the next";
    EXPECT_EQ(seen[1][0], seen[0][0]) << "the GPU reports unlike the CPU";
  }
}

}  // namespace ft::gputest
