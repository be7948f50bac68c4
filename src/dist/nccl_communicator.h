// The NCCL communicator: GPU ranks of one data-parallel run, one process per GPU.
//
// Built when CMake finds NCCL next to the CUDA backend (FITTRAIN_HAVE_NCCL); otherwise every
// function here refuses with a UserError and nothing else changes. Ranks join one NCCL
// communicator through a unique id made by rank 0 and handed to the others by whoever started
// them: fittrain's own launcher (a file in its rendezvous folder, dist/launch.h) or MPI
// (MPI_Bcast, dist/mpi_communicator.h) for mpirun/srun launches across machines.
//
// Device buffers are reduced in place on the stream the caller names; host values travel
// through a small device scratch buffer on the compute stream. A watchdog thread polls
// ncclCommGetAsyncError and the completion of every queued collective: an NCCL error, or a
// collective (or the initialisation) that has not finished after the timeout because a peer
// died or hangs, ends this process with a message naming the rank, the device and the cause
// (the launcher then ends the others), never a silent hang.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dist/communicator.h"

namespace ft {

bool nccl_available();
// The device memory NCCL's communicators hold in each rank of a run, for `fittrain plan
// --ranks N` in one process (no communicator exists to measure; a run measures it after its
// start, NcclCommunicator). Measured on 2 H200s with NCCL 2.28, the main communicator (16
// CTAs, FT_NCCL_CTAS) and the background one (8) together: 0.97 GiB (docs/PERFORMANCE.md,
// session 37; 1.29 GiB with NCCL's own 32 CTAs); its ring and tree keep a few peers per
// channel whatever the ranks, so more ranks on one machine hold about as much. Rounded up, so
// such a plan errs small rather than promising what the run cannot hold.
inline constexpr size_t kNcclDeviceBytesEstimate = size_t{5} << 28;  // 1.25 GiB
// "2.28.3" style, or why not, for --version.
std::string nccl_build_description();
// A new NCCL unique id (128 bytes). Rank 0 makes it; it also starts NCCL's bootstrap
// listener in this process, so the process that calls it must be a rank of the run.
std::vector<uint8_t> nccl_unique_id();
// Joins the communicator of `world` ranks named by `id` as `rank`, on the backend's CUDA
// device. `where` names this rank's device in messages ("cuda:1").
std::unique_ptr<Communicator> make_nccl_communicator(Backend& backend, int rank, int world,
                                                     const std::vector<uint8_t>& id, double timeout_s,
                                                     const std::string& where);

}  // namespace ft
