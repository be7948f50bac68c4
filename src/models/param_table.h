// ParamTable: a model's parameters, declared once. Every parameter is a named range of ONE
// flat buffer; gradients, master weights and optimizer moments use the same layout, so
// grad-norm, AdamW, checkpoints and collectives are single contiguous operations, and the
// parameter count is the table's total (never a second formula).
#pragma once
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace ft {

// How a parameter starts (models/param_table.cpp: init_params).
enum class ParamInit { normal, zeros, ones };

struct ParamEntry {
  std::string name;            // e.g. "qkvw"
  std::vector<int64_t> shape;  // e.g. {L, 3C, C}; per-layer tensors are stacked over layers
  int64_t offset = 0;          // elements into the flat buffer
  int64_t count = 0;           // elements
  bool decay = false;          // weight decay applies (matrices and embeddings)
  bool per_layer = false;      // shape[0] is the layer: layer l's slice is count / L long
  ParamInit init = ParamInit::zeros;
  float init_std = 0.0f;       // for ParamInit::normal
};

// A contiguous range of the flat buffer, in elements.
struct ParamRange {
  int64_t offset = 0;
  int64_t count = 0;
};

class ParamTable {
 public:
  // Appends a parameter; returns its index (for at(int)).
  int add(std::string name, std::vector<int64_t> shape, bool decay, bool per_layer, ParamInit init,
          float init_std = 0.0f);
  const std::vector<ParamEntry>& entries() const { return entries_; }
  int64_t total() const { return total_; }
  const ParamEntry& at(int index) const { return entries_.at(static_cast<size_t>(index)); }
  const ParamEntry& at(const std::string& name) const;  // InternalError when absent
  // Layer l's range of a per-layer entry.
  ParamRange layer_range(int index, int layer) const;
  // Entry `index` (view) or layer `layer` of a per-layer entry (layer_view) as a tensor of
  // shape dims over a flat buffer in this table's layout: the parameters, or with grad the
  // gradients (only for the message when base is empty: unbound, or not training). The shape
  // must hold exactly the range's elements.
  Tensor view(const Tensor& base, int index, std::initializer_list<int64_t> dims, bool grad = false) const;
  Tensor layer_view(const Tensor& base, int index, int layer, std::initializer_list<int64_t> dims,
                    bool grad = false) const;
  // AdamW slices: maximal contiguous runs with one decay setting.
  std::vector<ParamSlice> adamw_slices() const;
  // Every entry initialised into host fp32 memory of total() elements: one random stream per
  // block of kInitBlock elements of an entry (seeded by seed, the entry's index and the
  // block), so changing one entry's size shifts no other's values; deterministic and
  // independent of thread count (the blocks are drawn in parallel).
  static constexpr int64_t kInitBlock = int64_t{1} << 20;
  void init_params(uint64_t seed, float* out) const { init_range(seed, 0, total_, out); }
  // Elements [begin, begin + count) of that layout into out[0, count): the same values,
  // whatever the range (a block's stream skips the draws before the range), so a rank draws
  // its weights a block at a time instead of staging the whole layout.
  void init_range(uint64_t seed, int64_t begin, int64_t count, float* out) const;

  // Calls fn(first, last) with entry e's elements [entry_begin, entry_end) that fall in
  // the range [begin, begin + count), as offsets into that range (nothing when none do): how
  // a model's fix-ups to the table's start (zeroed padding rows, an identity) apply to a range.
  template <class Fn>
  static void for_overlap(const ParamEntry& e, int64_t entry_begin, int64_t entry_end, int64_t begin, int64_t count,
                          Fn fn) {
    const int64_t lo = std::max(e.offset + entry_begin, begin), hi = std::min(e.offset + entry_end, begin + count);
    if (lo < hi) fn(lo - begin, hi - begin);
  }

 private:
  std::vector<ParamEntry> entries_;
  int64_t total_ = 0;
};

}  // namespace ft
