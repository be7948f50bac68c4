#include "models/param_table.h"

#include <algorithm>

#include "core/error.h"
#include "core/rng.h"

namespace ft {

int ParamTable::add(std::string name, std::vector<int64_t> shape, bool decay, bool per_layer,
                    ParamInit init, float init_std) {
  int64_t n = 1;
  for (auto d : shape) {
    // A configuration can ask for absurd sizes (fuzzed checkpoints did): refuse, never overflow.
    FT_USER_CHECK(d >= 0 && !__builtin_mul_overflow(n, d, &n), "parameter ", name,
                  " has more elements than fit in 64 bits: shape too large");
  }
  int64_t end = 0;
  FT_USER_CHECK(!__builtin_add_overflow(total_, n, &end), "the model has more parameters than fit in 64 bits");
  for (const auto& e : entries_) FT_CHECK(e.name != name, "parameter ", name, " declared twice");
  entries_.push_back(ParamEntry{std::move(name), std::move(shape), total_, n, decay, per_layer, init, init_std});
  total_ = end;
  return static_cast<int>(entries_.size() - 1);
}

const ParamEntry& ParamTable::at(const std::string& name) const {
  for (const auto& e : entries_)
    if (e.name == name) return e;
  FT_CHECK(false, "no parameter '", name, "'");
  return entries_.front();
}

ParamRange ParamTable::layer_range(int index, int layer) const {
  const ParamEntry& e = at(index);
  FT_CHECK(e.per_layer && layer >= 0 && layer < e.shape[0], e.name, " layer ", layer);
  const int64_t per = e.count / e.shape[0];
  return {e.offset + layer * per, per};
}

namespace {

Tensor range_view(const Tensor& base, const ParamEntry& e, ParamRange r, std::initializer_list<int64_t> dims,
                  bool grad) {
  FT_CHECK(!base.empty(), e.name, grad ? ": no gradient buffer (not training)" : ": unbound");
  Tensor t(static_cast<char*>(base.data) + r.offset * static_cast<int64_t>(dtype_size(base.dtype)), base.dtype, dims);
  FT_CHECK(t.numel() == r.count, e.name, ": shape ", t.shape_str(), " for ", r.count, " elements");
  return t;
}

}  // namespace

Tensor ParamTable::view(const Tensor& base, int index, std::initializer_list<int64_t> dims, bool grad) const {
  const ParamEntry& e = at(index);
  return range_view(base, e, {e.offset, e.count}, dims, grad);
}

Tensor ParamTable::layer_view(const Tensor& base, int index, int layer, std::initializer_list<int64_t> dims,
                              bool grad) const {
  return range_view(base, at(index), layer_range(index, layer), dims, grad);
}

std::vector<ParamSlice> ParamTable::adamw_slices() const {
  std::vector<ParamSlice> slices;
  for (const auto& e : entries_) {
    if (!slices.empty() && slices.back().decay == e.decay &&
        slices.back().offset + slices.back().count == e.offset)
      slices.back().count += e.count;
    else
      slices.push_back(ParamSlice{e.offset, e.count, e.decay});
  }
  return slices;
}

void ParamTable::init_range(uint64_t seed, int64_t begin, int64_t count, float* out) const {
  FT_CHECK(begin >= 0 && count >= 0 && begin + count <= total_, "init_range [", begin, ", +", count, ") of ", total_);
  const int64_t end = begin + count;
  for (size_t i = 0; i < entries_.size(); ++i) {
    const auto& e = entries_[i];
    // This entry's elements [lo, hi) (entry offsets) that the range holds.
    const int64_t lo = std::max<int64_t>(0, begin - e.offset), hi = std::min(e.count, end - e.offset);
    if (lo >= hi) continue;
    float* p = out + (e.offset + lo - begin);
    switch (e.init) {
      case ParamInit::ones:
        std::fill(p, p + (hi - lo), 1.0f);
        break;
      case ParamInit::zeros:
        std::fill(p, p + (hi - lo), 0.0f);
        break;
      case ParamInit::normal: {
        // One stream per block of kInitBlock elements, so that the blocks are drawn in
        // parallel (GPT-2 XL's 1.5 G normals took about a minute on one core) and the values
        // depend on neither the thread count nor the schedule. Block 0's stream is the
        // entry's, so entries of up to one block draw what one stream per entry drew. A
        // range that starts inside a block skips that block's earlier draws (two each).
        const uint64_t entry_seed = seed * 1000003ull + i;
        const int64_t b0 = lo / kInitBlock, b1 = (hi - 1) / kInitBlock + 1;
#pragma omp parallel for schedule(dynamic) if (b1 - b0 > 1)
        for (int64_t b = b0; b < b1; ++b) {
          Rng rng(entry_seed ^ (static_cast<uint64_t>(b) * 0x9E3779B97F4A7C15ull));
          const int64_t first = std::max(lo, b * kInitBlock), last = std::min(hi, (b + 1) * kInitBlock);
          for (int64_t k = b * kInitBlock; k < first; ++k) rng.skip_normal();
          for (int64_t k = first; k < last; ++k) p[k - lo] = static_cast<float>(rng.normal()) * e.init_std;
        }
        break;
      }
    }
  }
}

}  // namespace ft
