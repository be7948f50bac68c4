// The EMA of the weights: ema_pytorch's schedule (optim/ema.h), the planned buffer, the update
// against its closed form, and swapping the EMA weights in for evaluation and back exactly
// (train/runtime.h). Checkpoints and resume: tests/cli/ddim_e2e_test.cpp.
#include <gtest/gtest.h>

#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "core/rng.h"
#include "models/dit.h"
#include "optim/ema.h"
#include "train/runtime.h"

namespace ft {
namespace {

TEST(Ema, ScheduleIsEmaPytorchs) {
  const EmaSchedule s;  // CDEIT's: 0.995, every 10, warm-up 100, power 2/3
  EXPECT_EQ(ema_decay_at(s, 1), 0.0);   // ema_pytorch's call 0: a copy
  EXPECT_LT(ema_decay_at(s, 2), 0.0);   // no update
  EXPECT_LT(ema_decay_at(s, 10), 0.0);
  EXPECT_EQ(ema_decay_at(s, 11), 0.0);  // call 10 <= 100: a copy
  EXPECT_EQ(ema_decay_at(s, 101), 0.0); // call 100 <= 100
  // call 110: epoch 9, 1 - 10^(-2/3)
  EXPECT_NEAR(ema_decay_at(s, 111), 1.0 - std::pow(10.0, -2.0 / 3.0), 1e-12);
  EXPECT_NEAR(ema_decay_at(s, 111), 0.78456, 1e-5);
  EXPECT_EQ(ema_decay_at(s, 1000001), 0.995);  // the ramp is capped at the decay
  EmaSchedule flat;
  flat.decay = 0.9, flat.every = 1, flat.warmup = 0, flat.power = 0;
  EXPECT_EQ(ema_decay_at(flat, 1), 0.0);
  EXPECT_EQ(ema_decay_at(flat, 2), 0.0);  // epoch 0 is a copy in ema_pytorch too
  EXPECT_EQ(ema_decay_at(flat, 3), 0.9);
  EXPECT_EQ(ema_decay_at(flat, 50), 0.9);
}

DiTConfig tiny() {
  DiTConfig c;
  c.depth = 1, c.hidden = 16, c.heads = 2, c.patch = 2, c.image = 8, c.cond_dim = 3, c.freq_dim = 16;
  return c;
}

std::vector<float> random_weights(int64_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> w(static_cast<size_t>(n));
  for (float& v : w) v = static_cast<float>(rng.normal());
  return w;
}

TEST(Ema, PlannedUpdatedAndSwappedExactly) {
  auto be = make_cpu_backend();
  DiT model(tiny());
  PlanShape s;
  s.micro_batch = 2, s.eval_batch = 2;
  const size_t without = runtime_plan(model, *be, s).total_bytes;
  s.ema = true;
  const MemoryPlan with = runtime_plan(model, *be, s);
  const int64_t P = model.num_params();
  bool found = false;
  for (const auto& b : with.buffers) found |= b.name == "ema" && b.bytes == static_cast<size_t>(P) * 4;
  EXPECT_TRUE(found);
  EXPECT_GE(with.total_bytes, without + static_cast<size_t>(P) * 4);
  ModelRuntime rt(model, *be, s);
  ASSERT_TRUE(rt.has_ema());
  EXPECT_EQ(rt.plan().total_bytes, with.total_bytes);
  // three weight states W1..W3: copy, then two averages of decay 0.9 and 0.5
  std::vector<std::vector<float>> w = {random_weights(P, 1), random_weights(P, 2), random_weights(P, 3)};
  const float decays[3] = {0.f, 0.9f, 0.5f};
  std::vector<float> want(static_cast<size_t>(P));
  for (int k = 0; k < 3; ++k) {
    rt.load_params_from_host(w[static_cast<size_t>(k)].data());
    rt.ema_update(decays[k]);
    for (int64_t i = 0; i < P; ++i) {
      float& e = want[static_cast<size_t>(i)];
      const float x = w[static_cast<size_t>(k)][static_cast<size_t>(i)];
      e = k == 0 ? x : e - (e - x) * (1.f - decays[k]);
    }
  }
  const float* ema = rt.optimizer().ema().as<float>();
  for (int64_t i = 0; i < P; ++i) ASSERT_EQ(ema[i], want[static_cast<size_t>(i)]) << i;
  // closed form: 0.5 (0.9 W1 + 0.1 W2) + 0.5 W3
  for (int64_t i = 0; i < P; i += 97) {
    const double cf = 0.5 * (0.9 * w[0][static_cast<size_t>(i)] + 0.1 * w[1][static_cast<size_t>(i)]) +
                      0.5 * w[2][static_cast<size_t>(i)];
    EXPECT_NEAR(ema[i], cf, 1e-5) << i;
  }
  // evaluation on the EMA, then the training weights back bit for bit
  rt.swap_in_ema();
  std::vector<float> p(static_cast<size_t>(P));
  rt.copy_params_to_host(p.data());
  EXPECT_EQ(p, want);
  rt.swap_out_ema();
  rt.copy_params_to_host(p.data());
  EXPECT_EQ(p, w[2]);
}

}  // namespace
}  // namespace ft
