// Which communicator a run gets, from how its processes were started (dist/communicator.h).
#include <algorithm>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "dist/communicator.h"
#include "dist/launch.h"
#include "dist/mpi_communicator.h"
#include "dist/multicast_switches.h"
#include "dist/nccl_communicator.h"

namespace ft {

namespace {

// A launcher's variable: its value, or -1 when unset or not a non-negative integer.
int env_index(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return -1;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  return (end && *end == '\0' && n >= 0 && n < (1 << 30)) ? static_cast<int>(n) : -1;
}

int first_set(std::initializer_list<const char*> names, int fallback) {
  for (const char* n : names)
    if (int v = env_index(n); v >= 0) return v;
  return fallback;
}

}  // namespace

// Every launcher variable is read here (the world size too), so they are parsed one way.
int launcher_rank() { return first_set({"OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"}, 0); }

int launcher_world_size() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS"})
    if (int n = env_index(name); n >= 1) return n;
  return 1;
}

RankPlacement rank_placement_from_env() {
  RankPlacement p;
  if (std::optional<LaunchedRank> l = launched_rank_from_env()) {
    p.launcher = RankPlacement::Launcher::fittrain;
    p.rank = l->rank;
    p.world = l->world;
    p.local_rank = l->local_rank;
    p.local_world = l->world;  // fittrain's launcher starts all its workers on the machine it runs on
    p.device = l->device;
    p.rendezvous = l->rendezvous;
    return p;
  }
  if (launcher_world_size() > 1) {
    p.launcher = RankPlacement::Launcher::mpi;
    p.world = launcher_world_size();
    // Open MPI, MPICH/Hydra (PMI), Slurm: the rank on this machine picks the GPU.
    p.rank = launcher_rank();
    p.local_rank = first_set({"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}, 0);
    // Slurm names the count per node only under --ntasks-per-node; a Session asks MPI (mpi_join).
    p.local_world = std::max(1, first_set({"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"}, 1));
  }
  return p;
}

std::unique_ptr<Communicator> make_communicator(Backend& backend, const RankPlacement& pl, double timeout_s) {
  if (pl.launcher == RankPlacement::Launcher::none || pl.world <= 1) return make_single_process_communicator(backend);
  if (backend.device() == DeviceKind::cpu) {
    FT_USER_CHECK(pl.launcher == RankPlacement::Launcher::mpi, "fittrain starts one worker per GPU; CPU ranks are ",
                  "started by mpirun or srun (README: data parallelism)");
    return make_mpi_communicator(backend, timeout_s);
  }
  // GPU ranks: NCCL, with rank 0's unique id handed over by the launcher's channel.
  // NCCL >= 2.22 connects its algorithms' peers lazily, at their first use: device memory
  // taken mid-run, outside the plan. Connecting everything at initialisation instead puts
  // that memory before the runtime is measured (Session). A user's own setting is kept.
  setenv("NCCL_RUNTIME_CONNECT", "0", /*overwrite=*/0);
  const std::string where = "cuda:" + std::to_string(pl.device >= 0 ? pl.device : 0);
  std::vector<uint8_t> id;
  if (pl.launcher == RankPlacement::Launcher::fittrain) {
    id = share_from_rank0(pl.rendezvous, pl.rank, pl.generation, timeout_s, 128, nccl_unique_id);
  } else {
    // Before NCCL starts: a rank on another machine has only the variables mpirun was told to
    // pass (-x), and one without rank 0's NCCL_NVLS_ENABLE=0 would start NCCL with NVLink
    // multicast on (dist/multicast_switches.h).
    const std::string mine = multicast_switches();
    const std::vector<uint8_t> theirs =
        mpi_share_from_rank0(std::vector<uint8_t>(mine.begin(), mine.end()), timeout_s);
    const std::string apart = multicast_switch_apart(mine, std::string(theirs.begin(), theirs.end()));
    FT_USER_CHECK(apart.empty(), "this rank (", pl.rank, " of ", pl.world, ") has ", apart,
                  ": every GPU rank must see the variables that keep NVLink multicast off as rank 0 does, before ",
                  "NCCL starts; mpirun passes a variable to the ranks on other machines only when named (mpirun -x ",
                  "NCCL_NVLS_ENABLE -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS ...), srun unless ",
                  "--export leaves it out");
    id = mpi_share_from_rank0(pl.rank == 0 ? nccl_unique_id() : std::vector<uint8_t>(), timeout_s);
  }
  return make_nccl_communicator(backend, pl.rank, pl.world, id, timeout_s, where);
}

}  // namespace ft
