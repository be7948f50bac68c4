// Communicator: how the ranks of a data-parallel run talk. Rank and world size come from
// here (never from constants). Two kinds of collectives:
//  - on buffers in the backend's memory (gradients, parameter shards), queued on the stream
//    the caller names (null: the backend's compute stream) so a reduction can run beside
//    compute; a synchronous transport (MPI on the CPU) has finished when the call returns;
//  - on host values (losses, counts, norms, the agreed plan, a path): these return with the
//    result in hand.
// One implementation per transport: the single process (dist/single_process.cpp), MPI for CPU
// ranks (dist/mpi_communicator.h) and NCCL for GPU ranks (dist/nccl_communicator.h).
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/tensor.h"

namespace ft {

// How soon a collective on device buffers is waited for. background: it runs beside compute
// with time to spare (the backward's gradient buckets, all but the last), so a transport may
// give it fewer resources and leave the compute more of the device (NCCL: a communicator
// whose kernels take fewer CTAs, i.e. SMs, FT_NCCL_BACKGROUND_CTAS). foreground: something
// waits for it now. Transports without such a choice treat both alike.
enum class CommLane { foreground, background };

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual std::string describe() const = 0;  // e.g. "NCCL, rank 0 of 4 (cuda:0)"

  // ---- buffers in the backend's memory, on `stream` -----------------------------------
  // Sum over ranks, in place.
  virtual void all_reduce_sum(Tensor t, StreamHandle stream = {}) = 0;
  // Several in-place sums over ranks issued as one group (NCCL: one launch), e.g. the ranges
  // of one gradient bucket.
  virtual void all_reduce_group(std::span<const Tensor> parts, StreamHandle stream = {},
                                CommLane lane = CommLane::foreground) = 0;
  // ZeRO-1's collectives (optim/shard_layout.h), in place on chunks whose element count is a
  // multiple of world; rank r's piece of a chunk of n elements is [r * n / world, +n / world).
  // Several chunks issued as one group.
  // reduce_scatter_group: each rank's piece of every chunk becomes the sum over ranks of that
  // piece (the rest of the chunk is left undefined).
  virtual void reduce_scatter_group(std::span<const Tensor> chunks, StreamHandle stream = {},
                                    CommLane lane = CommLane::foreground) = 0;
  // all_gather_group: every rank's piece of every chunk reaches every rank.
  virtual void all_gather_group(std::span<const Tensor> chunks, StreamHandle stream = {}) = 0;
  // out = every rank's `shard` concatenated in rank order. In place when `shard` is this
  // rank's part of `out` (shard.data == out.data + rank * shard.bytes()).
  virtual void all_gather(Tensor shard, Tensor out, StreamHandle stream = {}) = 0;

  // ---- host values ---------------------------------------------------------------------
  virtual void all_reduce_sum(std::span<double> values) = 0;
  // The minimum over ranks (e.g. the largest micro-batch every rank can fit).
  virtual int64_t all_reduce_min(int64_t value) = 0;
  // Host memory `t` (any dtype) from rank `root` to every rank.
  virtual void broadcast(Tensor t, int root) = 0;
  // Every rank waits here for every other, bounded by the run's --comm-timeout.
  virtual void barrier() = 0;
  // The same wait, not bounded by --comm-timeout: for one rank's known long work that the
  // others wait out (rank 0 writing a checkpoint, tens of GB for GPT-2 XL). A rank that dies
  // meanwhile still ends the job (the launcher or mpirun ends the others; NCCL's errors are
  // still watched).
  virtual void barrier_without_timeout() { barrier(); }
};

// `text` of rank `root` (0 unless said) on every rank (also a point where every rank waits for it).
inline std::string broadcast_string(Communicator& comm, const std::string& text, int root = 0) {
  if (comm.world_size() == 1) return text;
  int32_t n = static_cast<int32_t>(text.size());
  comm.broadcast(Tensor(&n, DType::i32, {1}), root);
  std::vector<int32_t> words(static_cast<size_t>(n + 3) / 4, 0);
  if (comm.rank() == root) std::memcpy(words.data(), text.data(), text.size());
  if (!words.empty()) comm.broadcast(Tensor(words.data(), DType::i32, {static_cast<int64_t>(words.size())}), root);
  return std::string(reinterpret_cast<const char*>(words.data()), static_cast<size_t>(n));
}

// Every rank's `text`, in rank order, on every rank: a broadcast from each in turn (2 W small
// collectives; for what a run says once at its start, not for a step).
inline std::vector<std::string> all_gather_strings(Communicator& comm, const std::string& text) {
  std::vector<std::string> out;
  for (int r = 0; r < comm.world_size(); ++r) out.push_back(broadcast_string(comm, text, r));
  return out;
}

// How many ranks pass here = true (a collective: every rank calls it; one all-reduce).
inline int64_t ranks_with(Communicator& comm, bool here) {
  double n[1] = {here ? 1.0 : 0.0};
  comm.all_reduce_sum(n);
  return static_cast<int64_t>(n[0]);
}

// One rank: every collective is the identity (a copy where input and output differ).
std::unique_ptr<Communicator> make_single_process_communicator(Backend& backend);

// How this process was started, read from the environment before any device is touched:
// by fittrain's own launcher (FITTRAIN_RANK ..., dist/launch.h), by mpirun or srun, or alone.
struct RankPlacement {
  enum class Launcher { none, fittrain, mpi } launcher = Launcher::none;
  int rank = 0, world = 1, local_rank = 0;
  int local_world = 1;     // ranks on this machine, sharing its host memory (1 when the launcher does not say)
  int device = -1;         // the CUDA device ordinal this rank uses (-1: the default device)
  std::string rendezvous;  // fittrain's launcher: the folder rank 0 publishes the NCCL id in
  // How many communicators this launch made before this one (every rank alike: the ranks of a
  // run that re-plans mid-run make a new one together), so that each finds its own NCCL id.
  int generation = 0;
};
RankPlacement rank_placement_from_env();

// The run's communicator for a backend whose device was chosen from `placement`: NCCL for
// CUDA ranks, MPI for CPU ranks, else the single process. `timeout_s` bounds every wait for
// the other ranks (the NCCL id, initialisation, a collective): a rank that died or hangs
// ends the job with a message naming it instead of a hang. UserError when this build lacks
// the transport the launch needs.
std::unique_ptr<Communicator> make_communicator(Backend& backend, const RankPlacement& placement,
                                                double timeout_s);

}  // namespace ft
