// A global batch that does not divide by the ranks (CPU ranks under mpirun -np 2 and 3): the ranks
// take shares one sample apart, in as many micro-steps each, and train the run one process
// trains on the whole global batch. Skips cleanly when mpirun is not installed or this build
// has no MPI.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/cli_util.h"
#include "dist/mpi_util.h"
#include "train/checkpoint.h"
#include "train/checkpoint_dir.h"

namespace ft {
namespace {
using namespace ft::testing;

// Global batch 11 in micro-batches of 3 on 2 ranks (shares 6 = 3 + 3 and 5 = 3 + 2: the one
// process's micro-batches 3, 3, 3, 2 split between the ranks as they fall); 9 in micro-batches
// of 4 (shares 5 = 4 + 1 and 4 = 3 + 1: another grouping than the one process's 4, 4, 1); and
// 8 on 3 ranks with the micro-batch left to the planner (shares 3, 3, 2: a rank's offset is
// not rank x its share there). Every loss unit weighs 1 / the global batch's units on every
// side, so the weights after 4 steps differ by the order of the fp32 gradient sums only (1e-5
// of each section's largest value, as MpiE2E.TwoRanksMatchOneProcessAccumulatingWithAndWithoutZero),
// and so do the sharded (ZeRO-1) run's: bitwise the replicated one's on 2 ranks, where a
// reduce-scatter adds the same two values as the all-reduce, not on 3.
TEST(MpiE2E, AGlobalBatchThatDoesNotDivideTrainsAsOneProcess) {
  if (std::string why = mpirun_missing(); !why.empty()) GTEST_SKIP() << why;
  struct Case {
    int global, micro, ranks;  // micro 0: the planner's
    const char* shares;
  };
  for (const Case& c :
       {Case{11, 3, 2, "ranks' shares: 1 x 6 + 1 x 5 samples (the smaller ones' micro-batches: 3 2)"},
        Case{9, 4, 2, "ranks' shares: 1 x 5 + 1 x 4 samples (the smaller ones' micro-batches: 3 1)"},
        Case{8, 0, 3, "ranks' shares: 2 x 3 + 1 x 2 samples (the smaller ones' micro-batches: 2)"}}) {
    const std::string tag = std::to_string(c.global) + "_" + std::to_string(c.ranks);
    std::string mpirun = kMpirun;
    mpirun.replace(mpirun.find("-np 2"), 5, "-np " + std::to_string(c.ranks));
    const std::string two = temp_dir("mpi_uneven_two_" + tag), zero = temp_dir("mpi_uneven_zero_" + tag),
                      one = temp_dir("mpi_uneven_one_" + tag);
    const std::string args = " train --n-layer 1 --n-head 2 --n-embd 32 --seq-len 32 --global-batch-size " +
                             std::to_string(c.global) +
                             (c.micro ? " --micro-batch-size " + std::to_string(c.micro) : std::string()) +
                             " --max-steps 4 --lr 1e-3 --warmup-steps 0 --log-every 1 --eval-every 0 --eval-batches 1" +
                             " --results-dir ";
    CmdResult r2 = run_command("FT_SHARD_CHUNK=1000 " + mpirun + FITTRAIN_BINARY + args + two +
                               " --zero-stage 0");
    ASSERT_EQ(r2.status, 0) << r2.output;
    EXPECT_NE(r2.output.find(c.shares), std::string::npos) << r2.output;
    CmdResult rz = run_command("FT_SHARD_CHUNK=1000 " + mpirun + FITTRAIN_BINARY + args + zero +
                               " --zero-stage 1");
    ASSERT_EQ(rz.status, 0) << rz.output;
    CmdResult r1 = run_command(std::string("OMP_NUM_THREADS=1 ") + FITTRAIN_BINARY + args + one);
    ASSERT_EQ(r1.status, 0) << r1.output;

    const std::string c2 = checkpoint_path(checkpoint_dir(two), 4), cz = checkpoint_path(checkpoint_dir(zero), 4),
                      c1 = checkpoint_path(checkpoint_dir(one), 4);
    for (const char* section : {"params", "adam_m", "adam_v"}) {
      const std::vector<float> p2 = checkpoint_floats(c2, section), pz = checkpoint_floats(cz, section),
                               p1 = checkpoint_floats(c1, section);
      ASSERT_EQ(p2.size(), p1.size()) << section;
      ASSERT_EQ(pz.size(), p1.size()) << section;
      const double max_rel = max_rel_diff(p2, p1, p1), max_rel_zero = max_rel_diff(pz, p1, p1);
      std::printf("global batch %d on %d ranks, %s: max |ranks - one process| / max |value| = %.3g\n", c.global,
                  c.ranks, section, max_rel);
      EXPECT_LT(max_rel, 1e-5) << section;
      EXPECT_LT(max_rel_zero, 1e-5) << section << ": ZeRO-1";
      if (c.ranks == 2)
        EXPECT_EQ(0, std::memcmp(p2.data(), pz.data(), p2.size() * sizeof(float))) << section << ": ZeRO-1 differs";
    }
  }
}

}  // namespace
}  // namespace ft
