// A model's parameters and gradients on the host as fp32 vectors, for the tests' harnesses
// (ModelRuntime copies into a caller's buffer: the run's own staging is planned).
#pragma once
#include <cstdint>
#include <vector>

#include "train/runtime.h"

namespace ft::testing {

// P: the model's parameter count (the parameter buffer may be padded for ZeRO-1 shards).
inline std::vector<float> host_params(const ModelRuntime& rt, int64_t P) {
  std::vector<float> p(static_cast<size_t>(P));
  rt.copy_params_to_host(p.data());
  return p;
}

inline std::vector<float> host_grads(const ModelRuntime& rt, int64_t P) {
  std::vector<float> g(static_cast<size_t>(P));
  rt.copy_grads_to_host(g.data());
  return g;
}

}  // namespace ft::testing
