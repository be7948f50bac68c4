// GPU ranks started by mpirun that need one GPU only: checks made before NCCL starts. (Both
// ranks take cuda:0 here; a rank refused before NCCL ends the job before NCCL would refuse
// two ranks on one device.) Skipped without a GPU or without mpirun (on the device: Debian's
// Open MPI carried along, scripts/device_mpi_env.sh).
#include <gtest/gtest.h>

#include <string>

#include "backend/backend.h"
#include "cli/cli_util.h"
#include "dist/mpi_util.h"

namespace ft {
namespace {
using namespace ft::testing;

// mpirun passes a variable to the ranks on other machines only when named (-x): such a rank
// could start NCCL with NVLink multicast on while rank 0's is off. Here rank 1 is given
// another value of TORCH_SYMM_MEM_DISABLE_MULTICAST (which fittrain itself does not read, and
// which stays set: these switches are never cleared on the shared machines); it is refused
// before NCCL starts, naming the variable and rank 0's value.
TEST(GPU_MpiRanks, ARankWithOtherMulticastSwitchesThanRankZeroIsRefusedBeforeNccl) {
  if (cuda_devices() < 1) GTEST_SKIP() << "needs a CUDA device";
  if (std::string why = mpirun_missing(); !why.empty()) GTEST_SKIP() << why;
  const std::string d = temp_dir("mpi_gpu_switches");
  const std::string args = std::string(FITTRAIN_BINARY) +
                           " train --n-layer 1 --n-head 4 --n-embd 256 --seq-len 64 --global-batch-size 4 "
                           "--max-steps 1 --results-dir " + d;
  std::string cmd = "TORCH_SYMM_MEM_DISABLE_MULTICAST=1 " + timed_mpirun(120);
  cmd.replace(cmd.find("-np 2 "), 6,
              "-np 1 " + args + " : -np 1 env TORCH_SYMM_MEM_DISABLE_MULTICAST=yes " + args);
  CmdResult r = run_command(cmd);
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("this rank (1 of 2) has TORCH_SYMM_MEM_DISABLE_MULTICAST=yes (rank 0: "
                          "TORCH_SYMM_MEM_DISABLE_MULTICAST=1): every GPU rank must see the variables that keep "
                          "NVLink multicast off as rank 0 does, before NCCL starts"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("this is NCCL"), std::string::npos) << r.output;  // refused before NCCL
}

}  // namespace
}  // namespace ft
