// GPT-2 on packed rows (the chat task's inputs): several samples in one row, each token with
// its position inside its own sample. A packed row must behave exactly like its samples run
// alone (attention and position embeddings stay inside a sample), and a sample whose targets
// are all masked (-1: a prompt, padding) must contribute nothing to the loss or the gradients.
#include <gtest/gtest.h>

#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "core/rng.h"
#include "models/gpt2_harness.h"

namespace ft {
namespace {

constexpr int kV = 50, kT = 16;

struct Row {
  std::vector<int32_t> tok, tgt, pos;
  // Appends a sample of n tokens starting at position 0; with_loss: targets are random
  // labels, else -1.
  void add(Rng& rng, int n, bool with_loss) {
    for (int i = 0; i < n; ++i) {
      tok.push_back(static_cast<int32_t>(rng.next_u64() % kV));
      tgt.push_back(with_loss ? static_cast<int32_t>(rng.next_u64() % kV) : -1);
      pos.push_back(i);
    }
  }
};

struct PackedRun {
  std::unique_ptr<Backend> be = make_cpu_backend();
  std::unique_ptr<testing::GPT2Harness> h;
  explicit PackedRun(int64_t mb) {
    PlanShape s;
    s.micro_batch = mb;
    s.eval_batch = mb;
    h = std::make_unique<testing::GPT2Harness>(*be, GPT2Config{2, 2, 32, kT, kV}, s, 7, /*packed=*/true);
  }
  double fb(const Row& r, int64_t b) {
    h->zero_grads();
    return h->forward_backward(r.tok.data(), r.tgt.data(), r.pos.data(), b, 1.0f);
  }
};

// Two rows concatenated as a batch of 2.
Row batch_of(const Row& a, const Row& b) {
  Row r = a;
  r.tok.insert(r.tok.end(), b.tok.begin(), b.tok.end());
  r.tgt.insert(r.tgt.end(), b.tgt.begin(), b.tgt.end());
  r.pos.insert(r.pos.end(), b.pos.begin(), b.pos.end());
  return r;
}

TEST(GPT2Packed, APackedRowEqualsItsSamplesRunAlone) {
  Rng rng(3);
  Row a, b;  // two samples, each padded alone to T
  a.add(rng, 6, true);
  b.add(rng, 7, true);
  Row packed;  // both in one row, then padding (its own segment, no loss)
  packed.tok = a.tok, packed.tgt = a.tgt, packed.pos = a.pos;
  packed.tok.insert(packed.tok.end(), b.tok.begin(), b.tok.end());
  packed.tgt.insert(packed.tgt.end(), b.tgt.begin(), b.tgt.end());
  packed.pos.insert(packed.pos.end(), b.pos.begin(), b.pos.end());
  packed.add(rng, kT - 13, false);
  a.add(rng, kT - 6, false);
  b.add(rng, kT - 7, false);

  PackedRun one(1), two(2);
  const double loss_packed = one.fb(packed, 1);
  const std::vector<float> g_packed = one.h->grads();
  const double loss_alone = two.fb(batch_of(a, b), 2);
  const std::vector<float> g_alone = two.h->grads();
  EXPECT_NEAR(loss_packed, loss_alone, 1e-5 * std::abs(loss_alone));
  // The padding tokens differ (random in both), but they carry no loss and nothing attends
  // to them, so the gradients agree up to fp32 summation order.
  double num = 0, den = 0;
  for (size_t i = 0; i < g_alone.size(); ++i) {
    num += (g_packed[i] - g_alone[i]) * double(g_packed[i] - g_alone[i]);
    den += g_alone[i] * double(g_alone[i]);
  }
  EXPECT_LT(std::sqrt(num / den), 1e-5);
  EXPECT_NEAR(one.h->eval_loss(packed.tok.data(), packed.tgt.data(), packed.pos.data(), 1), loss_packed,
              1e-5 * std::abs(loss_packed));
}

TEST(GPT2Packed, ASampleWithoutLossChangesNeitherLossNorGradients) {
  // Sample A (a prompt: every target -1) then sample B with a loss; A's tokens are replaced
  // by other tokens: B cannot see A and A has no loss, so nothing may change, to the bit.
  Rng rng(5);
  Row r1;
  r1.add(rng, 7, false);
  r1.add(rng, kT - 7, true);
  Row r2 = r1;
  for (int i = 0; i < 7; ++i) r2.tok[i] = (r1.tok[i] + 1 + i) % kV;
  PackedRun run(1);
  const double l1 = run.fb(r1, 1);
  const std::vector<float> g1 = run.h->grads();
  const double l2 = run.fb(r2, 1);
  const std::vector<float> g2 = run.h->grads();
  EXPECT_EQ(l1, l2);
  // The embedding rows of A's old and new tokens receive nothing either way.
  EXPECT_EQ(g1, g2);
  // ... whereas with one row (no packing: positions 0..T-1) B sees A and the loss changes.
  Row u1 = r1, u2 = r2;
  for (int i = 0; i < kT; ++i) u1.pos[i] = u2.pos[i] = i;
  EXPECT_NE(run.fb(u1, 1), run.fb(u2, 1));
}

TEST(GPT2Packed, ThePlanHoldsThePositionsAsInputs) {
  auto be = make_cpu_backend();
  PlanShape s;
  s.micro_batch = 3;
  s.eval_batch = 2;
  for (bool packed : {false, true}) {
    GPT2LM m(GPT2Config{2, 2, 32, kT, kV});
    m.set_packed_inputs(packed);
    const MemoryPlan p = runtime_plan(m, *be, s);
    size_t train = 0, eval = 0;
    for (const auto& b : p.buffers) {
      if (b.name == "positions") train = b.bytes;
      if (b.name == "e.positions") eval = b.bytes;
    }
    EXPECT_EQ(train, packed ? 3u * kT * 4 : 0u);
    EXPECT_EQ(eval, packed ? 2u * kT * 4 : 0u);
    EXPECT_EQ(m.input_fields().size(), packed ? 3u : 2u);
  }
}

}  // namespace
}  // namespace ft
