// The MPI communicator: CPU ranks of one data-parallel run, started by mpirun or srun.
//
// Built only when CMake finds MPI (FITTRAIN_HAVE_MPI); otherwise make_mpi_communicator()
// refuses with "this build has no MPI" and everything else is unchanged. Collectives run on
// host memory with MPI_COMM_WORLD: in-place MPI_Allreduce for f32 tensors, doubles and the
// int64 minimum, MPI_Reduce_scatter_block, MPI_Allgather, MPI_Bcast, MPI_Barrier. Tensors
// must live in host memory (the CPU backend): a device tensor is an InternalError (GPU ranks
// use NCCL; MPI then only hands them NCCL's id, mpi_share_from_rank0). MPI_Init_thread (FUNNELED: only the main thread calls MPI)
// runs in make_mpi_communicator, MPI_Finalize at process exit through a static guard.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dist/communicator.h"

namespace ft {

// True when this binary was built with MPI.
bool mpi_available();
// The MPI library's own version line, or why none, for --version.
std::string mpi_build_description();

// The world size the launcher announced in the environment: OMPI_COMM_WORLD_SIZE (Open MPI's
// mpirun), PMI_SIZE (MPICH/Hydra, PMI launchers), SLURM_STEP_NUM_TASKS (srun; the batch
// script itself is a step of one task). 1 when none is set.
int launcher_world_size();
// This process's rank as the launcher announced it (OMPI_COMM_WORLD_RANK, PMI_RANK,
// SLURM_PROCID); 0 when none is set.
int launcher_rank();

// Initialises MPI (once) and returns the communicator over MPI_COMM_WORLD. UserError when
// this build has no MPI or the backend is not the CPU. `timeout_s` (--comm-timeout) bounds each
// collective: one that waits longer ends this rank with a message naming it and the call
// (mpirun then ends the others), where a blocking MPI call would wait for ever for a rank that
// hangs.
std::unique_ptr<Communicator> make_mpi_communicator(Backend& backend, double timeout_s);

// Initialises MPI (once), before any communicator, for a rank that the launcher's environment
// names `rank` of `world`. MPI's start waits for every rank to start it (a collective of the
// launcher's, with no deadline of its own): `timeout_s` bounds it as it bounds every other
// MPI wait here, so a rank that never starts MPI ends the others instead of hanging them
// (test hook: FT_TEST_HANG_BEFORE_MPI_AT=R, rank R sleeps before starting MPI). UserError
// when MPI does not see that world (srun without an MPI plugin, an mpirun of another MPI:
// each process alone in its own world would train alone, or wait in NCCL's start for ranks
// that never come), or when this build has no MPI. Returns the ranks on this machine, from
// MPI itself (MPI_Comm_split_type, shared memory): Slurm names them only under
// --ntasks-per-node. A collective of every rank, bounded by `timeout_s`.
int mpi_join(int rank, int world, double timeout_s);

// Initialises MPI (once) and returns rank 0's `bytes` on every rank (GPU ranks launched by
// mpirun/srun: NCCL's unique id), the wait bounded by `timeout_s`. UserError when this build
// has no MPI.
std::vector<uint8_t> mpi_share_from_rank0(std::vector<uint8_t> bytes, double timeout_s);

// After an error that ends this rank: when MPI runs with more than one rank, MPI_Abort (the
// other ranks would wait forever in their next collective, and MPI_Finalize at exit would
// wait for them). Does nothing otherwise.
void abort_other_ranks_on_error(int exit_code);

}  // namespace ft
