// What an mpirun/srun GPU rank compares with rank 0's before NCCL starts (dist/multicast_switches.h).
#include "dist/multicast_switches.h"

#include <gtest/gtest.h>

#include "scoped_env.h"

namespace ft {
namespace {

TEST(MulticastSwitches, EachVariableIsReadAsSetOrUnset) {
  ScopedEnv nvls("NCCL_NVLS_ENABLE", "0");
  ScopedEnv symm("TORCH_SYMM_MEM_DISABLE_MULTICAST", nullptr);
  ScopedEnv shmem("NVSHMEM_DISABLE_NVLS", "1");
  EXPECT_EQ(multicast_switches(),
            "NCCL_NVLS_ENABLE=0\nTORCH_SYMM_MEM_DISABLE_MULTICAST unset\nNVSHMEM_DISABLE_NVLS=1\n");
}

TEST(MulticastSwitches, TheFirstVariableApartIsNamedWithRankZerosValue) {
  const std::string rank0 = "NCCL_NVLS_ENABLE=0\nTORCH_SYMM_MEM_DISABLE_MULTICAST=1\nNVSHMEM_DISABLE_NVLS=1\n";
  EXPECT_EQ(multicast_switch_apart(rank0, rank0), "");
  EXPECT_EQ(multicast_switch_apart("NCCL_NVLS_ENABLE unset\nTORCH_SYMM_MEM_DISABLE_MULTICAST=1\nNVSHMEM_DISABLE_NVLS=1\n",
                                   rank0),
            "NCCL_NVLS_ENABLE unset (rank 0: NCCL_NVLS_ENABLE=0)");
  EXPECT_EQ(multicast_switch_apart("NCCL_NVLS_ENABLE=0\nTORCH_SYMM_MEM_DISABLE_MULTICAST=1\nNVSHMEM_DISABLE_NVLS=0\n",
                                   rank0),
            "NVSHMEM_DISABLE_NVLS=0 (rank 0: NVSHMEM_DISABLE_NVLS=1)");
}

}  // namespace
}  // namespace ft
