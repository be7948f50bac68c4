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

#include "core/env.h"
#include "dist/communicator.h"

namespace ft {

bool nccl_available();
// The CTAs of NCCL's two communicators, from the environment (a UserError names a bad value).
// The main one: FT_NCCL_CTAS (default 16; 0: NCCL's own choice, 32 channels on 2 H200s). NCCL
// keeps its buffers per channel, at most one channel per CTA, so the cap is also the device
// memory it holds: on 2 H200s (GPT-2 124M, docs/PERFORMANCE.md session 37) 16 CTAs held 0.31
// GiB a rank less than NCCL's 32 at the same tokens/s (8 CTAs: 0.51 GiB less, 0.4% slower),
// and on 4 H100s (session 9) 16 ran as fast as NCCL's own.
inline int nccl_main_ctas() { return static_cast<int>(env_int_in("FT_NCCL_CTAS", 16, 0, 64)); }
// The background lane's (CommLane): FT_NCCL_BACKGROUND_CTAS (default 8; 0: no second
// communicator, one for all). On 2 H200s (session 32) 8 CTAs with 32 MiB buckets ran 0.3-0.5%
// above one communicator with 128 MiB buckets (three calls, two leases).
inline int nccl_background_ctas() { return static_cast<int>(env_int_in("FT_NCCL_BACKGROUND_CTAS", 8, 0, 32)); }

// The device memory NCCL's communicators hold in each rank of a run, for `fittrain plan
// --ranks N` in one process (no communicator exists to measure; a run measures it after its
// start, NcclCommunicator): 0.5 GiB plus 25 MiB a CTA of both communicators (NCCL's own
// choice counted as 32). Measured on 2 H200s with NCCL 2.28 (docs/PERFORMANCE.md, session 37),
// it holds 0.77-1.28 GiB for 16-40 CTAs, 19-25 MiB a CTA; this is 0.11-0.20 GiB above each, so
// such a plan errs small rather than promising what the run cannot hold. Its ring and tree
// keep a few peers per channel whatever the ranks, and the CTA cap bounds the channels, so
// more ranks on one machine hold about as much.
inline size_t nccl_device_bytes_estimate() {
  const int cap = nccl_main_ctas();
  const int main = cap > 0 ? cap : 32;
  return (size_t{1} << 29) + size_t(main + nccl_background_ctas()) * (size_t{25} << 20);
}
// The host memory NCCL's communicators hold in each rank (proxy and bootstrap threads, host
// buffers, the topology), for the host plan of that same one process: a GPT-2 XL rank of a
// 2-GPU run held 0.84 GiB when it planned, one process planning it without NCCL 0.40 GiB
// (2 H200s, session 38). Rounded up.
inline size_t nccl_host_bytes_estimate() { return size_t{512} << 20; }
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
