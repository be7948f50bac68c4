// What every rank of an mpirun job plans: one plan, printed once, agreed over ranks whose
// budgets differ, and refusals that name a value every rank takes; and the one-process
// commands refusing several ranks. Skips cleanly when mpirun is not installed or this build
// has no MPI.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <set>
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

// Every value named by refused ranks, from `pattern`'s first group; fails when there is none.
std::set<std::string> values_named(const std::string& output, const std::string& pattern) {
  std::set<std::string> values;
  const std::regex re(pattern);
  for (auto it = std::sregex_iterator(output.begin(), output.end(), re); it != std::sregex_iterator(); ++it)
    values.insert((*it)[1].str());
  EXPECT_FALSE(values.empty()) << "no '" << pattern << "' in:\n" << output;
  return values;
}

// A refusal names a value every rank takes, not what its own budget alone would: the least
// micro-batch and the most memory any refused rank names. Rank 0 (4GiB) alone named
// micro-batch 10 for GPT-2 124M, which rank 1 (2500MiB) refuses (it fits 4), and the host
// limits two CPU ranks named differed (39 and 42 MiB), so the one printed first could be
// refused again. Each value named is taken back to the same ranks and must plan.
TEST(MpiE2E, ARefusalNamesAValueEveryRankTakes) {
  if (std::string why = mpirun_missing(); !why.empty()) GTEST_SKIP() << why;
  auto two_budgets = [](const std::string& flags) {
    const std::string args = std::string(FITTRAIN_BINARY) + " plan --model gpt2 --global-batch-size 32 " + flags +
                             " --memory-limit ";
    std::string cmd = kMpirun;
    cmd.replace(cmd.find("-np 2 "), 6, "-np 1 " + args + "4GiB : -np 1 " + args + "2500MiB");
    return run_command(cmd);
  };
  CmdResult r = two_budgets("--micro-batch-size 16");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_EQ(values_named(r.output, "the largest micro-batch that fits is ([0-9]+)"), std::set<std::string>{"4"})
      << r.output;
  // Next to a budget that is the rank's own, the message says whose the value is.
  EXPECT_NE(r.output.find(" of 2; the value named is one every rank takes]"), std::string::npos) << r.output;
  r = two_budgets("--micro-batch-size 4");
  EXPECT_EQ(r.status, 0) << r.output;
  // --grad-accum-steps 2 gives micro-batches of 8: the steps named give micro-batches of 4.
  r = two_budgets("--grad-accum-steps 2");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_EQ(values_named(r.output, "pass --grad-accum-steps ([0-9]+) or leave it at auto"), std::set<std::string>{"4"})
      << r.output;
  // Micro-batches of 16, refused by both: the steps named come from the least micro-batch.
  r = two_budgets("--grad-accum-steps 1");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_EQ(values_named(r.output, "pass --grad-accum-steps ([0-9]+) or leave it at auto"), std::set<std::string>{"4"})
      << r.output;
  r = two_budgets("--grad-accum-steps 4");
  EXPECT_EQ(r.status, 0) << r.output;

  // The budgets may differ between the ranks; the flags that train the model may not. The same
  // value however written is one (1e-3 and 0.001 are read into one number).
  r = two_budgets("--micro-batch-size 4 --lr 1e-3 --global-seed 7");
  EXPECT_EQ(r.status, 0) << r.output;
  {
    std::string cmd = kMpirun;
    const std::string args = std::string(FITTRAIN_BINARY) + " plan --model gpt2 --global-batch-size 32 --lr ";
    cmd.replace(cmd.find("-np 2 "), 6, "-np 1 " + args + "1e-3 : -np 1 " + args + "0.001");
    r = run_command(cmd);
    EXPECT_EQ(r.status, 0) << r.output;
    cmd = kMpirun;
    cmd.replace(cmd.find("-np 2 "), 6, "-np 1 " + args + "1e-3 : -np 1 " + args + "2e-3");
    r = run_command(cmd);
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_NE(r.output.find("this rank (1 of 2) was given --lr 0.002 (rank 0: 0.001): every rank of a run takes "
                            "the same flags"),
              std::string::npos)
        << r.output;
    // Rank 0 the odd one of three: each other rank can only compare itself with rank 0, and says
    // that every rank but rank 0 differs from it.
    cmd = kMpirun;
    cmd.replace(cmd.find("-np 2 "), 6, "-np 1 " + args + "2e-3 : -np 2 " + args + "1e-3");
    r = run_command(cmd);
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_NE(r.output.find("was given --lr 0.001 (rank 0: 0.002)"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("(every rank but rank 0 differs from rank 0 here: rank 0 may be the one apart)"),
              std::string::npos)
        << r.output;
  }

  const std::string host_plan = std::string(kMpirun) + FITTRAIN_BINARY + " plan --device cpu --host-memory-limit ";
  r = run_command(host_plan + "20MiB");
  EXPECT_EQ(r.status, 2) << r.output;
  const std::set<std::string> limits = values_named(r.output, "--host-memory-limit ([0-9]+MiB) fits");
  ASSERT_EQ(limits.size(), 1u) << r.output;
  r = run_command(host_plan + *limits.begin());
  EXPECT_EQ(r.status, 0) << r.output;
}

}  // namespace
}  // namespace ft
