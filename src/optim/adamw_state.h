// AdamW's state, owned by optim/: fp32 master weights (mixed precision only), the moments
// m and v, and room for an EMA of the weights, each one flat buffer in the parameters'
// layout. With ZeRO stage 1 each rank holds only its pieces of the layout
// (optim/shard_layout.h), so the planner counts P / world per rank and a checkpoint gathers
// the shards back into one layout.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "optim/shard_layout.h"
#include "core/arena.h"
#include "plan/buffer_table.h"
#include "plan/shape.h"

namespace ft {

// The shard a rank owns for a shape (ZeRO stage >= 1 shards over world_size ranks).
OptimizerShard optimizer_shard(int64_t num_params, const PlanShape& s, int rank);

class AdamWState {
 public:
  struct Ids {
    BufferId master = kNoBuffer, m = kNoBuffer, v = kNoBuffer, ema = kNoBuffer;
  };
  // Declares master (mixed precision), m, v and (with ema) the EMA weights, as pinned
  // buffers in this order (the checkpoint sections' order).
  static Ids declare(BufferTable& t, int64_t num_params, const PlanShape& s, bool ema = false);

  void bind(Arena& arena, const Ids& ids, const OptimizerShard& shard);
  const OptimizerShard& shard() const { return shard_; }
  Tensor master() const { return master_; }  // empty unless mixed precision
  Tensor m() const { return m_; }
  Tensor v() const { return v_; }
  Tensor ema() const { return ema_; }  // empty unless declared

  // One AdamW update of this rank's shard of params from grads (both the whole layout). The
  // caller gathers the other ranks' pieces of params afterwards (train/runtime.cpp).
  void step(Backend& be, Tensor params, Tensor grads, std::span<const ParamSlice> slices, const AdamWStep& s);
  // The same update for chunks [chunk_begin, chunk_end) only: the update chunk by chunk, so
  // that each chunk's gather can start as soon as it is written (train/param_gatherer.h).
  // AdamW is elementwise, so the parts together give the very same values as step().
  void step_chunks(Backend& be, Tensor params, Tensor grads, std::span<const ParamSlice> slices, const AdamWStep& s,
                   int64_t chunk_begin, int64_t chunk_end);
  // ema = ema - (ema - weights) * (1 - decay) over this rank's shard (decay 0: a copy); the
  // weights are the master weights, or the fp32 params' pieces.
  void ema_update(Backend& be, Tensor params, float decay);

 private:
  OptimizerShard shard_;
  Tensor master_, m_, v_, ema_;
  std::vector<ParamSlice> shard_slices_;
};

}  // namespace ft
