// What every rank of an mpirun job plans: one plan, printed once, agreed over ranks whose
// budgets differ; and the one-process commands refusing several ranks. Skips cleanly when
// mpirun is not installed or this build has no MPI.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "cli/cli_util.h"
#include "dist/mpi_util.h"

namespace ft {
namespace {
using namespace ft::testing;

// Under mpirun -np 2: `plan` plans one rank of the two on both and prints once (rank 0);
// the commands that run as one process (they write files a second rank would race for)
// refuse, naming the command and the rank, before touching anything.
TEST(MpiE2E, PlanPrintsOnceAndOneProcessCommandsRefuseSeveralRanks) {
  if (std::string why = mpirun_missing(); !why.empty()) GTEST_SKIP() << why;
  const std::string d = temp_dir("mpi_one_process_commands");
  CmdResult plan = run_command(std::string(kMpirun) + FITTRAIN_BINARY +
                               " plan --n-layer 1 --n-head 2 --n-embd 32 --seq-len 32 --global-batch-size 8");
  ASSERT_EQ(plan.status, 0) << plan.output;
  size_t chosen = 0;
  for (size_t at = 0; (at = plan.output.find("chosen     global batch 8", at)) != std::string::npos; ++at) ++chosen;
  EXPECT_EQ(chosen, 1u) << plan.output;
  EXPECT_NE(plan.output.find("x 2 rank(s)"), std::string::npos) << plan.output;
  for (const std::string cmd : {"sample --prompt hi --results-dir " + d, "export --format hf --out " + d + "/hf --results-dir " + d,
                                "prepare --synthetic eit --out " + d + "/eit"}) {
    CmdResult r = run_command(std::string(kMpirun) + FITTRAIN_BINARY + " " + cmd);
    EXPECT_EQ(r.status, 2) << cmd << "\n" << r.output;
    const std::string name = cmd.substr(0, cmd.find(' '));
    EXPECT_NE(r.output.find("fittrain " + name + " runs as one process"), std::string::npos) << r.output;
    // (whichever rank says it first: mpirun ends the other at the first failure)
    EXPECT_NE(r.output.find(" of 2 (mpirun or srun): start it without the launcher"), std::string::npos) << r.output;
  }
  EXPECT_FALSE(std::filesystem::exists(d + "/eit")) << "prepare wrote under mpirun";
}

// Ranks with different budgets agree on the most memory-saving choices first, then on a
// micro-batch every rank takes under them. Here rank 0 (4GiB) alone fits GPT-2 124M without
// recompute at micro-batch 1, and rank 1 (2500MiB) needs recompute, at micro-batch 4: the run
// takes recompute at 4 (4 steps). It paired rank 1's recompute with rank 0's micro-batch of 1
// (16 steps). Two budgets through mpirun's MPMD form, one per rank; plan only, nothing trained.
TEST(MpiE2E, RanksWithDifferentBudgetsAgreeOnAMicroBatchUnderTheirAgreedRecompute) {
  if (std::string why = mpirun_missing(); !why.empty()) GTEST_SKIP() << why;
  const std::string args = std::string(FITTRAIN_BINARY) + " plan --model gpt2 --global-batch-size 32 --memory-limit ";
  std::string cmd = kMpirun;
  cmd.replace(cmd.find("-np 2 "), 6, "-np 1 " + args + "4GiB : -np 1 " + args + "2500MiB");
  CmdResult plan = run_command(cmd);
  ASSERT_EQ(plan.status, 0) << plan.output;
  EXPECT_NE(plan.output.find("chosen     global batch 32 = micro-batch 4 x 4 accumulation x 2 rank(s)"),
            std::string::npos) << plan.output;
  EXPECT_NE(plan.output.find("recompute block"), std::string::npos) << plan.output;
}

}  // namespace
}  // namespace ft
