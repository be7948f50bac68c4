#include "core/arena.h"

#include <algorithm>

namespace ft {

Arena::Arena(Backend& backend, MemoryPlan plan) : backend_(backend), plan_(std::move(plan)) {
  base_ = backend_.alloc(std::max<size_t>(plan_.total_bytes, kArenaAlignment));
  high_water_ = plan_.persistent_bytes;
  for (size_t i = 0; i < plan_.buffers.size(); ++i) index_[plan_.buffers[i].name] = static_cast<int>(i);
}

int Arena::index_of(const std::string& name) const {
  auto it = index_.find(name);
  FT_CHECK(it != index_.end(), "no buffer '", name, "' in the plan");
  return it->second;
}

Arena::~Arena() {
  if (base_) backend_.free(base_);
}

void Arena::set_phase(int phase) {
  FT_CHECK(phase >= 0 && phase < plan_.num_phases, "phase ", phase, " of ", plan_.num_phases);
  phase_ = phase;
}

void Arena::touch(int index) {
  const auto& b = plan_.buffers[index];
  if (!is_persistent(b.cls))
    FT_CHECK(phase_ >= b.first && phase_ <= b.last, "buffer ", b.name, " used in phase ",
             phase_, " outside its planned lifetime [", b.first, ",", b.last, "]");
  high_water_ = std::max(high_water_, b.offset + align_up(b.bytes, kArenaAlignment));
}

Tensor Arena::tensor(int index, DType dtype, std::initializer_list<int64_t> dims) {
  FT_CHECK(index >= 0 && static_cast<size_t>(index) < plan_.buffers.size(), "bad buffer index");
  touch(index);
  const auto& b = plan_.buffers[index];
  Tensor t(static_cast<char*>(base_) + b.offset, dtype, dims);
  FT_CHECK(t.bytes() <= b.bytes, "view ", t.shape_str(), " (", t.bytes(), " B) exceeds buffer ",
           b.name, " (", b.bytes, " B)");
  return t;
}

Tensor Arena::tensor(const std::string& name, DType dtype, std::initializer_list<int64_t> dims) {
  return tensor(index_of(name), dtype, dims);
}

void* Arena::persistent_ptr(const std::string& name) {
  int i = index_of(name);
  const auto& b = plan_.buffers[i];
  FT_CHECK(is_persistent(b.cls) || b.cls == BufferClass::workspace, name, " is not persistent");
  touch(i);
  return static_cast<char*>(base_) + b.offset;
}

}  // namespace ft
