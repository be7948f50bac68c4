// The GPT-2 recommender on CUDA tracks the CPU reference (models/gpt2_rec.h): loss and every
// gradient of one micro-batch, with and without the item table, BPR and cross-entropy, in
// fp32 and bf16, and the ranker's scores of the next item.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "models/gpt2_rec.h"
#include "train/runtime.h"

namespace ft {
namespace {

struct RecRun {
  double loss = 0;
  std::vector<float> grads, scores;
};

RecRun run(Backend& be, const GPT2RecConfig& c, Precision p, bool cache) {
  GPT2Rec m(c);
  PlanShape s;
  s.micro_batch = 4;
  s.eval_batch = 4;
  s.precision = p;
  s.item_cache = cache;
  ModelRuntime rt(m, be, s);
  std::vector<float> host(static_cast<size_t>(m.num_params()));
  m.init_params(3, host.data());
  rt.load_params_from_host(host.data());
  std::mt19937 g(5);
  const int64_t T = c.seq_len, K = c.negatives, B = 4;
  std::vector<int32_t> tok(B * T, 0), tgt(B * T, -1), neg(B * T * K, 1);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t len = T - 3 * b;  // ragged rows
    for (int64_t t = 0; t < len; ++t) {
      tok[b * T + t] = 1 + static_cast<int32_t>(g() % c.items);
      tgt[b * T + t] = 1 + static_cast<int32_t>(g() % c.items);
      for (int64_t k = 0; k < K; ++k) neg[(b * T + t) * K + k] = 1 + static_cast<int32_t>(g() % c.items);
    }
  }
  Batch batch;
  batch.size = B;
  batch.fields.push_back(BatchField{FieldSpec{"tokens", DType::i32, T}, tok.data()});
  batch.fields.push_back(BatchField{FieldSpec{"targets", DType::i32, T}, tgt.data()});
  if (c.loss == "bpr") batch.fields.push_back(BatchField{FieldSpec{"negatives", DType::i32, T * K}, neg.data()});
  RecRun r;
  rt.zero_grads();
  r.loss = rt.forward_backward(batch, 1.0f / static_cast<float>(B * T));
  r.grads.resize(host.size());
  rt.copy_grads_to_host(r.grads.data());
  std::vector<std::vector<uint32_t>> hist = {{3, 4, 5}, {7}, {9, 10, 11, 12, 13}};
  std::vector<std::span<const uint32_t>> hs(hist.begin(), hist.end());
  r.scores.resize(hist.size() * static_cast<size_t>(c.items + 1));
  m.score_next(hs, r.scores.data());
  for (size_t u = 0; u < hist.size(); ++u) r.scores[u * (c.items + 1)] = 0;  // -inf padding column
  return r;
}

double rel(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, n = 0;
  for (size_t i = 0; i < a.size(); ++i) d += (double(a[i]) - b[i]) * (double(a[i]) - b[i]), n += double(b[i]) * b[i];
  return std::sqrt(d / std::max(n, 1e-30));
}

void compare(Precision p, double tol) {
  auto cpu = make_cpu_backend();
  auto gpu = make_backend(DeviceKind::cuda);
  for (const char* loss : {"bpr", "ce"}) {
    for (bool cache : {true, false}) {
      if (std::string(loss) == "ce" && !cache) continue;
      GPT2RecConfig c;
      c.n_layer = 2, c.n_head = 2, c.n_embd = 64, c.seq_len = 32, c.items = 500, c.negatives = 2, c.loss = loss;
      const RecRun ref = run(*cpu, c, Precision::fp32, cache);
      const RecRun got = run(*gpu, c, p, cache);
      EXPECT_NEAR(got.loss, ref.loss, tol * std::fabs(ref.loss)) << loss << " cache " << cache;
      EXPECT_LT(rel(got.grads, ref.grads), tol) << loss << " cache " << cache;
      EXPECT_LT(rel(got.scores, ref.scores), tol) << loss << " cache " << cache;
    }
  }
}

TEST(GPU_Gpt2Rec, Fp32TracksCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  compare(Precision::fp32, 2e-3);
}

TEST(GPU_Gpt2Rec, Bf16TracksCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  compare(Precision::bf16, 4e-2);
}

}  // namespace
}  // namespace ft
