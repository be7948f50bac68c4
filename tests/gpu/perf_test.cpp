// GPU_Perf: one whole GPT-2 124M training step on the device (it also asserts a finite
// loss). Per-op timings at GPT-2 124M sizes are the op table's perf mode:
// `fittrain_ops --mode perf --backend cuda` (scripts/run_gpu_tests.sh runs it).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/arena.h"
#include "gpu_test_util.h"
#include "models/gpt2_harness.h"

namespace ft::gputest {

// One whole training step of GPT-2 124M (B=8, T=1024, bf16, no recompute): zero grads,
// forward + backward, grad norm, AdamW. The headline number to compare with PyTorch.
// FT_PERF_PRECISION=fp16 times fp16 instead; FT_PERF_STEPS sets the timed steps (default 5).
TEST(GPU_Perf, Gpt2SmallTrainingStep) {
  if (!ft::cuda_available()) GTEST_SKIP() << "no CUDA device";
  const GPT2Config c{12, 12, 768, 1024, 50257};
  PlanShape s;
  s.micro_batch = 8;
  s.eval_batch = 1;
  const char* pe = std::getenv("FT_PERF_PRECISION");
  s.precision = pe && std::string(pe) == "fp16" ? Precision::fp16 : Precision::bf16;
  auto be = make_cuda_backend();
  testing::GPT2Harness model(*be, c, s, 1);
  const int64_t n = s.micro_batch * c.seq_len;
  std::vector<int32_t> tok(n), tgt(n);
  std::mt19937 g(10);
  for (int64_t i = 0; i < n; ++i) {
    tok[i] = static_cast<int32_t>(g() % c.vocab_size);
    tgt[i] = static_cast<int32_t>(g() % c.vocab_size);
  }
  int step = 0;
  double loss = 0;
  auto train_step = [&] {
    model.zero_grads();
    loss = model.forward_backward(tok.data(), tgt.data(), s.micro_batch, 1.0f / n) / n;
    double norm = std::sqrt(model.grad_sum_squares());
    AdamWStep st;
    st.lr = 1e-4f;
    st.t = ++step;
    st.grad_scale = norm > 1.0 ? static_cast<float>(1.0 / norm) : 1.0f;
    model.adamw_step(st);
  };
  train_step();
  train_step();
  be->synchronize();
  const char* se = std::getenv("FT_PERF_STEPS");
  const int steps = se ? std::max(1, std::atoi(se)) : 5;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) train_step();
  be->synchronize();
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / steps;
  std::string switches;  // the backend switches this run was given, to label the number
  for (const char* name : {"FT_NO_GELU_EPILOGUE", "FT_NO_BGRAD_EPILOGUE", "FT_DGELU_BGRAD",
                           "FT_CLASSIFIER", "FT_ATTENTION", "FT_MATMUL_AUTOTUNE"})
    if (const char* v = std::getenv(name)) switches += std::string(" ") + name + "=" + v;
  std::printf("gpt2-124M step B=8 T=1024 %s%s: %.2f ms/step, %.0f tokens/s, loss %.4f, "
              "arena %.2f GiB\n",
              precision_name(s.precision), switches.c_str(), ms, n / ms * 1e3, loss,
              model.plan().total_bytes / double(1ull << 30));
  EXPECT_TRUE(std::isfinite(loss));
}

}  // namespace ft::gputest
