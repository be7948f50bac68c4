#include "plan/buffer_table.h"

#include "core/error.h"

namespace ft {

BufferId BufferTable::add(std::string name, BufferClass cls, size_t bytes, int first, int last) {
  FT_CHECK(first >= 0 && first <= last && last < num_phases_, "buffer ", name, ": lifetime [",
           first, ",", last, "] outside ", num_phases_, " phases");
  buffers_.push_back(BufferSpec{std::move(name), cls, bytes, first, last, 0});
  return static_cast<BufferId>(buffers_.size() - 1);
}

MemoryPlan BufferTable::place() const { return plan_offsets(buffers_, num_phases_); }

}  // namespace ft
