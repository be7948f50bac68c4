#include "core/arena.h"

#include <algorithm>

#include "core/error.h"

namespace ft {

Arena::Arena(DeviceAllocator& allocator, ArenaLayout layout)
    : allocator_(allocator), layout_(std::move(layout)) {
  base_ = allocator_.alloc(std::max<size_t>(layout_.total_bytes, kArenaAlignment));
  high_water_ = layout_.persistent_bytes;
}

Arena::~Arena() {
  if (base_) allocator_.free(base_);
}

int Arena::find(const std::string& name) const {
  for (size_t i = 0; i < layout_.slots.size(); ++i)
    if (layout_.slots[i].name == name) return static_cast<int>(i);
  return -1;
}

void Arena::set_phase(int phase) {
  FT_CHECK(phase >= 0 && phase < layout_.num_phases, "phase ", phase, " of ", layout_.num_phases);
  phase_ = phase;
}

void Arena::touch(int id) {
  FT_CHECK(id >= 0 && static_cast<size_t>(id) < layout_.slots.size(), "bad buffer id ", id);
  const auto& b = layout_.slots[id];
  if (!b.pinned)
    FT_CHECK(phase_ >= b.first && phase_ <= b.last, "buffer ", b.name, " used in phase ",
             phase_, " outside its planned lifetime [", b.first, ",", b.last, "]");
  high_water_ = std::max(high_water_, b.offset + align_up(b.bytes, kArenaAlignment));
}

Tensor Arena::tensor(int id, DType dtype, std::initializer_list<int64_t> dims) {
  touch(id);
  const auto& b = layout_.slots[id];
  Tensor t(static_cast<char*>(base_) + b.offset, dtype, dims);
  FT_CHECK(t.bytes() <= b.bytes, "view ", t.shape_str(), " (", t.bytes(), " B) exceeds buffer ",
           b.name, " (", b.bytes, " B)");
  return t;
}

void* Arena::pinned_ptr(int id) {
  touch(id);
  const auto& b = layout_.slots[id];
  FT_CHECK(b.pinned, b.name, " is not a pinned buffer");
  return static_cast<char*>(base_) + b.offset;
}

}  // namespace ft
