#include "optim/adamw_state.h"

#include <algorithm>

#include "core/error.h"

namespace ft {

OptimizerShard optimizer_shard(int64_t num_params, const PlanShape& s, int rank) {
  const int shards = s.zero_stage >= 1 ? std::max(1, s.world_size) : 1;
  OptimizerShard sh;
  sh.num_params = num_params;
  sh.padded = (num_params + shards - 1) / shards;
  const int r = shards == 1 ? 0 : rank;
  sh.begin = std::min<int64_t>(num_params, r * sh.padded);
  sh.count = std::min<int64_t>(num_params, sh.begin + sh.padded) - sh.begin;
  return sh;
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
    return id == kNoBuffer ? Tensor() : Tensor(arena.pinned_ptr(id), DType::f32, {shard.count});
  };
  master_ = view(ids.master);
  m_ = view(ids.m);
  v_ = view(ids.v);
  ema_ = view(ids.ema);
}

void AdamWState::step(Backend& be, Tensor params, Tensor grads, std::span<const ParamSlice> slices,
                      const AdamWStep& s) {
  // ZeRO-1 (or not: then the shard is everything): the shard's elements of params and
  // grads, and the slices clipped to the shard and counted from its start (the moments and
  // master weights are the shard already). A rank of more ranks than elements owns none.
  step_part(be, params, grads, slices, s, 0, shard_.count);
}

void AdamWState::step_part(Backend& be, Tensor params, Tensor grads, std::span<const ParamSlice> slices,
                           const AdamWStep& s, int64_t part_begin, int64_t part_count) {
  FT_CHECK(part_begin >= 0 && part_count >= 0 && part_begin + part_count <= shard_.count, "AdamW part [", part_begin,
           ", +", part_count, ") of a shard of ", shard_.count);
  if (part_count == 0) return;
  shard_slices_.clear();
  const int64_t lo = shard_.begin + part_begin, hi = lo + part_count;
  for (const ParamSlice& sl : slices) {
    const int64_t a = std::max(lo, sl.offset), b = std::min(hi, sl.offset + sl.count);
    if (a < b) shard_slices_.push_back(ParamSlice{a - lo, b - a, sl.decay});
  }
  be.adamw_update(params.range(lo, part_count), master_.empty() ? master_ : master_.range(part_begin, part_count),
                  grads.range(lo, part_count), m_.range(part_begin, part_count), v_.range(part_begin, part_count),
                  shard_slices_, s);
}

Tensor AdamWState::weights_shard(Tensor params) const {
  if (!master_.empty()) return master_;
  FT_CHECK(params.dtype == DType::f32, "weights_shard: ", dtype_name(params.dtype), " params without master weights");
  return params.range(shard_.begin, shard_.count);
}

void AdamWState::ema_update(Backend& be, Tensor params, float decay) {
  FT_CHECK(!ema_.empty(), "ema_update: no EMA buffer was planned");
  if (shard_.count == 0) return;  // more ranks than elements: this one owns none
  be.ema_update(ema_, weights_shard(params), decay);
}

}  // namespace ft
