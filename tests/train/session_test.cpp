// Session: when memory is taken between planning and allocation, it re-plans for what is
// free (same global batch, smaller micro-batch) instead of dying.
#include <gtest/gtest.h>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "train/session.h"

namespace ft {
namespace {

struct MemoryLimitGuard {
  ~MemoryLimitGuard() { testing::cpu_memory_limit_bytes = 0; }
};

TEST(Session, ReplansWhenMemoryIsTakenBeforeAllocation) {
  MemoryLimitGuard guard;
  RunConfig rc;
  rc.device = "cpu";
  rc.global_batch_size = 128;
  Session s(rc, true);
  const FitResult& before = s.fit();
  const int64_t mb_before = before.shape.micro_batch;
  const size_t planned_before = before.plan.total_bytes;
  ASSERT_EQ(mb_before, 128);
  // Another process takes memory: now only the margin plus 100 MiB is free.
  testing::cpu_memory_limit_bytes = kMinSafetyMargin + (100ull << 20);
  ASSERT_GT(planned_before, testing::cpu_memory_limit_bytes);
  s.allocate();
  const FitResult& after = s.fit();
  EXPECT_LT(after.shape.micro_batch, mb_before);
  EXPECT_LE(after.plan.total_bytes, 100ull << 20);
  EXPECT_EQ((after.grad_accum - 1) * after.shape.micro_batch + after.last_micro_batch, 128);
  EXPECT_EQ(s.arena().size(), after.plan.total_bytes);
}

TEST(Session, GivesUpWithTheSmallestBudgetWhenNothingFits) {
  MemoryLimitGuard guard;
  RunConfig rc;
  rc.device = "cpu";
  rc.global_batch_size = 128;
  Session s(rc, true);
  s.fit();
  testing::cpu_memory_limit_bytes = kMinSafetyMargin + (1ull << 20);
  ASSERT_GT(s.fit().plan.total_bytes, testing::cpu_memory_limit_bytes);
  try {
    s.allocate();
    FAIL() << "allocation should have failed";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("nothing fits"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ft
