// AdamW state shards: ZeRO-1 gives rank r elements [r*ceil(P/W), ...) of every optimizer
// buffer, the shards tile the layout exactly, and the planner counts ceil(P/W) per rank.
#include <gtest/gtest.h>

#include "optim/adamw_state.h"

namespace ft {
namespace {

TEST(AdamWState, ShardsTileTheLayout) {
  for (int64_t P : {1, 10, 1000, 1001}) {
    for (int W : {1, 2, 3, 8}) {
      PlanShape s;
      s.world_size = W;
      s.zero_stage = 1;
      int64_t next = 0;
      for (int r = 0; r < W; ++r) {
        OptimizerShard sh = optimizer_shard(P, s, r);
        EXPECT_EQ(sh.padded, (P + W - 1) / W);
        EXPECT_EQ(sh.begin, std::min(P, next)) << P << " " << W << " " << r;
        EXPECT_LE(sh.count, sh.padded);
        next = sh.begin + sh.count;
      }
      EXPECT_EQ(next, P);
      s.zero_stage = 0;  // unsharded: every rank holds everything
      OptimizerShard full = optimizer_shard(P, s, W - 1);
      EXPECT_EQ(full.begin, 0);
      EXPECT_EQ(full.count, P);
    }
  }
}

TEST(AdamWState, DeclaresMasterOnlyForMixedPrecisionAndPlansTheShard) {
  PlanShape s;
  s.precision = Precision::fp32;
  BufferTable t(1);
  auto ids = AdamWState::declare(t, 1000, s);
  EXPECT_EQ(ids.master, kNoBuffer);
  EXPECT_EQ(t.buffers().size(), 2u);
  s.precision = Precision::bf16;
  s.zero_stage = 1;
  s.world_size = 4;
  BufferTable u(1);
  ids = AdamWState::declare(u, 1001, s, /*ema=*/true);
  ASSERT_EQ(u.buffers().size(), 4u);  // master, m, v, ema
  for (const auto& b : u.buffers()) EXPECT_EQ(b.bytes, 251u * 4) << b.name;
  EXPECT_NE(ids.ema, kNoBuffer);
}

}  // namespace
}  // namespace ft
