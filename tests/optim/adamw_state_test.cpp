// AdamW state shards (optim/shard_layout.h): ZeRO-1 gives rank r piece r of every chunk of
// the layout, the pieces tile the layout exactly once, and the planner counts total / W per
// rank.
#include <gtest/gtest.h>

#include <vector>

#include "optim/adamw_state.h"

namespace ft {
namespace {

TEST(ShardLayout, PiecesTileTheLayoutExactlyOnce) {
  for (int64_t P : {1, 10, 1000, 1001, 100003}) {
    for (int W : {1, 2, 3, 8}) {
      for (int64_t target : {int64_t{16}, int64_t{300}, int64_t{5000}, int64_t{4} << 20}) {
        std::vector<int> owner(static_cast<size_t>(P), -1);
        OptimizerShard first;
        for (int r = 0; r < W; ++r) {
          const OptimizerShard sh = shard_layout(P, W, r, target);
          if (r == 0) first = sh;
          EXPECT_EQ(sh.chunk % W, 0);
          EXPECT_EQ(sh.padded * W, sh.total());
          EXPECT_GE(sh.total(), P);
          EXPECT_LT(sh.total() - P, sh.chunk) << "a whole chunk of padding";
          EXPECT_EQ(sh.padded, first.padded) << "every rank's buffers have one length";
          if (W == 1) EXPECT_EQ(sh.total(), P);
          if (sh.chunks == 1) EXPECT_EQ(sh.padded, (P + W - 1) / W) << "one chunk: today's contiguous shards";
          if (sh.chunks > 1) EXPECT_EQ(sh.piece() % 8, 0) << "pieces of whole 16-byte bf16 packs";
          int64_t last_local = -1;
          sh.for_each_piece([&](int64_t g, int64_t l, int64_t n) {
            EXPECT_GT(l, last_local);
            last_local = l;
            EXPECT_EQ(sh.global_of(r, l), g);
            EXPECT_EQ(sh.global_of(r, l + n - 1), g + n - 1);
            for (int64_t i = g; i < g + n; ++i) {
              ASSERT_LT(i, P);
              EXPECT_EQ(owner[static_cast<size_t>(i)], -1) << "element " << i << " owned twice";
              owner[static_cast<size_t>(i)] = r;
            }
          });
        }
        for (int64_t i = 0; i < P; ++i)
          ASSERT_GE(owner[static_cast<size_t>(i)], 0) << "element " << i << " of " << P << " unowned, W " << W;
      }
    }
  }
}

TEST(ShardLayout, InterleavesChunksSoEveryRankOwnsPartOfEachChunk) {
  // 100 elements, 2 ranks, chunks of 16: rank 1 owns [8, 16), [24, 32), ... [88, 96).
  const OptimizerShard sh = shard_layout(100, 2, 1, 16);
  EXPECT_EQ(sh.chunk, 16);
  EXPECT_EQ(sh.chunks, 7);
  EXPECT_EQ(sh.padded, 56);
  std::vector<int64_t> starts;
  sh.for_each_piece([&](int64_t g, int64_t, int64_t n) {
    EXPECT_EQ(n, 8);
    starts.push_back(g);
  });
  EXPECT_EQ(starts, (std::vector<int64_t>{8, 24, 40, 56, 72, 88}));  // chunk 6's piece is past P
  PlanShape s;
  s.world_size = 2;
  s.zero_stage = 0;  // unsharded: every rank holds everything
  const OptimizerShard full = optimizer_shard(100, s, 1);
  EXPECT_FALSE(full.sharded());
  EXPECT_EQ(full.padded, 100);
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
