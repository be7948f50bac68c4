// ModelRuntime: a model made real on one device. It declares the run's buffers in one
// BufferTable (the engine's pinned buffers first: params, grads, optimizer state, workspace;
// then the model's), places them (the memory plan), allocates the arena (exactly the plan),
// hands the backend its workspace and binds model and optimizer to their views. It owns the
// flat parameter and gradient buffers, so host transfers, gradient zeroing, the gradient norm
// and the optimizer step are the same for every model.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "core/arena.h"
#include "core/batch.h"
#include "dist/communicator.h"
#include "models/host_transfer.h"
#include "models/model.h"
#include "optim/adamw_state.h"
#include "plan/buffer_table.h"
#include "plan/memory_plan.h"
#include "plan/shape.h"
#include "train/param_gatherer.h"

namespace ft {

// The whole run's memory plan for a shape (pure): what fit_batch() searches over.
MemoryPlan runtime_plan(const Model& model, const Backend& be, const PlanShape& s);

// A training step's sums over all ranks (ModelRuntime::queue_step_sums).
struct StepSums {
  double loss = 0;              // the loss values' sum
  double stop = 0;              // ranks asked to stop (a signal)
  double grad_sum_squares = 0;  // of the reduced gradients, as scaled in the buffer
  double units_ahead = 0;       // the next step's loss units (0 when not asked)
  double out_of_memory = 0;     // ranks whose step ran out of memory (they sent a NaN loss)
  bool applied = false;         // the update's verdict (update_control)
  float grad_scale = 0;         // the factor the update applied to the gradients
};

class ModelRuntime {
 public:
  // Throws OutOfMemoryError when the device cannot give the arena (the caller may re-plan).
  // comm: the run's ranks (null: this process alone). With ZeRO stage 1 (s.zero_stage) the
  // optimizer state is this rank's shard and adamw_step() all-gathers the parameters.
  ModelRuntime(Model& model, Backend& be, const PlanShape& s, Communicator* comm = nullptr);
  ~ModelRuntime();
  ModelRuntime(const ModelRuntime&) = delete;
  ModelRuntime& operator=(const ModelRuntime&) = delete;

  Model& model() { return model_; }
  Backend& backend() { return be_; }
  Arena& arena() { return *arena_; }
  const MemoryPlan& plan() const { return plan_; }
  const PlanShape& shape() const { return shape_; }
  AdamWState& optimizer() { return opt_; }

  Tensor params() const { return params_; }  // [P], compute dtype
  Tensor grads() const { return grads_; }    // [P], empty unless training

  // Host fp32 values -> params (and this rank's master weights), by ranges of the fp32
  // layout: begin_params_load() zeroes both (what no range covers stays zero: padded rows,
  // the shard's padding), then each load_params_range() rounds and uploads its range a block
  // at a time. The start and every load stream through these a block at a time, so no rank
  // holds a host copy of the whole layout (the host plan's "weights blocks").
  void begin_params_load();
  void load_params_range(int64_t begin, const float* host, int64_t count);
  // The whole layout, through the two above (tests and fixtures: the run's own paths go by
  // blocks).
  void load_params_from_host(const float* host);
  // Fresh weights (Model::init_range), drawn kWeightsDrawBlock elements at a time.
  void init_params(uint64_t seed);
  // The master weights, where this rank keeps any, from the parameters as they are (a
  // checkpoint that has none), a block at a time.
  void master_from_params();
  // Elements [begin, begin + count) of a whole-layout host range (of `shard`'s dtype) into
  // this rank's optimizer buffer `shard` (master, moments): only the pieces it owns
  // (shard_layout.h), each to its place.
  void upload_shard_range(Tensor shard, int64_t begin, const void* host, int64_t count);
  // The whole layout back in fp32 (tests and fixtures): from the master weights when present.
  void copy_params_to_host(float* host) const;
  void copy_grads_to_host(float* host) const;

  void zero_grads();
  // One micro-batch; the first after zero_grads() overwrites the gradients (no read of
  // zeros), the rest add. Returns the sum of the micro-batch's loss values.
  double forward_backward(const Batch& batch, float dloss, const GradReadyFn& ready = {});
  double eval_loss(const Batch& batch) { return model_.eval_loss(batch); }
  // The sum of squares of this rank's part of the (reduced) gradients: its optimizer shard
  // under ZeRO-1, else a 1/world slice of the identical gradients. Summed over ranks it is
  // the global squared norm (one rank: the whole buffer).
  double grad_sum_squares_part();
  // The step's sums without the host waiting between the backward and the update: queues
  // this rank's host values (loss sum, stop vote, the next step's loss units) and its part of
  // the gradients' sum of squares into device memory, their sum over ranks (an all-reduce on
  // the compute stream, behind the gradient reduction), the update's control from them
  // (Backend::update_control with `rule`; pass update_control() as AdamWStep::control) and
  // their copy to the host. step_sums() waits for that copy only: queue the update first.
  // out_of_memory: 1 when this rank's step failed to allocate (then pass a NaN loss: the
  // update is skipped on every rank), so every rank learns of it (train/trainer.cpp).
  void queue_step_sums(double loss, double stop, double units_ahead, const UpdateRule& rule,
                       double out_of_memory = 0);
  Tensor update_control() const { return control_; }
  StepSums step_sums();
  // Updates this rank's shard (all of it without ZeRO), then gathers the parameters.
  void adamw_step(const AdamWStep& step);
  bool sharded() const { return opt_.shard().sharded(); }
  Communicator& comm() { return *comm_; }
  // The stream the run's collectives on device buffers use (gradient reductions, ZeRO-1's
  // gathers: one stream keeps them in one order); null with one rank.
  StreamHandle comm_stream() const { return comm_stream_; }
  // The gradient buffer with its padding: the shard layout's total() elements (ZeRO-1's
  // reduce-scatter works on whole chunks).
  Tensor grad_buffer() const { return grad_buffer_; }
  // A sharded fp32 optimizer buffer (master, m or v: this rank's shard) gathered from every
  // rank: sink(first, data, count) receives elements [first, first + count) of the whole
  // layout [P], in ascending ranges of at most max(kWeightsBlock, one chunk) elements; an
  // empty sink on a rank that only takes part (the checkpoint's writer is rank 0). A
  // collective: every rank calls it. Stages through the gradient buffer (free between steps)
  // and one host block, so no host copy of the layout is made.
  using GatherSink = std::function<void(int64_t first, const float* data, int64_t count)>;
  void gather_shard(Tensor shard, const GatherSink& sink);
  // Orders the compute stream after any parameter gather still in flight (ZeRO-1's gathers
  // run under the next forward): before anything reads the parameters outside the forward.
  void wait_params();

  // The EMA of the weights (planned when the shape says so: PlanShape::ema; optim/ema.h).
  bool has_ema() const { return !opt_.ema().empty(); }
  // ema = ema - (ema - weights) * (1 - decay) on this rank's shard; decay 0 copies.
  void ema_update(float decay);
  // Evaluation on the EMA weights without any memory outside the plan: swap_in_ema puts them
  // into params (fp32 params are parked in the gradient buffer, free between steps; master
  // weights need no copy) and swap_out_ema puts the training weights back exactly. With
  // ZeRO-1 both are collectives (every rank calls them: the parameters are all-gathered).
  void swap_in_ema();
  void swap_out_ema();
  bool ema_swapped_in() const { return ema_in_; }

 private:
  void copy_to_host_f32(Tensor t, float* out) const;
  Tensor grad_part_first_piece() const;
  void zero_grads_now();
  void gather_params();  // ZeRO-1: every rank's shard of params to every rank, in place

  Model& model_;
  Backend& be_;
  std::unique_ptr<Communicator> own_comm_;  // when constructed without one
  Communicator* comm_;
  PlanShape shape_;
  MemoryPlan plan_;
  std::unique_ptr<Arena> arena_;
  Tensor params_, grads_, grad_buffer_;
  AdamWState opt_;
  std::vector<ParamSlice> slices_;
  StreamHandle comm_stream_;
  std::unique_ptr<ParamGatherer> gatherer_;  // ZeRO-1: gathers under the update and the forward
  std::unique_ptr<InputUploads> uploads_;    // training: ModelBinding::uploads
  OptimizerShard part_;  // this rank's part of the gradient norm: its pieces over every rank
  Tensor sums_;          // f64 [5]: loss, stop, gradient sum of squares, units ahead, out of memory (StepSums)
  Tensor control_;       // f32 [2]: AdamWStep::control, right behind sums_
  std::unique_ptr<HostReadback> sums_back_;  // sums_ and control_, copied to the host
  bool grads_zeroed_ = false;  // zero_grads ran and no micro-batch since
  bool grads_cleared_ = false; // the gradients were set to zero at least once
  bool zero_pending_ = false;  // zero_grads waits for the update on the gatherer's stream
  bool ema_in_ = false;        // swap_in_ema ran, swap_out_ema not yet
};

}  // namespace ft
