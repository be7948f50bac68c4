// GPU_Perf: times the main ops at GPT-2 124M sizes (B=8, T=1024, C=768, NH=12, Vp=50304,
// bf16) and prints ms per call with achieved TFLOP/s or GB/s. No assertions: it is the
// number sheet for kernel work (median of 3 batches of 10 calls after a warm-up).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/arena.h"
#include "gpu_test_util.h"
#include "models/gpt2_harness.h"

namespace ft::gputest {

namespace {
template <class F> double time_ms(Backend& be, F&& f) {
  f();
  be.synchronize();
  double best[3];
  for (double& b : best) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 10; ++i) f();
    be.synchronize();
    b = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / 10;
  }
  std::sort(best, best + 3);
  return best[1];
}
}  // namespace

// fittrain's tensor-core kernels vs cuDNN's fused engines at GPT-2 124M shapes (bf16).
TEST(GPU_Perf, AttentionImplementations) {
  if (!ft::cuda_available()) GTEST_SKIP() << "no CUDA device";
  const int64_t T = 1024, C = 768, NH = 12;
  for (const char* impl : {"fittrain", "cudnn"}) {
    for (int64_t B : {8, 16}) {
      std::optional<GpuEnv> holder;
      {  // the switch is read when the backend is created
        ScopedEnv choose("FT_ATTENTION", impl);
        holder.emplace(OpDims{B, T, C, NH, 64, 64}, 1ull << 30);
      }
      GpuEnv& env = *holder;
      Backend& be = env.be();
      const DType dt = DType::bf16;
      std::mt19937 g(9);
      Tensor qkv = env.tensor(dt, {B, T, 3 * C}), att = env.tensor(dt, {B, T, C}),
             datt = env.tensor(dt, {B, T, C}), dqkv = env.tensor(dt, {B, T, 3 * C});
      Tensor lse = env.tensor(DType::f32, {B * NH * T});
      env.put(qkv, randn(qkv.numel(), g));
      env.put(datt, randn(datt.numel(), g));
      const double flops = 4.0 * B * NH * T * T * (C / NH) / 2;
      double f = time_ms(be, [&] { be.attention_forward(att, lse, qkv, NH); });
      double b = time_ms(be, [&] { be.attention_backward(dqkv, datt, qkv, att, lse, NH); });
      std::printf("attention %-8s B=%2lld  forward %7.3f ms (%5.1f TFLOP/s)  backward %7.3f ms "
                  "(%5.1f TFLOP/s)\n", impl, (long long)B, f, flops / f / 1e9, b,
                  2.5 * flops / b / 1e9);
    }
  }
}

TEST(GPU_Perf, Gpt2SmallOps) {
  if (!ft::cuda_available()) GTEST_SKIP() << "no CUDA device";
  const int64_t B = 8, T = 1024, C = 768, NH = 12, Vp = 50304, V = 50257, N = B * T;
  const DType dt = DType::bf16;
  GpuEnv env({B, T, C, NH, Vp, V}, 3ull << 30);
  Backend& be = env.be();
  std::printf("device: %s\n", be.describe().c_str());
  std::mt19937 g(9);
  auto fill = [&](Tensor t, float s) { env.put(t, randn(t.numel(), g, s)); };
  Tensor qkv = env.tensor(dt, {B, T, 3 * C}), att = env.tensor(dt, {B, T, C}),
         datt = env.tensor(dt, {B, T, C}), dqkv = env.tensor(dt, {B, T, 3 * C});
  Tensor lse = env.tensor(DType::f32, {B * NH * T});
  fill(qkv, 1.f);
  fill(datt, 1.f);
  const double attn_flops = 4.0 * B * NH * T * T * (C / NH) / 2;  // causal half
  double ms = time_ms(be, [&] { be.attention_forward(att, lse, qkv, NH); });
  std::printf("attention_forward   %8.3f ms  %6.1f TFLOP/s\n", ms, attn_flops / ms / 1e9);
  ms = time_ms(be, [&] { be.attention_backward(dqkv, datt, qkv, att, lse, NH); });
  std::printf("attention_backward  %8.3f ms  %6.1f TFLOP/s\n", ms, 2.5 * attn_flops / ms / 1e9);

  Tensor x = env.tensor(dt, {N, C}), w = env.tensor(dt, {4 * C, C}), bias = env.tensor(dt, {4 * C}),
         h = env.tensor(dt, {N, 4 * C}), dh = env.tensor(dt, {N, 4 * C}), dx = env.tensor(dt, {N, C}),
         dw = env.tensor(dt, {4 * C, C}), db = env.tensor(dt, {4 * C});
  fill(x, 1.f);
  fill(w, 0.02f);
  fill(bias, 0.1f);
  fill(dh, 1.f);
  env.be().zero(dw);
  env.be().zero(db);
  const double mm = 2.0 * N * C * 4 * C;
  ms = time_ms(be, [&] { be.matmul_forward(h, x, w, bias); });
  std::printf("matmul_fwd 768->3072 %7.3f ms  %6.1f TFLOP/s\n", ms, mm / ms / 1e9);
  ms = time_ms(be, [&] { be.matmul_backward(dx, dw, db, dh, x, w); });
  const char* nb = std::getenv("FT_NO_BGRAD_EPILOGUE");
  std::printf("matmul_bwd 768->3072 %7.3f ms  %6.1f TFLOP/s  (with dbias%s)\n", ms,
              2 * mm / ms / 1e9, nb && nb[0] == '1' ? ", FT_NO_BGRAD_EPILOGUE" : "");
  ms = time_ms(be, [&] { be.gelu_forward(dh, h); });
  std::printf("gelu_forward        %8.3f ms  %6.1f GB/s\n", ms, 2.0 * h.bytes() / ms / 1e6);

  Tensor mean = env.tensor(DType::f32, {N}), rstd = env.tensor(DType::f32, {N}),
         lw = env.tensor(dt, {C}), lb = env.tensor(dt, {C}), y = env.tensor(dt, {N, C});
  fill(lw, 1.f);
  fill(lb, 1.f);
  ms = time_ms(be, [&] { be.layernorm_forward(y, mean, rstd, x, lw, lb); });
  std::printf("layernorm_forward   %8.3f ms  %6.1f GB/s\n", ms, 2.0 * x.bytes() / ms / 1e6);
  ms = time_ms(be, [&] { be.layernorm_backward(dx, lw, lb, y, x, lw, mean, rstd); });
  std::printf("layernorm_backward  %8.3f ms  %6.1f GB/s\n", ms, 4.0 * x.bytes() / ms / 1e6);

  Tensor logits = env.tensor(dt, {B, T, Vp}), losses = env.tensor(DType::f32, {B, T});
  std::vector<int32_t> tg(N);
  for (int64_t i = 0; i < N; ++i) tg[i] = (int32_t)(i * 7919 % V);
  Tensor targets = env.upload_i32({B, T}, tg);
  fill(logits, 2.f);
  ms = time_ms(be, [&] { be.classifier_forward_backward(losses, logits, targets, V, 1.f / N); });
  std::printf("classifier_fwd_bwd  %8.3f ms  %6.1f GB/s\n", ms, 2.0 * logits.bytes() / ms / 1e6);
}

// The classifier at GPT-2 124M's B=16 logits (16384 rows x 50304 bf16, 1.6 GB), both
// kernels. GB/s counts one read and one write of the logits: what the staged kernel moves;
// the two-pass kernel reads them twice (pass 2 from L2 where it hits).
TEST(GPU_Perf, Classifier) {
  if (!ft::cuda_available()) GTEST_SKIP() << "no CUDA device";
  const int64_t B = 16, T = 1024, N = B * T, Vp = 50304, V = 50257;
  for (const char* impl : {"twopass", "staged"}) {
    std::optional<GpuEnv> holder;
    {  // the switch is read when the backend is created
      ScopedEnv choose("FT_CLASSIFIER", impl);
      holder.emplace(OpDims{B, T, 768, 12, Vp, V}, 2ull << 30);
    }
    GpuEnv& env = *holder;
    Backend& be = env.be();
    Tensor logits = env.tensor(DType::bf16, {B, T, Vp}), losses = env.tensor(DType::f32, {B, T});
    std::vector<int32_t> tg(N);
    for (int64_t i = 0; i < N; ++i) tg[i] = (int32_t)(i * 7919 % V);
    Tensor targets = env.upload_i32({B, T}, tg);
    std::mt19937 g(3);
    const std::vector<float> chunk = randn(T * Vp, g, 2.f);  // one sequence's rows, 16 times
    for (int64_t b = 0; b < B; ++b)
      env.put(Tensor(static_cast<char*>(logits.data) + b * T * Vp * 2, DType::bf16, {T, Vp}), chunk);
    const double ms = time_ms(be, [&] { be.classifier_forward_backward(losses, logits, targets, V, 1.f / N); });
    std::printf("classifier %-8s B=16  %7.3f ms  %6.1f GB/s\n", impl, ms, 2.0 * logits.bytes() / ms / 1e6);
  }
}

// The bias gradient alone at GPT-2 124M's B=16 shapes (N=16384, C=768, bf16), both ways: the
// dW product with dbias minus the same product without (FT_NO_BGRAD_EPILOGUE=0: cuBLASLt's
// BGRADB epilogue, which may also change the product's algorithm; =1: fittrain's two-kernel
// reduction after a plain product). GB/s counts one read of dout. "step" adds up a step's
// 12 layers x (qkv 2304, attn proj 768, fc 3072, mlp proj 768).
TEST(GPU_Perf, BiasGrad) {
  if (!ft::cuda_available()) GTEST_SKIP() << "no CUDA device";
  const int64_t B = 16, T = 1024, C = 768, N = B * T;
  const DType dt = DType::bf16;
  for (const char* nb : {"0", "1"}) {
    std::optional<GpuEnv> holder;
    {
      ScopedEnv choose("FT_NO_BGRAD_EPILOGUE", nb);
      holder.emplace(OpDims{B, T, C, 12, 50304, 50257}, 1ull << 30);
    }
    GpuEnv& env = *holder;
    Backend& be = env.be();
    std::mt19937 g(9);
    Tensor x = env.tensor(dt, {N, C});
    env.put(x, randn(x.numel(), g));
    double step = 0;
    for (int64_t OC : {768, 2304, 3072}) {
      Tensor w = env.tensor(dt, {OC, C}), dw = env.tensor(dt, {OC, C}), db = env.tensor(dt, {OC}),
             dout = env.tensor(dt, {N, OC});
      env.put(w, randn(w.numel(), g, 0.02f));
      env.put(dout, randn(dout.numel(), g));
      be.zero(dw);
      be.zero(db);
      const double with = time_ms(be, [&] { be.matmul_backward(Tensor(), dw, db, dout, x, w); });
      const double without =
          time_ms(be, [&] { be.matmul_backward(Tensor(), dw, Tensor(), dout, x, w); });
      const double d = with - without;
      step += 12 * (OC == 768 ? 2 : 1) * d;
      std::printf("bias grad %-8s N=%lld OC=%4lld  dW+dbias %7.3f ms  dW %7.3f ms  dbias %6.3f ms "
                  "(%6.0f GB/s)\n", nb[0] == '1' ? "fittrain" : "cublaslt", (long long)N,
                  (long long)OC, with, without, d, (double)dout.bytes() / d / 1e6);
    }
    std::printf("bias grad %-8s per step (B=16, 12 layers): %.3f ms\n",
                nb[0] == '1' ? "fittrain" : "cublaslt", step);
  }
}

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
