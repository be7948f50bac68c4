// ParamGatherer: ZeRO-1's parameter all-gather hidden under the next forward pass.
//
// After the sharded update each rank holds fresh parameters for its shard only. Instead of one
// all-gather that the next forward waits for, the gatherer queues, on its own stream (after
// the update, device-side), one group of in-place broadcasts per parameter group the forward
// reads (each group's ranges split at the shards' boundaries, each piece from its owner), in
// the forward's order, with an event after each. The model names each group just before it
// reads it (ModelBinding::params_needed); the compute stream then waits for that group's event
// only, so layer l's gather overlaps layers < l's compute.
//
// The groups and their order are learned from the forward itself: the ranges of each
// params_needed call, first calls first. Until a forward has been seen (the first step), or
// for ranges never announced, everything is gathered as one group and waited for at once.
// Anything that reads parameters outside the forward (a checkpoint, the host copy) calls
// wait_all() first.
#pragma once
#include <algorithm>
#include <cstdint>
#include <map>
#include <vector>

#include "backend/backend.h"
#include "dist/communicator.h"
#include "models/model.h"

namespace ft {

class ParamGatherer {
 public:
  // params: the parameter buffer, padded to world * shard_elems elements.
  ParamGatherer(Backend& be, Communicator& comm, Tensor params, int64_t num_params, int64_t shard_elems);
  ~ParamGatherer();
  ParamGatherer(const ParamGatherer&) = delete;
  ParamGatherer& operator=(const ParamGatherer&) = delete;

  // Queue the gathers of every group; call after the update was queued on the compute stream.
  void start();
  // The hook for ModelBinding::params_needed.
  void on_needed(std::span<const ParamRange> ranges);
  // The compute stream waits for every queued gather.
  void wait_all();

  // FT_ZERO_PREFETCH=1 turns this on (off by default until measured on GPUs).
  static bool enabled_by_env();

 private:
  void queue(std::span<const ParamRange> ranges);

  Backend& be_;
  Communicator& comm_;
  Tensor params_;
  int64_t num_params_, shard_elems_;
  StreamHandle stream_;
  EventHandle updated_;
  std::vector<std::vector<ParamRange>> groups_;  // learned order
  std::map<int64_t, size_t> group_of_;           // first range's offset -> group
  std::vector<EventHandle> gathered_;            // one per group (+1 for "everything")
  std::vector<bool> waited_;
  bool in_flight_ = false;
  bool all_at_once_ = false;  // this round gathered everything as one group
  std::vector<ReducePart> parts_;
};

// UpdateGather: ZeRO-1's update and parameter gather in parts. After the sharded update the
// parameters are all-gathered before the next forward can start, with the GPU otherwise idle
// (0.5-0.6 ms a step for GPT-2 124M on 2 and 4 H100s, device traces in docs/PERFORMANCE.md).
// Here the shard's update runs in `parts` pieces on the compute stream; as each piece is
// written, a group of broadcasts on a side stream sends every rank's same piece from its
// owner (what an all-gather of that piece would do, in place), beside the next piece's
// update. The compute stream then waits for the last group. FT_ZERO_PARTS=N sets the
// number of parts (1: one update, then one all-gather; the default until measured).
class UpdateGather {
 public:
  // params: the parameter buffer, padded to world * shard_elems elements.
  UpdateGather(Backend& be, Communicator& comm, Tensor params, int64_t shard_elems, int parts);
  ~UpdateGather();
  UpdateGather(const UpdateGather&) = delete;
  UpdateGather& operator=(const UpdateGather&) = delete;

  // update(begin, count) updates elements [begin, begin + count) of this rank's shard
  // (AdamWState::step_part); `mine` is how many of the shard's padded elements this rank owns.
  template <class Update>
  void run(int64_t mine, Update update) {
    for (int64_t pb = 0; pb < shard_elems_; pb += part_elems_) {
      const int64_t pc = std::min(part_elems_, shard_elems_ - pb);
      const int64_t own = std::clamp<int64_t>(mine - pb, 0, pc);
      if (own > 0) update(pb, own);
      queue_gather(pb, pc);
    }
    finish();
  }

  static int parts_from_env();  // FT_ZERO_PARTS (1..64), default 1

 private:
  void queue_gather(int64_t part_begin, int64_t part_count);
  void finish();

  Backend& be_;
  Communicator& comm_;
  Tensor params_;
  int64_t shard_elems_, part_elems_;
  StreamHandle stream_;
  EventHandle updated_, gathered_;
  std::vector<ReducePart> parts_;
};

}  // namespace ft
