#include "train/rank_agreement.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>
#include <vector>

#include "core/host_name.h"
#include "dist/multicast_switches.h"
#include "dist/rank_map.h"
#include "train/results_dir.h"

namespace ft {

void agree_on_results_dir(Session& s, const std::string& results_dir) {
  const std::string rank0 = broadcast_string(s.comm(), results_dir_holder(results_dir));
  std::string here = results_dir_holder(results_dir);
  for (int i = 0; i < 50 && here != rank0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    here = results_dir_holder(results_dir);
  }
  std::error_code ec;
  const std::string where = std::filesystem::absolute(results_dir, ec).string() + " on " + host_name();
  s.agree_with_rank0(
      here,
      [&](const std::string& mine, const std::string& theirs) -> std::string {
        if (mine == theirs) return "";
        return "does not see the folder rank 0 holds: its --results-dir " + results_dir + " (" + where + ") has " +
               describe_holder(mine) + " (rank 0's: " + describe_holder(theirs) + ")";
      },
      "over several machines --results-dir must be one folder every rank sees (a shared file system), where rank 0 "
      "writes the checkpoints and every rank reads the one a run resumes from");
}

void print_ranks(Session& s) {
  Communicator& comm = s.comm();
  // What the workers see of the switches that keep NVLink multicast off on shared machines
  // (inherited from whoever started them; fittrain never sets or clears them).
  std::string switches;
  for (const char* n : kMulticastSwitches) {
    const char* v = std::getenv(n);
    switches += std::string(" ") + n + "=" + (v ? v : "(unset)");
  }
  std::printf("ranks      %d, this is %s;%s\n", comm.world_size(), comm.describe().c_str(), switches.c_str());
  // fittrain's own launcher printed its rank -> device map before starting the workers.
  if (s.placement().launcher == RankPlacement::Launcher::mpi) {
    const std::string device = s.placement().device >= 0 ? "cuda:" + std::to_string(s.placement().device) : "cpu";
    const std::vector<std::string> where = all_gather_strings(comm, rank_entry(device));
    std::printf("placement  %s\n", format_rank_map(where, std::string(11, ' ')).c_str());
  }
}

}  // namespace ft
