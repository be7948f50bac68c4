// The arena planner: placement by lifetime, validation, sizes and parsing.
#include <gtest/gtest.h>

#include "core/error.h"
#include "core/rng.h"
#include "plan/memory_plan.h"

namespace ft {
namespace {

BufferSpec buf(const char* name, BufferClass c, size_t bytes, int first, int last) {
  return BufferSpec{name, c, bytes, first, last, 0};
}

TEST(MemoryPlan, DisjointLifetimesShareBytes) {
  auto p = plan_offsets({buf("a", BufferClass::transient, 1000, 0, 1), buf("b", BufferClass::transient, 1000, 2, 3)}, 4);
  EXPECT_EQ(p.at("a").offset, p.at("b").offset);
  EXPECT_EQ(p.total_bytes, align_up(1000, kArenaAlignment));
  EXPECT_EQ(validate_plan(p), "");
}

TEST(MemoryPlan, OverlappingLifetimesDoNotShare) {
  auto p = plan_offsets({buf("a", BufferClass::transient, 1000, 0, 2), buf("b", BufferClass::transient, 1000, 2, 3)}, 4);
  EXPECT_NE(p.at("a").offset, p.at("b").offset);
  EXPECT_EQ(p.total_bytes, 2 * align_up(1000, kArenaAlignment));
  EXPECT_EQ(validate_plan(p), "");
}

TEST(MemoryPlan, PersistentPrefixInGivenOrder) {
  auto p = plan_offsets({buf("big", BufferClass::transient, 1 << 20, 0, 0), buf("params", BufferClass::params, 300, 0, 3),
                         buf("grads", BufferClass::grads, 300, 0, 3)},
                        4);
  EXPECT_EQ(p.at("params").offset, 0u);
  EXPECT_EQ(p.at("grads").offset, 512u);
  EXPECT_EQ(p.persistent_bytes, 1024u);
  EXPECT_EQ(p.at("big").offset, 1024u);
}

TEST(MemoryPlan, GapIsReusedBySmallerBuffer) {
  // a [0,0] and c [2,2] are large; b [1,1] fits where a was.
  auto p = plan_offsets({buf("a", BufferClass::transient, 4096, 0, 0), buf("long", BufferClass::transient, 512, 0, 2),
                         buf("b", BufferClass::transient, 1024, 1, 1)},
                        3);
  EXPECT_EQ(p.total_bytes, 4096u + 512u);
  EXPECT_EQ(validate_plan(p), "");
}

TEST(MemoryPlan, RandomPlansAreValidAndNoLargerThanSum) {
  Rng rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<BufferSpec> bs;
    const int phases = 1 + static_cast<int>(rng.next_u64() % 20);
    const int n = 1 + static_cast<int>(rng.next_u64() % 40);
    size_t sum = 0, max_live = 0;
    for (int i = 0; i < n; ++i) {
      int a = static_cast<int>(rng.next_u64() % phases), b = static_cast<int>(rng.next_u64() % phases);
      size_t bytes = 1 + rng.next_u64() % 100000;
      bs.push_back(buf("", (i % 7 == 0) ? BufferClass::params : BufferClass::transient, bytes, std::min(a, b), std::max(a, b)));
      bs.back().name = "b" + std::to_string(i);
      sum += align_up(bytes, kArenaAlignment);
    }
    for (int ph = 0; ph < phases; ++ph) {
      size_t live = 0;
      for (auto& b : bs)
        if (is_persistent(b.cls) || (b.first <= ph && ph <= b.last)) live += align_up(b.bytes, kArenaAlignment);
      max_live = std::max(max_live, live);
    }
    auto p = plan_offsets(bs, phases);
    ASSERT_EQ(validate_plan(p), "") << "trial " << trial;
    EXPECT_LE(p.total_bytes, sum);
    EXPECT_GE(p.total_bytes, max_live);  // no plan can beat the live-bytes lower bound
  }
}

TEST(MemoryPlan, ValidateCatchesOverlap) {
  auto p = plan_offsets({buf("a", BufferClass::transient, 1000, 0, 1), buf("b", BufferClass::transient, 1000, 1, 1)}, 2);
  p.buffers[1].offset = p.buffers[0].offset;
  EXPECT_NE(validate_plan(p).find("overlap"), std::string::npos);
}

TEST(MemoryPlan, RejectsBadLifetime) {
  EXPECT_THROW(plan_offsets({buf("a", BufferClass::transient, 10, 2, 1)}, 3), InternalError);
  EXPECT_THROW(plan_offsets({buf("a", BufferClass::transient, 10, 0, 3)}, 3), InternalError);
}

TEST(Bytes, ParseAndFormat) {
  EXPECT_EQ(parse_bytes("16GiB", "--memory-limit"), 16ull << 30);
  EXPECT_EQ(parse_bytes("512MiB", "--memory-limit"), 512ull << 20);
  EXPECT_EQ(parse_bytes("20GB", "--memory-limit"), 20'000'000'000ull);
  EXPECT_EQ(parse_bytes("1.5 gib", "--memory-limit"), 3ull << 29);
  EXPECT_EQ(parse_bytes("4096", "--memory-limit"), 4096u);
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(3), "3 B");
  for (const char* bad : {"abc", "16XB", "-1GiB", "0", ""}) {
    try {
      parse_bytes(bad, "--memory-limit");
      ADD_FAILURE() << bad;
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find("--memory-limit"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace ft
