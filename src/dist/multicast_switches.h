// The environment variables that keep NVLink multicast off (NCCL, PyTorch's symmetric memory,
// NVSHMEM). Shared GPU machines require them: a program that uses multicast can take the
// host's GPUs out of service for a day. fittrain never sets or clears them; its own workers
// inherit them. Ranks that mpirun starts on other machines get only the variables named with
// -x, so each mpirun/srun GPU rank compares what it has with rank 0's before NCCL starts
// (dist/make_communicator.cpp).
#pragma once
#include <array>
#include <string>

namespace ft {

inline constexpr std::array<const char*, 3> kMulticastSwitches = {"NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST",
                                                                   "NVSHMEM_DISABLE_NVLS"};

// This process's values, one per line: "NAME=value", or "NAME unset".
std::string multicast_switches();

// "" when the two texts (multicast_switches) agree; else the first variable apart, as
// "NCCL_NVLS_ENABLE unset (rank 0: NCCL_NVLS_ENABLE=0)".
std::string multicast_switch_apart(const std::string& here, const std::string& rank0);

}  // namespace ft
