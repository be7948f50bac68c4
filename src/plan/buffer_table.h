// BufferTable: where a run's buffers are declared, once. Each add() returns the buffer's id
// (its index in the plan and in the arena); the code that later uses the buffer keeps the id,
// never the name, so a buffer's name is written in exactly one place (its declaration) and
// the plan and the views made from it cannot disagree.
#pragma once
#include <string>
#include <vector>

#include "plan/memory_plan.h"

namespace ft {

using BufferId = int;
constexpr BufferId kNoBuffer = -1;

class BufferTable {
 public:
  explicit BufferTable(int num_phases) : num_phases_(num_phases) {}
  int num_phases() const { return num_phases_; }
  int last_phase() const { return num_phases_ - 1; }

  // A buffer used in phases [first, last]. Persistent classes (params, grads, master,
  // optimizer) are laid out first, in declaration order; pass 0, last_phase() for them.
  BufferId add(std::string name, BufferClass cls, size_t bytes, int first, int last);
  // A buffer that lives the whole run (persistent classes, workspace).
  BufferId add_pinned(std::string name, BufferClass cls, size_t bytes) {
    return add(std::move(name), cls, bytes, 0, last_phase());
  }
  const std::vector<BufferSpec>& buffers() const { return buffers_; }
  // Places every buffer (plan_offsets): the memory plan, ids unchanged.
  MemoryPlan place() const;

 private:
  int num_phases_;
  std::vector<BufferSpec> buffers_;
};

}  // namespace ft
