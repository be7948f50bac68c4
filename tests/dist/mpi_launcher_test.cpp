// Ranks started by another launcher than fittrain's (mpirun, srun), as their environment and
// their signals reach them: srun's variables without --ntasks-per-node, a launcher whose ranks
// MPI does not wire together, a job manager that signals every rank twice, --devices given to
// ranks already placed. CPU ranks under Open MPI's mpirun stand in for srun (its variables
// swapped for Slurm's). Skips cleanly when mpirun is not installed or this build has no MPI.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "cli/cli_util.h"
#include "dist/mpi_util.h"
#include "train/checkpoint_dir.h"

namespace ft {
namespace {
using namespace ft::testing;

const char* kTiny = " --n-layer 1 --n-head 1 --n-embd 32 --seq-len 32 --global-batch-size 4 --eval-every 0";

// A script that runs its arguments as an srun task would see them: Open MPI's rank variables
// replaced by Slurm's, and no SLURM_NTASKS_PER_NODE (srun sets it only under --ntasks-per-node).
std::string slurm_like(const std::string& dir) {
  const std::string path = dir + "/slurm_like.sh";
  std::ofstream(path) << "#!/bin/sh\n"
                         "r=$OMPI_COMM_WORLD_RANK\n"
                         "unset OMPI_COMM_WORLD_SIZE OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_LOCAL_RANK "
                         "OMPI_COMM_WORLD_LOCAL_SIZE SLURM_NTASKS_PER_NODE\n"
                         "SLURM_STEP_NUM_TASKS=2 SLURM_PROCID=$r SLURM_LOCALID=$r exec \"$@\"\n";
  std::filesystem::permissions(path, std::filesystem::perms::owner_all);
  return path;
}

// Two srun tasks on one machine share its memory: MPI says they are 2 there (each planned for
// the whole machine, so P ranks over-committed its memory P times).
TEST(MpiLauncher, SlurmRanksWithoutTasksPerNodeShareTheMachinesMemory) {
  if (std::string why = mpirun_missing(); !why.empty()) GTEST_SKIP() << why;
  const std::string d = temp_dir("mpi_slurm_like");
  CmdResult r = run_command(timed_mpirun(120) + slurm_like(d) + " " + FITTRAIN_BINARY + " train" + kTiny +
                            " --max-steps 2 --results-dir " + d + "/run");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("ranks      2, this is "), std::string::npos) << r.output;  // MPI: the test hides the GPUs (cli_util.h)
  EXPECT_NE(r.output.find("rank 0 of 2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("shared by the 2 ranks on this machine"), std::string::npos) << r.output;
}

// A process that the environment calls rank 1 of 2 but that MPI made a world of its own (srun
// without an MPI plugin) is refused at once: alone it trained by itself, and a GPU rank 0
// waited in NCCL's start for --comm-timeout.
TEST(MpiLauncher, RanksThatMpiDoesNotWireTogetherAreRefused) {
  if (!mpi_available()) GTEST_SKIP() << "this build has no MPI";
  const std::string d = temp_dir("mpi_not_wired");
  CmdResult r = run_fittrain(std::string("train") + kTiny + " --max-steps 2 --results-dir " + d, 120,
                             "SLURM_STEP_NUM_TASKS=2 SLURM_PROCID=1");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("started this process as rank 1 of 2 but MPI sees rank 0 of 1"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("srun --mpi=pmix"), std::string::npos) << r.output;
}

// A job manager's SIGTERM reaches every rank, and may come twice (scancel through srun and to
// the task): the ranks still finish their step and save it (the second one killed them).
TEST(MpiLauncher, ASecondSignalToEveryRankStillEndsWithACheckpoint) {
  if (std::string why = mpirun_missing(); !why.empty()) GTEST_SKIP() << why;
  const std::string d = temp_dir("mpi_two_signals");
  // The ranks are mpirun's children; their pids come from /proc (no procps needed). Both
  // signals go to every rank, 50 ms apart, once the ranks train: the second lands while the
  // checkpoint is written (each of its writes takes 50 ms here).
  const std::string script =
      "FT_TEST_SLOW_CHECKPOINT_MS=50 " + timed_mpirun(120) + FITTRAIN_BINARY + " train" + kTiny + " --max-steps 1000000 --log-every 1 --ckpt-every 0" +
      " --results-dir " + d + "/run > " + d + "/log 2>&1 &\n"
      "m=$!\n"
      "for i in $(seq 600); do grep -q 'step      3/' " + d + "/log 2>/dev/null && break; sleep 0.1; done\n"
      "ranks=''\n"
      "mp=$(cat /proc/$m/task/*/children 2>/dev/null)\n"  // timeout's child, mpirun
      "for c in $mp; do ranks=\"$ranks $c $(cat /proc/$c/task/*/children 2>/dev/null)\"; done\n"
      "for p in $ranks; do [ \"$(cat /proc/$p/comm 2>/dev/null)\" = fittrain ] && kill -TERM $p; done\n"
      "sleep 0.05\n"
      "for p in $ranks; do [ \"$(cat /proc/$p/comm 2>/dev/null)\" = fittrain ] && kill -TERM $p; done\n"
      "wait $m; echo \"exit $?\"; cat " + d + "/log\n";
  std::ofstream(d + "/two_signals.sh") << script;
  CmdResult r = run_command("sh " + d + "/two_signals.sh");
  EXPECT_NE(r.output.find("exit 130"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("signal 15: stopping after step"), std::string::npos) << r.output;
  EXPECT_FALSE(list_checkpoints(checkpoint_dir(d + "/run")).empty()) << r.output;
}

// Ranks already placed by mpirun or srun take the GPU of their rank on the machine: --devices
// would be ignored there, so it is refused, saying so.
TEST(MpiLauncher, DevicesUnderMpirunIsRefused) {
  if (std::string why = mpirun_missing(); !why.empty()) GTEST_SKIP() << why;
  const std::string d = temp_dir("mpi_devices");
  CmdResult r = run_command(timed_mpirun(60) + FITTRAIN_BINARY + " train" + kTiny + " --max-steps 1 --devices 0,1" +
                            " --results-dir " + d);
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("--devices 0,1: this run was started by mpirun or srun (2 ranks)"), std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace ft
