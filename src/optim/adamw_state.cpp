#include "optim/adamw_state.h"

#include <algorithm>

#include "core/error.h"

namespace ft {

OptimizerShard optimizer_shard(int64_t num_params, const PlanShape& s, int rank) {
  const int shards = s.zero_stage >= 1 ? std::max(1, s.world_size) : 1;
  return shard_layout(num_params, shards, rank, shard_chunk_target());
}

AdamWState::Ids AdamWState::declare(BufferTable& t, int64_t num_params, const PlanShape& s, bool ema) {
  const size_t bytes = static_cast<size_t>(optimizer_shard(num_params, s, 0).padded) * 4;
  Ids ids;
  if (s.precision != Precision::fp32) ids.master = t.add_pinned("master", BufferClass::master, bytes);
  ids.m = t.add_pinned("adam_m", BufferClass::optimizer, bytes);
  ids.v = t.add_pinned("adam_v", BufferClass::optimizer, bytes);
  if (ema) ids.ema = t.add_pinned("ema", BufferClass::optimizer, bytes);
  return ids;
}

void AdamWState::bind(Arena& arena, const Ids& ids, const OptimizerShard& shard) {
  shard_ = shard;
  auto view = [&](BufferId id) {
    return id == kNoBuffer ? Tensor() : Tensor(arena.pinned_ptr(id), DType::f32, {shard.padded});
  };
  master_ = view(ids.master);
  m_ = view(ids.m);
  v_ = view(ids.v);
  ema_ = view(ids.ema);
}

void AdamWState::step(Backend& be, Tensor params, Tensor grads, std::span<const ParamSlice> slices,
                      const AdamWStep& s) {
  step_chunks(be, params, grads, slices, s, 0, shard_.chunks);
}

void AdamWState::step_chunks(Backend& be, Tensor params, Tensor grads, std::span<const ParamSlice> slices,
                             const AdamWStep& s, int64_t chunk_begin, int64_t chunk_end) {
  FT_CHECK(chunk_begin >= 0 && chunk_begin <= chunk_end && chunk_end <= shard_.chunks, "AdamW chunks [", chunk_begin,
           ", ", chunk_end, ") of ", shard_.chunks);
  const int64_t lo_local = chunk_begin * shard_.piece(), hi_local = chunk_end * shard_.piece();
  // Each of this rank's pieces: its elements of params and grads (the whole layout), of the
  // moments and master weights (the shard), and the slices clipped to it, counted from the
  // piece's start. A rank of more ranks than elements owns none.
  shard_.for_each_piece([&](int64_t g, int64_t l, int64_t n) {
    if (l < lo_local || l >= hi_local) return;
    shard_slices_.clear();
    for (const ParamSlice& sl : slices) {
      const int64_t a = std::max(g, sl.offset), b = std::min(g + n, sl.offset + sl.count);
      if (a < b) shard_slices_.push_back(ParamSlice{a - g, b - a, sl.decay});
    }
    be.adamw_update(params.range(g, n), master_.empty() ? master_ : master_.range(l, n), grads.range(g, n),
                    m_.range(l, n), v_.range(l, n), shard_slices_, s);
  });
}

void AdamWState::ema_update(Backend& be, Tensor params, float decay) {
  FT_CHECK(!ema_.empty(), "ema_update: no EMA buffer was planned");
  FT_CHECK(!master_.empty() || params.dtype == DType::f32, "ema_update: ", dtype_name(params.dtype),
           " params without master weights");
  shard_.for_each_piece([&](int64_t g, int64_t l, int64_t n) {
    be.ema_update(ema_.range(l, n), master_.empty() ? params.range(g, n) : master_.range(l, n), decay);
  });
}

}  // namespace ft
