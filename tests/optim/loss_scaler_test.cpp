#include <gtest/gtest.h>

#include <limits>

#include "optim/loss_scaler.h"
#include "optim/lr_schedule.h"

namespace ft {
namespace {

TEST(LossScaler, BacksOffOnOverflowAndGrowsAfterCleanSteps) {
  DynamicLossScaler s(1024.0, 3);
  EXPECT_TRUE(s.update(1.0));
  EXPECT_FALSE(s.update(std::numeric_limits<double>::infinity()));
  EXPECT_EQ(s.scale(), 512.0);
  EXPECT_FALSE(s.update(std::nan("")));
  EXPECT_EQ(s.scale(), 256.0);
  EXPECT_EQ(s.skipped_steps(), 2);
  EXPECT_TRUE(s.update(2.0));
  EXPECT_TRUE(s.update(2.0));
  EXPECT_EQ(s.scale(), 256.0);
  EXPECT_TRUE(s.update(2.0));  // third clean step in a row
  EXPECT_EQ(s.scale(), 512.0);
}

TEST(LossScaler, StaysWithinBounds) {
  DynamicLossScaler s(2.0, 1, 1.0, 8.0);
  for (int i = 0; i < 5; ++i) s.update(INFINITY);
  EXPECT_EQ(s.scale(), 1.0);
  for (int i = 0; i < 10; ++i) s.update(1.0);
  EXPECT_EQ(s.scale(), 8.0);
}

TEST(LrSchedule, WarmupThenCosineToMin) {
  EXPECT_DOUBLE_EQ(learning_rate(0, 100, 10, 1.0, 0.1), 0.1);
  EXPECT_DOUBLE_EQ(learning_rate(9, 100, 10, 1.0, 0.1), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate(10, 100, 10, 1.0, 0.1), 1.0);
  EXPECT_NEAR(learning_rate(55, 100, 10, 1.0, 0.1), 0.55, 1e-12);  // halfway: (1 + 0.1) / 2
  EXPECT_NEAR(learning_rate(100, 100, 10, 1.0, 0.1), 0.1, 1e-12);
  for (int s = 11; s < 100; ++s) EXPECT_LE(learning_rate(s, 100, 10, 1.0, 0.1), learning_rate(s - 1, 100, 10, 1.0, 0.1));
}

// Fractional positions (an --epochs run resumed with another global batch) in the warmup's
// last step never pass the peak: 1.5 of a 2-step warmup gave 1.25x.
TEST(LrSchedule, AFractionalPositionInTheWarmupStaysAtOrBelowThePeak) {
  EXPECT_DOUBLE_EQ(learning_rate(0.5, 10, 2, 1.0, 0.1), 0.75);
  EXPECT_DOUBLE_EQ(learning_rate(1.5, 10, 2, 1.0, 0.1), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate(0.9, 10, 1, 1.0, 0.1), 1.0);
  for (double x = 0; x < 10; x += 0.125) EXPECT_LE(learning_rate(x, 10, 3, 1.0, 0.1), 1.0) << x;
}

}  // namespace
}  // namespace ft
