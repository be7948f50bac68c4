// The memory plan: every byte a run allocates on a device, decided before step one.
//
// A plan is a list of buffers, each with a size, a class and a lifetime [first, last] in the
// step's schedule of phases (each model defines its schedule; models/gpt2_config.h has GPT-2's). Persistent
// buffers (parameters, gradients, optimizer state) are laid out first, in order, in a fixed
// prefix so that checkpoints and collectives see one contiguous region. The rest are placed
// greedy-by-size: largest first, each at the lowest offset that collides with no placed
// buffer whose lifetime overlaps. Peak = max(offset + size) is the arena's size, so the
// plan's number is exact by construction; core/arena.h then verifies at run time that every
// buffer is touched only inside its planned lifetime.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/arena.h"

namespace ft {

enum class BufferClass : uint8_t {
  params,       // model weights in the compute dtype
  master,       // fp32 master weights (mixed precision only)
  grads,        // parameter gradients
  optimizer,    // AdamW m and v
  activations,  // saved from forward for backward
  transient,    // lives inside one phase (or one block with recompute), reused across layers
  workspace,    // library / kernel scratch
  inputs,       // token ids and targets of the micro-batch
  kv_cache,     // generation: each layer's cached keys and values (evaluation phases)
};
constexpr int kNumBufferClasses = 9;
const char* buffer_class_name(BufferClass c);
bool is_persistent(BufferClass c);


struct BufferSpec {
  std::string name;
  BufferClass cls = BufferClass::transient;
  size_t bytes = 0;
  int first = 0;  // first phase that uses it (inclusive)
  int last = 0;   // last phase that uses it (inclusive)
  size_t offset = 0;  // assigned by plan_offsets()
};

struct MemoryPlan {
  std::vector<BufferSpec> buffers;
  size_t total_bytes = 0;       // arena size = max(offset + aligned size)
  size_t persistent_bytes = 0;  // size of the persistent prefix
  int num_phases = 0;

  int find(const std::string& name) const;  // -1 if absent
  const BufferSpec& at(const std::string& name) const;  // throws if absent
  size_t class_bytes(BufferClass c) const;    // sum of aligned sizes of that class
};

// Lays out buffers: persistent ones in the given order from offset 0, then the others
// greedy-by-size by lifetime. Deterministic. Throws if any lifetime is malformed.
MemoryPlan plan_offsets(std::vector<BufferSpec> buffers, int num_phases);

// The placed plan as the arena sees it (core/arena.h): slots with offsets and lifetimes;
// persistent buffers and the workspace are pinned (no lifetime check).
ArenaLayout arena_layout(const MemoryPlan& plan);

// Checks a placed plan: no two buffers with overlapping lifetimes share a byte, all within
// total_bytes. Returns an empty string when valid, else what is wrong (used by tests and by
// debug builds after planning).
std::string validate_plan(const MemoryPlan& plan);

// "1.50 GiB", "512.0 MiB", "3 B"
std::string format_bytes(size_t bytes);
// Parses "16GiB", "512MiB", "1.5GB", "1000000" (bytes). Throws UserError naming `flag` for
// anything else, for less than one byte and for more than kMaxBudgetBytes.
inline constexpr size_t kMaxBudgetBytes = size_t{1} << 50;  // 1 PiB
size_t parse_bytes(const std::string& text, const std::string& flag);

}  // namespace ft
