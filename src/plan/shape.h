// The planner's knobs: what a candidate configuration of one run is, independent of the
// model. A model turns a PlanShape into buffers (models/model.h); fit.h searches shapes.
#pragma once
#include <cstdint>

#include "backend/backend.h"
#include "core/tensor.h"

namespace ft {

// block: keep only each block's input in forward and redo the block just before its backward.
enum class Recompute { none, block };
const char* recompute_name(Recompute r);

struct PlanShape {
  int64_t micro_batch = 1;   // training micro-batch per rank (samples)
  int64_t eval_batch = 1;    // evaluation micro-batch per rank
  Precision precision = Precision::fp32;
  Recompute recompute = Recompute::none;
  int zero_stage = 0;        // 1: optimizer state (and master weights) sharded over ranks
  int world_size = 1;
  bool training = true;      // false: params + evaluation only (fittrain test / sample)
  // A model's optional cache (the recommender's item table: every item's representation
  // computed once per micro-batch, --item-cache): on costs memory that grows with the
  // catalogue, off with the batch. Models without one ignore it.
  bool item_cache = true;
  // Training keeps an fp32 EMA of the weights (--ema-decay; optim/ema.h): one more
  // optimizer-state buffer of the shard's size.
  bool ema = false;
  // Blocks whose intermediates a model would otherwise recompute in the backward keep them
  // from the forward instead (CDEIT: silu(h) of the MLP, a write of [N, 4C] saved a block):
  // faster and larger. The level picks which blocks: 0 none, each higher level keeps more
  // bytes, up to Model::max_keep_level() (every block); Model::kept_blocks(level) counts them.
  // fit_batch spends what the budget leaves after the batch on it. Models without any ignore it.
  int keep_level = 0;
};

// Storage types of a precision: activations and parameters in the compute dtype.
DType activation_dtype(Precision p);
DType param_dtype(Precision p);

}  // namespace ft
