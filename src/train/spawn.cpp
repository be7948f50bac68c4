#include "train/spawn.h"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <set>
#include <sstream>
#include <string>

#include "backend/backend.h"
#include "core/batch.h"
#include "core/error.h"
#include "dist/communicator.h"
#include "dist/launch.h"
#include "train/run_checks.h"

namespace ft {

namespace {

// What --devices says, checked for the faults no machine accepts ('x', '0', '0,0', '1,'),
// before any machine's count is asked: a count (>= 1) or a list of distinct device numbers.
struct DeviceSpec {
  int count = 0;          // --devices K: the first K devices
  std::vector<int> list;  // --devices 3,1: these, in this order
};

DeviceSpec read_device_spec(const std::string& spec) {
  auto number = [&](const std::string& text) {
    size_t pos = 0;
    long v = -1;
    try {
      v = std::stol(text, &pos);
    } catch (...) {
      pos = 0;
    }
    FT_USER_CHECK(pos == text.size() && !text.empty() && v >= 0 && v < INT_MAX, "--devices must be auto, a count ",
                  "or a list of device numbers like 0,2; got '", spec, "'");
    return static_cast<int>(v);
  };
  DeviceSpec out;
  if (spec.find(',') == std::string::npos) {
    out.count = number(spec);
    FT_USER_CHECK(out.count >= 1, "--devices 0: a run uses at least one device (or pass --devices auto)");
    return out;
  }
  FT_USER_CHECK(spec.back() != ',', "--devices ", spec, ": a list ends with a device number");
  std::stringstream ss(spec);
  std::string item;
  std::set<int> seen;
  while (std::getline(ss, item, ',')) {
    const int d = number(item);
    FT_USER_CHECK(seen.insert(d).second, "--devices ", spec, ": device ", d, " is listed twice");
    out.list.push_back(d);
  }
  return out;
}

}  // namespace

std::vector<int> parse_devices(const std::string& spec, int visible) {
  std::vector<int> out;
  if (spec == "auto") {
    for (int d = 0; d < visible; ++d) out.push_back(d);
    return out;
  }
  const DeviceSpec asked = read_device_spec(spec);
  const char* plural = visible == 1 ? "" : "s";
  if (asked.count > 0) {
    FT_USER_CHECK(asked.count <= visible, "--devices ", asked.count, ": this machine has ", visible,
                  " visible CUDA device", plural);
    for (int d = 0; d < asked.count; ++d) out.push_back(d);
    return out;
  }
  for (const int d : asked.list)
    FT_USER_CHECK(d < visible, "--devices ", spec, ": device ", d, " is not visible (", visible, " device", plural,
                  visible > 0 ? detail::concat(": 0..", visible - 1) : std::string(), ")");
  return asked.list;
}

std::optional<int> launch_if_several_gpus(RunConfig& rc, const std::vector<std::string>& args) {
  // A rank of a launch already (ours, mpirun's or srun's): the launcher chose its device.
  const RankPlacement placed = rank_placement_from_env();
  FT_USER_CHECK(placed.launcher != RankPlacement::Launcher::mpi || rc.devices == "auto", "--devices ", rc.devices,
                ": this run was started by mpirun or srun (", placed.world, " ranks), which places the ranks: each ",
                "takes the GPU of its rank on its machine; leave --devices out (CUDA_VISIBLE_DEVICES picks the GPUs)");
  if (placed.launcher != RankPlacement::Launcher::none) return std::nullopt;
  const bool cuda = rc.device == "cuda" || (rc.device == "auto" && cuda_available());
  if (!cuda) {
    // The list's own faults first ('x', '0,0'): what no machine accepts is named as such.
    if (rc.devices != "auto") (void)read_device_spec(rc.devices);
    FT_USER_CHECK(rc.devices == "auto" || rc.devices == "1", "--devices ", rc.devices, ": fittrain starts one ",
                  "process per GPU; CPU ranks are started by mpirun -np N (README: data parallelism)");
    return std::nullopt;
  }
  if (rc.device == "cuda") require_cuda_device();  // before any count of devices divides by it
  const std::vector<int> devices = parse_devices(rc.devices, cuda_devices());
  if (devices.size() == 1) {
    rc.cuda_device = devices[0];
    return std::nullopt;
  }
  check_run_config(rc);  // once here, not once per worker, and before any worker starts
  check_task_flags(rc);
  const int world = static_cast<int>(devices.size());
  FT_USER_CHECK(rc.global_batch_size >= world, "--global-batch-size ", rc.global_batch_size, " is smaller than the ",
                world, " GPUs: each needs at least one sample a step (or pass --devices)");

  char self[PATH_MAX] = {0};
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  FT_CHECK(n > 0, "cannot find this program's path (/proc/self/exe)");
  std::vector<WorkerSpec> workers;
  std::string map;
  for (int r = 0; r < world; ++r) {
    WorkerSpec w;
    w.argv.push_back(self);
    w.argv.insert(w.argv.end(), args.begin(), args.end());
    // Everything else is inherited, NCCL_NVLS_ENABLE and its siblings included.
    w.env = {{kEnvRank, std::to_string(r)},          {kEnvWorldSize, std::to_string(world)},
             {kEnvLocalRank, std::to_string(r)},     {kEnvDevice, std::to_string(devices[static_cast<size_t>(r)])}};
    w.label = "rank " + std::to_string(r) + " (cuda:" + std::to_string(devices[static_cast<size_t>(r)]) + ")";
    map += (r ? ", " : "") + std::to_string(r) + " -> cuda:" + std::to_string(devices[static_cast<size_t>(r)]);
    workers.push_back(std::move(w));
  }
  // `plan --json` keeps stdout for the JSON rank 0 prints.
  std::FILE* say = rc.json ? stderr : stdout;
  // "16 = 2 x 8 per GPU", or with a batch that does not divide "33 = 1 x 17 + 1 x 16 per GPU".
  std::fprintf(say,
               "launch     %d worker processes, one per GPU (rank -> device: %s); global batch %lld = %s "
               "per GPU; rank 0 prints and writes the results\n",
               world, map.c_str(), static_cast<long long>(rc.global_batch_size),
               rank_shares_text(static_cast<uint64_t>(rc.global_batch_size), world).c_str());
  std::fflush(say);
  return run_workers(workers, kEnvRendezvous);  // which makes and removes the rendezvous folder
}

}  // namespace ft
