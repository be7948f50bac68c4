// One worker process per GPU: `fittrain train` on a machine with several GPUs starts itself
// once per GPU (dist/launch.h) with the same flags, and waits. The workers find each other
// through NCCL (rank 0 publishes the NCCL id in a private rendezvous folder).
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "train/config.h"

namespace ft {

// The CUDA devices --devices names on a machine with `visible` of them: "auto" all, "K" the
// first K, "a,b,..." those. UserError naming the flag for anything else.
std::vector<int> parse_devices(const std::string& spec, int visible);

// Runs the workers and returns the job's exit status when this `train` (or `plan`) should use
// several GPUs; nullopt when it runs in this process (a worker, a CPU run, or one GPU: then
// rc.cuda_device is set to it). args: the command line after the program name.
std::optional<int> launch_if_several_gpus(RunConfig& rc, const std::vector<std::string>& args);

}  // namespace ft
