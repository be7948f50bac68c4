// Data parallelism over MPI (CPU ranks) when a rank fails or hangs: the job ends with a
// message naming the rank, never a hang. Skips cleanly when mpirun is not installed or this
// build has no MPI.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "cli/cli_util.h"
#include "dist/mpi_util.h"
#include "train/checkpoint_dir.h"

namespace ft {
namespace {
using namespace ft::testing;

// Six steps of a small model on 2 CPU ranks under mpirun with `env` set for both; `flags` added.
// The job must end by itself (status 124: it hung until the 120 s limit).
CmdResult run_two_ranks(const std::string& env, const std::string& flags, const std::string& dir) {
  CmdResult r = run_command(env + " " + timed_mpirun(120) + FITTRAIN_BINARY +
                            " train --n-layer 1 --n-head 2 --n-embd 32 --seq-len 32 --global-batch-size 8 --max-steps 6 "
                            "--log-every 1 --eval-every 0 " + flags + " --results-dir " + dir);
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.status, 124) << "the job hung (timeout)\n" << r.output;
  return r;
}

// A rank that fails for another reason than memory (FT_TEST_FAIL_AT) ends the job: MPI_Abort
// ends the other rank, which would wait in its next collective for ever. The job fails (mpirun
// chooses its status), the message names the rank; the checkpoint of the last completed step,
// written earlier by rank 0, stays.
TEST(MpiE2E, AFailingRankEndsTheJobNamingIt) {
  if (std::string why = mpirun_missing(); !why.empty()) GTEST_SKIP() << why;
  const std::string d = temp_dir("mpi_rank_fails");
  CmdResult r = run_two_ranks("FT_TEST_FAIL_AT=3@1", "--ckpt-every 1", d);
  EXPECT_NE(r.output.find("rank 1: error: a failure injected by FT_TEST_FAIL_AT"), std::string::npos) << r.output;
  EXPECT_TRUE(std::filesystem::exists(checkpoint_path(checkpoint_dir(d), 2))) << r.output;
}

// A rank that stops answering (FT_TEST_HANG_AT=3@1: rank 1 sleeps at step 3) leaves rank 0
// in a blocking MPI collective, which has no deadline of its own: --comm-timeout's watch ends
// rank 0 with a message naming it and the collective, and mpirun ends the job.
TEST(MpiE2E, AHangingRankTimesOutInsteadOfHangingTheJob) {
  if (std::string why = mpirun_missing(); !why.empty()) GTEST_SKIP() << why;
  const std::string d = temp_dir("mpi_rank_hangs");
  CmdResult r = run_two_ranks("FT_TEST_HANG_AT=3@1", "--comm-timeout 10", d);
  EXPECT_NE(r.output.find("rank 0 of 2 (MPI, CPU ranks)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("did not finish within 10 s"), std::string::npos) << r.output;
}

// A rank that never starts MPI (FT_TEST_HANG_BEFORE_MPI_AT=1: rank 1 sleeps before MPI_Init)
// leaves rank 0 in MPI's start, which waits for every rank and has no deadline of its own:
// --comm-timeout bounds it too, the message names the rank and the wait, mpirun ends the job.
TEST(MpiE2E, ARankThatNeverStartsMpiTimesOutInsteadOfHangingTheJob) {
  if (std::string why = mpirun_missing(); !why.empty()) GTEST_SKIP() << why;
  const std::string d = temp_dir("mpi_rank_never_starts");
  CmdResult r = run_two_ranks("FT_TEST_HANG_BEFORE_MPI_AT=1", "--comm-timeout 10", d);
  EXPECT_NE(r.output.find("rank 0 of 2 (MPI): a collective (MPI's start"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("did not finish within 10 s"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace ft
