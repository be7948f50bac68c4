// The ranks' flags compared (train/run_checks.h: first_setting_apart).
#include <gtest/gtest.h>

#include "train/run_checks.h"

namespace ft {
namespace {

TEST(RankSettings, TheFirstFlagApartIsNamedWithBothValues) {
  const std::string rank0 = "--global-batch-size\t32\n--lr\t0.001\n--model\tgpt2\n";
  EXPECT_EQ(first_setting_apart(rank0, rank0), "");
  EXPECT_EQ(first_setting_apart("--global-batch-size\t32\n--lr\t0.002\n--model\tgpt2\n", rank0),
            "--lr 0.002 (rank 0: 0.001)");
  // The first in the lines' (sorted) order, whatever else differs after it.
  EXPECT_EQ(first_setting_apart("--global-batch-size\t16\n--lr\t0.002\n--model\tgpt2\n", rank0),
            "--global-batch-size 16 (rank 0: 32)");
  EXPECT_EQ(first_setting_apart("--global-batch-size\t32\n--lr\t0.001\n--model\t\n", rank0),
            "--model \"\" (rank 0: gpt2)");
  // Another build's flags: named as such.
  EXPECT_EQ(first_setting_apart(rank0 + "--new-flag\tx\n", rank0), "--new-flag x (rank 0 has no --new-flag: another fittrain)");
  EXPECT_EQ(first_setting_apart(rank0, rank0 + "--new-flag\tx\n"), "no --new-flag (rank 0: x; another fittrain)");
  // A RunConfig not from the command line has none: nothing to compare.
  EXPECT_EQ(first_setting_apart("", rank0), "");
  EXPECT_EQ(first_setting_apart(rank0, ""), "");
}

}  // namespace
}  // namespace ft
