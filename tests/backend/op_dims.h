// Test helper: the sizes of a GPT-2-like step (B, T, C, NH, Vp, V) and the ops such a step
// runs, for tests that size a backend's workspace without a model.
#pragma once
#include <cstdint>
#include <vector>

#include "backend/backend.h"

namespace ft {

struct OpDims {
  int64_t B = 0, T = 0, C = 0, NH = 0, Vp = 0, V = 0;
};

// Embedding, sum of squares, layernorm, the products with OC = C, 3C, 4C, Vp, causal
// attention, classifier — the list GPT2Backbone::ops() gives for these sizes.
inline std::vector<OpShape> op_shapes(const OpDims& d) {
  const int64_t N = d.B * d.T, HS = d.NH > 0 && d.C % d.NH == 0 ? d.C / d.NH : 0;
  std::vector<OpShape> ops{OpShape::embedding(N, d.C), OpShape::sum_squares(0)};
  if (d.C > 0) ops.push_back(OpShape::layernorm(N, d.C));
  for (int64_t oc : {d.C, 3 * d.C, 4 * d.C, d.Vp})
    if (oc > 0) ops.push_back(OpShape::matmul(N, d.C, oc));
  ops.push_back(OpShape::attention(d.B, d.T, d.NH, HS));
  if (d.Vp > 0) ops.push_back(OpShape::classifier(N, d.V, d.Vp));
  return ops;
}

// The workspace as GPT-2 sizes it for bf16 (the largest: cuDNN's plans on CUDA).
inline size_t workspace_bytes(const Backend& be, const OpDims& d) {
  const std::vector<OpShape> ops = op_shapes(d);
  return be.workspace_bytes(ops, Precision::bf16);
}

}  // namespace ft
