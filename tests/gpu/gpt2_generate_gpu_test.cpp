// Generation with the KV cache on the CUDA backend: fp32 repeats the CPU's tokens and logits,
// bf16 agrees with the CPU's fp32 on the first greedy tokens and with its own recomputation
// of the whole context (logits within bf16 tolerance);
// and a benchmark printout of GPT-2 124M decoding (G = 32 prompts of 64 tokens, 256 new each).
#include <chrono>
#include <cstdio>

#include "backend/cpu/cpu_backend.h"
#include "core/rng.h"
#include "gpu_test_util.h"
#include "models/gpt2_harness.h"

namespace ft::gputest {

namespace {

struct Gen {
  std::unique_ptr<Backend> be;
  std::unique_ptr<testing::GPT2Harness> h;
  Gen(std::unique_ptr<Backend> b, const GPT2Config& c, int64_t G, Precision p, const std::vector<float>* params)
      : be(std::move(b)) {
    PlanShape s;
    s.training = false;
    s.eval_batch = G;
    s.precision = p;
    h = std::make_unique<testing::GPT2Harness>(*be, c, s, 42);
    if (params) h->load_params_from_host(params->data());
  }
  // tokens, and every row's logits per step
  std::vector<std::vector<int32_t>> run(const std::vector<std::vector<int32_t>>& prompts, int64_t n,
                                        std::vector<std::vector<std::vector<float>>>* logits) {
    GenerateOptions o;
    o.max_new_tokens = n;
    logits->assign(prompts.size(), {});
    return h->model().generate(prompts, o, [&](int64_t i, int64_t, std::span<const float> l) {
      (*logits)[i].emplace_back(l.begin(), l.end());
    });
  }
};

std::vector<std::vector<int32_t>> random_prompts(int n, int len_lo, int len_hi, int V, uint64_t seed) {
  Rng rng(seed);
  std::vector<std::vector<int32_t>> v(n);
  for (auto& p : v) {
    p.resize(len_lo + rng.next_u64() % (len_hi - len_lo + 1));
    for (auto& t : p) t = static_cast<int32_t>(rng.next_u64() % V);
  }
  return v;
}

// The GPU generates with the KV cache in precision p. Its first same_tokens greedy tokens must
// be the CPU fp32 model's. Its logits are compared, step by step, with the same GPU model
// recomputing the whole context in the same precision (next_token_logits): in fp32 that is
// also the CPU's, in bf16 it separates the cache's correctness from bf16 rounding, which this
// toy model (GPT-2's init scaled by 4, so greedy choices are far apart and attention is
// peaky) amplifies: bf16 against CPU fp32 measured 3-18% relative on H100 at step 0 alone.
void agrees_with_cpu(Precision p, double logit_tol, size_t same_tokens) {
  const GPT2Config c{2, 4, 256, 96, 300};  // head size 64
  Gen cpu(make_cpu_backend(), c, 3, Precision::fp32, nullptr);
  std::vector<float> params = cpu.h->params();
  for (float& x : params) x *= 4;
  cpu.h->load_params_from_host(params.data());
  Gen gpu(make_cuda_backend(), c, 3, p, &params);
  const auto prompts = random_prompts(5, 1, 40, c.vocab_size, 8);  // two chunks of 3
  std::vector<std::vector<std::vector<float>>> lc, lg;
  const auto tc = cpu.run(prompts, 8, &lc), tg = gpu.run(prompts, 8, &lg);
  std::vector<float> full(static_cast<size_t>(c.vocab_size));
  for (size_t i = 0; i < prompts.size(); ++i) {
    SCOPED_TRACE("prompt " + std::to_string(i) + " of " + std::to_string(prompts[i].size()) + " tokens");
    ASSERT_EQ(tg[i].size(), 8u);
    EXPECT_EQ(std::vector<int32_t>(tg[i].begin(), tg[i].begin() + same_tokens),
              std::vector<int32_t>(tc[i].begin(), tc[i].begin() + same_tokens));
    std::vector<int32_t> ctx = prompts[i];
    for (size_t s = 0; s < 8; ++s) {
      gpu.h->model().next_token_logits(ctx.data(), static_cast<int64_t>(ctx.size()), full.data());
      EXPECT_LT(rel_err(lg[i][s], full), logit_tol) << "step " << s;
      ctx.push_back(tg[i][s]);
    }
  }
  // the device's argmax (no logits hook) picks the same tokens
  GenerateOptions o;
  o.max_new_tokens = 8;
  EXPECT_EQ(gpu.h->model().generate(prompts, o), tg);
  // with a vocabulary limit, the device's argmax over the first ids of each (padded) row picks
  // what the host picks from the same logits, and nothing at or above the limit
  o.vocab_limit = c.vocab_size / 2;
  const auto limited = gpu.h->model().generate(prompts, o);
  EXPECT_EQ(limited, gpu.h->model().generate(prompts, o, [](int64_t, int64_t, std::span<const float>) {}));
  for (const auto& row : limited)
    for (int32_t t : row) EXPECT_LT(t, o.vocab_limit);
}

}  // namespace

TEST(GPU_Gpt2Generate, Fp32MatchesCpu) {
  if (!ft::cuda_available()) GTEST_SKIP() << "no CUDA device";
  agrees_with_cpu(Precision::fp32, 1e-4, 8);
}

TEST(GPU_Gpt2Generate, Bf16AgreesWithCpuFp32) {
  if (!ft::cuda_available()) GTEST_SKIP() << "no CUDA device";
  agrees_with_cpu(Precision::bf16, 3e-2, 3);
}

// Benchmark printout (no assertion on time): GPT-2 124M shapes, random weights.
TEST(GPU_Gpt2Generate, TokensPerSecond124M) {
  if (!ft::cuda_available()) GTEST_SKIP() << "no CUDA device";
  const GPT2Config c{12, 12, 768, 1024, 50257};
  const int64_t G = 32, prompt = 64, new_tokens = 256;
  Gen gpu(make_cuda_backend(), c, G, Precision::bf16, nullptr);
  const auto prompts = random_prompts(G, prompt, prompt, c.vocab_size, 3);
  GenerateOptions o;
  o.max_new_tokens = 4;
  gpu.h->model().generate(prompts, o);  // warm-up: cuBLASLt algorithms, cuDNN plans
  for (const char* mode : {"greedy", "sampled (temperature 1, top-k 50)"}) {
    o.max_new_tokens = new_tokens;
    o.temperature = mode[0] == 'g' ? 0 : 1;
    o.top_k = mode[0] == 'g' ? 0 : 50;
    gpu.be->synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    const auto out = gpu.h->model().generate(prompts, o);
    gpu.be->synchronize();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    size_t n = 0;
    for (const auto& r : out) n += r.size();
    EXPECT_EQ(n, static_cast<size_t>(G * new_tokens));
    std::printf("[ perf ] GPT-2 124M bf16 generation, %s: G=%lld prompt=%lld new=%lld: %.3f s, %.0f tokens/s "
                "(%.2f ms per step)\n",
                mode, (long long)G, (long long)prompt, (long long)new_tokens, s, n / s, 1e3 * s / new_tokens);
  }
}

}  // namespace ft::gputest
