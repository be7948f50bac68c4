// ParamGatherer: ZeRO-1's update and parameter all-gather, group by group, beside the next
// forward pass.
//
// After the step's gradient norm each rank updates its pieces of the layout
// (optim/shard_layout.h) and every rank needs every piece before reading it. The gatherer
// splits the chunks into groups in layout order and runs the update of each group on an
// update stream of its own (ordered after the step's control, AdamWStep::stream); as each
// group is written, its in-place all-gathers are queued as one NCCL group on the
// communication stream, with an event after them. The forward then names each parameter
// group just before reading it (ModelBinding::params_needed) and the compute stream waits only
// for the gathers of the groups up to the one holding that group's last chunk (one stream
// gathers them in order, each behind its update). So the forward starts once the groups it
// reads first are updated and gathered (GPT-2: the embeddings), while the rest of the update
// and of the gathers runs beside its compute, and every rank's links carry 1/world of each.
//
// What else touches the state the update stream works on waits for the whole round first
// (wait_all(): a checkpoint, the EMA, the host copy; ModelRuntime defers zeroing the
// gradients, which the update reads, until the forward has waited for every group).
// The per-group waits are used only once the names a forward gave covered every parameter
// (learned from each forward); until then the compute stream waits for everything at once.
#pragma once
#include <cstdint>
#include <map>
#include <vector>

#include "backend/backend.h"
#include "dist/communicator.h"
#include "models/model.h"
#include "optim/shard_layout.h"

namespace ft {

class ParamGatherer {
 public:
  // params: the parameter buffer of shard.total() elements. stream: the communication stream
  // (the gradient reductions' too, so every collective of the communicator keeps one order).
  // group_chunks: chunks per group (gathered as one NCCL group).
  ParamGatherer(Backend& be, Communicator& comm, Tensor params, const OptimizerShard& shard, StreamHandle stream,
                int64_t group_chunks = group_chunks_from_env());
  ~ParamGatherer();
  ParamGatherer(const ParamGatherer&) = delete;
  ParamGatherer& operator=(const ParamGatherer&) = delete;

  // update(chunk_begin, chunk_end, stream) queues the update of those chunks on `stream`
  // (AdamWState::step_chunks with AdamWStep::stream); call it once the step's control is
  // queued on the compute stream. Each group's gathers are queued as soon as it is written.
  template <class Update>
  void run(Update update) {
    wait_all();  // a round the forward did not wait for in full (never reorder across rounds)
    be_.record_event(control_ready_, be_.compute_stream());
    be_.stream_wait_event(update_stream_, control_ready_);
    for (int64_t g = 0; g < groups(); ++g) {
      update(g * group_chunks_, std::min(shard_.chunks, (g + 1) * group_chunks_), update_stream_);
      queue_gather(g);
    }
    in_flight_ = true;
    waited_upto_ = -1;
    if (!covered()) wait_all();
  }
  // The hook for ModelBinding::params_needed.
  void on_needed(std::span<const ParamRange> ranges);
  // The compute stream waits for every queued gather.
  void wait_all();
  // A round's gathers not all waited for yet (and, for tests, the last group waited for).
  bool in_flight() const { return in_flight_; }
  int64_t waited_upto() const { return waited_upto_; }

  // FT_ZERO_OVERLAP=0 turns the gatherer off (one update, then one all-gather the forward
  // waits for: for measurements); on by default.
  static bool enabled_by_env();
  // FT_GATHER_CHUNKS (1..1024, default 4): chunks per group. Measured on 2 H100s (GPT-2 124M,
  // docs/PERFORMANCE.md session 16): one 8 MiB all-gather at a time ran at about 110 GB/s.
  static int64_t group_chunks_from_env();

 private:
  int64_t groups() const { return (shard_.chunks + group_chunks_ - 1) / group_chunks_; }
  void queue_gather(int64_t group);
  bool covered() const { return unnamed_ == 0; }

  Backend& be_;
  Communicator& comm_;
  Tensor params_;
  OptimizerShard shard_;
  StreamHandle stream_, update_stream_;
  int64_t group_chunks_;
  EventHandle control_ready_;
  std::vector<EventHandle> updated_, gathered_;  // one per group
  bool in_flight_ = false;
  int64_t waited_upto_ = -1;      // the last group the compute stream waits for this round
  std::map<int64_t, int64_t> named_;  // the ranges named so far, merged: begin -> end
  int64_t unnamed_ = 0;               // parameters no name covered yet
  std::vector<Tensor> chunks_;
};

}  // namespace ft
