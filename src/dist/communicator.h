// Communicator: how the ranks of a data-parallel run talk. Rank and world size come from
// here (never from constants); collectives act on device tensors in place, on the stream the
// caller names (so reduction can run beside compute), or on host scalars (losses, counts,
// norms, the agreed plan). One implementation per transport: the single-process one here;
// NCCL (GPU ranks) and MPI (CPU ranks, multi-node launch) implement the same interface.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "backend/backend.h"
#include "core/tensor.h"

namespace ft {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual std::string describe() const = 0;  // e.g. "single process"

  // Sum over ranks, in place.
  virtual void all_reduce_sum(Tensor t) = 0;
  virtual void all_reduce_sum(std::span<double> values) = 0;
  // The minimum over ranks (e.g. the largest micro-batch every rank can fit).
  virtual int64_t all_reduce_min(int64_t value) = 0;
  // out (t.numel() / world elements) = this rank's shard of the sum over ranks of t.
  virtual void reduce_scatter_sum(Tensor t, Tensor out) = 0;
  // out = every rank's `shard` concatenated in rank order.
  virtual void all_gather(Tensor shard, Tensor out) = 0;
  // t from rank `root` to every rank.
  virtual void broadcast(Tensor t, int root) = 0;
  virtual void barrier() = 0;
};

// One rank: every collective is the identity (a copy where input and output differ).
std::unique_ptr<Communicator> make_single_process_communicator(Backend& backend);

// The run's communicator: MPI (dist/mpi_communicator.h) when a launcher (mpirun, srun)
// started this process as one of several ranks, else the single process. UserError when
// several ranks were launched but this build has no MPI, or they are on a CUDA device
// (GPU ranks use NCCL: not in this build yet).
std::unique_ptr<Communicator> make_communicator(Backend& backend);

}  // namespace ft
