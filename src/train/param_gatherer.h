// ParamGatherer: ZeRO-1's update and parameter all-gather, group by group, beside the next
// forward pass.
//
// After the step's gradient norm each rank updates its pieces of the layout
// (optim/shard_layout.h) and every rank needs every piece before reading it. The gatherer
// takes the chunks in the order the forward first reads them (learned from the forward's
// names, ModelBinding::params_needed: GPT-2's flat layout is [kind][layer], so its layer 0
// reads chunks all over the layout), cuts that order into groups, and runs the update of each
// group on an update stream of its own (ordered after the step's control, AdamWStep::stream);
// as each group is written, its in-place all-gathers are queued as one NCCL group on the
// communication stream, with an event after them. When the forward names a parameter group,
// the compute stream waits only for the gathers up to the group holding the latest of its
// chunks in that order (one stream gathers them in order, each behind its update). So the
// forward starts once what it reads first is updated and gathered (GPT-2: the embeddings),
// the rest of the update and of the gathers runs beside its compute, and every rank's links
// carry 1/world of each chunk.
//
// What else touches the state the update stream works on waits for the whole round first
// (wait_all(): a checkpoint, the EMA, the host copy; ModelRuntime defers zeroing the
// gradients, which the update reads, until the forward has waited for every group).
// The order is learned by the first forward whose names cover every parameter (every rank
// runs the same forward, so every rank issues the same collectives); until then the chunks
// go in layout order and the compute stream waits for everything at once.
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
      for (int64_t p = g * group_chunks_; p < std::min(shard_.chunks, (g + 1) * group_chunks_); ++p)
        update(order_[static_cast<size_t>(p)], order_[static_cast<size_t>(p)] + 1, update_stream_);
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
  // The update stream's priority against the compute stream's: low (the default) lets the
  // next forward's kernels take the SMs first, so the update fills what they leave idle;
  // FT_UPDATE_PRIORITY=normal makes them equal. Measured on 2 H100s (GPT-2 124M, session 17):
  // low 1,111k and 1,112k tokens/s against 1,109k and 1,106k, within the runs' spread.
  static StreamPriority update_priority_from_env();

 private:
  int64_t groups() const { return (shard_.chunks + group_chunks_ - 1) / group_chunks_; }
  void queue_gather(int64_t group);
  bool covered() const { return unnamed_ == 0; }
  void learn(const ParamRange& r);  // the ranges named and the chunks' first-need order

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
  std::vector<int64_t> order_;        // chunks in the order updated and gathered
  std::vector<int64_t> pos_;          // each chunk's position in order_
  std::vector<int64_t> first_need_;   // chunks in first-need order, while learning
  std::vector<Tensor> chunks_;
};

}  // namespace ft
