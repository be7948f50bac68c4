#include "plan/memory_plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "core/error.h"

namespace ft {

const char* buffer_class_name(BufferClass c) {
  switch (c) {
    case BufferClass::params: return "params";
    case BufferClass::master: return "master";
    case BufferClass::grads: return "grads";
    case BufferClass::optimizer: return "optimizer";
    case BufferClass::activations: return "activations";
    case BufferClass::transient: return "transient";
    case BufferClass::workspace: return "workspace";
    case BufferClass::inputs: return "inputs";
    case BufferClass::kv_cache: return "kv_cache";
  }
  return "?";
}

bool is_persistent(BufferClass c) {
  return c == BufferClass::params || c == BufferClass::master || c == BufferClass::grads ||
         c == BufferClass::optimizer;
}

int MemoryPlan::find(const std::string& name) const {
  for (size_t i = 0; i < buffers.size(); ++i)
    if (buffers[i].name == name) return static_cast<int>(i);
  return -1;
}

const BufferSpec& MemoryPlan::at(const std::string& name) const {
  int i = find(name);
  FT_CHECK(i >= 0, "no buffer '", name, "' in the plan");
  return buffers[i];
}

size_t MemoryPlan::class_bytes(BufferClass c) const {
  size_t n = 0;
  for (const auto& b : buffers)
    if (b.cls == c) n += align_up(b.bytes, kArenaAlignment);
  return n;
}

ArenaLayout arena_layout(const MemoryPlan& plan) {
  ArenaLayout a;
  a.total_bytes = plan.total_bytes;
  a.persistent_bytes = plan.persistent_bytes;
  a.num_phases = plan.num_phases;
  a.slots.reserve(plan.buffers.size());
  for (const auto& b : plan.buffers)
    a.slots.push_back(ArenaSlot{b.name, b.offset, b.bytes, b.first, b.last,
                                is_persistent(b.cls) || b.cls == BufferClass::workspace});
  return a;
}

static bool lifetimes_overlap(const BufferSpec& a, const BufferSpec& b) {
  return a.first <= b.last && b.first <= a.last;
}

MemoryPlan plan_offsets(std::vector<BufferSpec> buffers, int num_phases) {
  MemoryPlan plan;
  plan.num_phases = num_phases;
  size_t cursor = 0;
  std::vector<size_t> others;
  for (size_t i = 0; i < buffers.size(); ++i) {
    auto& b = buffers[i];
    FT_CHECK(b.first <= b.last && b.first >= 0 && b.last < num_phases, "buffer ", b.name,
             " has lifetime [", b.first, ",", b.last, "] outside ", num_phases, " phases");
    if (is_persistent(b.cls)) {
      b.offset = cursor;
      cursor += align_up(b.bytes, kArenaAlignment);
    } else {
      others.push_back(i);
    }
  }
  plan.persistent_bytes = cursor;
  // Greedy by size: largest first; ties broken by earlier first use, then name, so the
  // layout is deterministic across runs and machines.
  std::stable_sort(others.begin(), others.end(), [&](size_t x, size_t y) {
    const auto &a = buffers[x], &b = buffers[y];
    if (a.bytes != b.bytes) return a.bytes > b.bytes;
    if (a.first != b.first) return a.first < b.first;
    return a.name < b.name;
  });
  std::vector<size_t> placed;  // indices of placed transient buffers
  size_t peak = cursor;
  for (size_t idx : others) {
    auto& b = buffers[idx];
    size_t size = align_up(b.bytes, kArenaAlignment);
    // Collect the placed intervals that conflict in time, sorted by offset, and take the
    // first gap large enough.
    std::vector<std::pair<size_t, size_t>> busy;
    for (size_t p : placed)
      if (lifetimes_overlap(buffers[p], b))
        busy.emplace_back(buffers[p].offset, buffers[p].offset + align_up(buffers[p].bytes, kArenaAlignment));
    std::sort(busy.begin(), busy.end());
    size_t off = cursor;
    for (auto [lo, hi] : busy) {
      if (off + size <= lo) break;
      off = std::max(off, hi);
    }
    b.offset = off;
    peak = std::max(peak, off + size);
    placed.push_back(idx);
  }
  plan.total_bytes = peak;
  plan.buffers = std::move(buffers);
  return plan;
}

std::string validate_plan(const MemoryPlan& plan) {
  const auto& bs = plan.buffers;
  for (size_t i = 0; i < bs.size(); ++i) {
    size_t ai = align_up(bs[i].bytes, kArenaAlignment);
    if (bs[i].offset % kArenaAlignment) return bs[i].name + " is misaligned";
    if (bs[i].offset + ai > plan.total_bytes) return bs[i].name + " ends past the arena";
    for (size_t j = i + 1; j < bs.size(); ++j) {
      if (!lifetimes_overlap(bs[i], bs[j])) continue;
      size_t aj = align_up(bs[j].bytes, kArenaAlignment);
      if (bs[i].bytes == 0 || bs[j].bytes == 0) continue;
      if (bs[i].offset < bs[j].offset + aj && bs[j].offset < bs[i].offset + ai)
        return bs[i].name + " and " + bs[j].name + " overlap in memory and in time";
    }
  }
  return "";
}

std::string format_bytes(size_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[64];
  if (u == 0) std::snprintf(buf, sizeof buf, "%zu B", bytes);
  else std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  return buf;
}

size_t parse_bytes(const std::string& text, const std::string& flag) {
  size_t pos = 0;
  double value = 0;
  try {
    value = std::stod(text, &pos);
  } catch (...) {
    throw UserError(flag + ": '" + text + "' is not a size (examples: 16GiB, 512MiB, 20GB)");
  }
  std::string unit = text.substr(pos);
  while (!unit.empty() && unit.front() == ' ') unit.erase(unit.begin());
  std::string u;
  for (char c : unit) u += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  double mult = 0;
  if (u.empty() || u == "b") mult = 1;
  else if (u == "k" || u == "kib") mult = 1024.0;
  else if (u == "m" || u == "mib") mult = 1024.0 * 1024;
  else if (u == "g" || u == "gib") mult = 1024.0 * 1024 * 1024;
  else if (u == "t" || u == "tib") mult = 1024.0 * 1024 * 1024 * 1024;
  else if (u == "p" || u == "pib") mult = 1024.0 * 1024 * 1024 * 1024 * 1024;
  else if (u == "kb") mult = 1e3;
  else if (u == "mb") mult = 1e6;
  else if (u == "gb") mult = 1e9;
  else if (u == "tb") mult = 1e12;
  else if (u == "pb") mult = 1e15;
  FT_USER_CHECK(mult > 0, flag, ": unknown unit '", unit, "' in '", text,
                "' (use B, KiB, MiB, GiB, TiB, PiB, KB, MB, GB, TB, PB)");
  FT_USER_CHECK(value > 0 && std::isfinite(value), flag, ": size must be positive, got '", text, "'");
  // Checked in double before the conversion: a value past size_t would be undefined, and
  // anything above 1 PiB is a typo, not a machine.
  const double bytes = value * mult;
  FT_USER_CHECK(bytes <= static_cast<double>(kMaxBudgetBytes), flag, ": '", text, "' is ", bytes,
                " bytes, above the largest budget accepted (1 PiB = ", kMaxBudgetBytes, " bytes)");
  FT_USER_CHECK(bytes >= 1, flag, ": '", text, "' is less than one byte");
  return static_cast<size_t>(bytes);
}

}  // namespace ft
