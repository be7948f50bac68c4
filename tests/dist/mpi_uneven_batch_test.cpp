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
// not rank x its share there); and 5 in micro-batches of 1 on 2 ranks (shares 3 = 1 + 1 + 1 and
// 2 = 0 + 1 + 1: the smaller share skips its empty first micro-step). Every loss unit weighs 1 / the global batch's units on every
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
        Case{8, 0, 3, "ranks' shares: 2 x 3 + 1 x 2 samples (the smaller ones' micro-batches: 2)"},
        Case{5, 1, 2, "ranks' shares: 1 x 3 + 1 x 2 samples (the smaller ones' micro-batches: 0 1 1; the empty one is skipped)"}}) {
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

// Out of memory mid-run on an uneven batch, re-planned down to micro-batch 1: global batch 5 on
// 2 ranks at a limit that fits micro-batch 2 (shares 3 = 2 + 1 and 2 = 1 + 1); rank 1 fails in
// step 2, and the re-plan below that plan is micro-batch 1 (3 = 1 + 1 + 1, 2 = 0 + 1 + 1). It
// ended the run before session 46 (the smaller share had no sample to spare); now the run
// trains its 4 steps, each loss the undisturbed run's up to the summation order (1e-4
// relative, as MpiE2E.OutOfMemoryOnOneRankMidStepReplansEveryRank).
TEST(MpiE2E, AnUnevenBatchReplannedDownToMicroBatchOneGoesOn) {
  if (std::string why = mpirun_missing(); !why.empty()) GTEST_SKIP() << why;
  const std::string args = " train --n-layer 1 --n-head 2 --n-embd 32 --seq-len 32 --global-batch-size 5 "
                           "--max-steps 4 --lr 1e-3 --warmup-steps 0 --log-every 1 --eval-every 0 --ckpt-every 0 "
                           "--recompute none --eval-batch-size 1 --zero-stage 0 --memory-limit 750KiB --metrics-file ";
  const std::string ref = temp_dir("mpi_uneven_replan_ref"), d = temp_dir("mpi_uneven_replan");
  CmdResult a = run_command(timed_mpirun(120) + FITTRAIN_BINARY + args + ref + "/m.jsonl --results-dir " + ref);
  ASSERT_EQ(a.status, 0) << a.output;
  ASSERT_NE(a.output.find("global batch 5 = micro-batch 2 x 2 accumulation x 2 rank(s)"), std::string::npos)
      << a.output;
  CmdResult r = run_command("FT_TEST_OOM_AT=2@1 " + timed_mpirun(120) + FITTRAIN_BINARY + args + d +
                            "/m.jsonl --results-dir " + d);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("re-plan    out of memory during step 2 on 1 of 2 ranks"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("global batch 5 = micro-batch 1 x 3 accumulation x 2 rank(s)"), std::string::npos)
      << r.output;
  const auto want = step_losses(ref + "/m.jsonl"), got = step_losses(d + "/m.jsonl");
  ASSERT_EQ(want.size(), 4u);
  ASSERT_EQ(got.size(), 4u) << read_file(d + "/m.jsonl");
  for (int64_t step = 1; step <= 4; ++step)
    EXPECT_NEAR(got.at(step), want.at(step), 1e-4 * std::fabs(want.at(step))) << "step " << step;
}

}  // namespace
}  // namespace ft
