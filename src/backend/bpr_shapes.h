// Shape checks of the recommender head's ops (Backend::bpr_forward_backward, item_scores),
// shared by the CPU and CUDA backends so both refuse the same arguments (as kv_shapes.h does
// for generation). Dtypes and item ids are each backend's business: the CPU reads the ids and
// checks them, CUDA leaves them on the device. Host code only.
#pragma once
#include <cstdint>

#include "core/error.h"
#include "core/tensor.h"

namespace ft::bpr {

struct Dims {
  int64_t N = 0, C = 0, Vp = 0, K = 0;  // rows, width, item table rows, negatives per row (M for item_scores)
};

// h [N, C] against the item table E [Vp, C].
inline Dims check_table(const char* op, const Tensor& h, const Tensor& E) {
  FT_CHECK(E.ndim == 2, op, ": E ", E.shape_str(), " should be [Vp,C]");
  Dims d;
  d.Vp = E.dim(0), d.C = E.dim(1);
  FT_CHECK(h.ndim >= 1 && h.dim(-1) == d.C && h.numel() % d.C == 0, op, ": h ", h.shape_str(), " and E ", E.shape_str(),
           " differ in C");
  d.N = h.numel() / d.C;
  return d;
}

// bpr_forward_backward: losses [N], pos i32[N], neg i32[N, K >= 1]; dh [N, C] and dE [Vp, C]
// when training (dloss != 0).
inline Dims check_bpr(const Tensor& losses, const Tensor& dh, const Tensor& dE, const Tensor& h, const Tensor& E,
                      const Tensor& pos, const Tensor& neg, float dloss) {
  const char* op = "bpr_forward_backward";
  Dims d = check_table(op, h, E);
  FT_CHECK(losses.dtype == DType::f32 && losses.numel() == d.N, op, ": losses ", losses.shape_str(),
           " should be f32[", d.N, "]");
  FT_CHECK(pos.dtype == DType::i32 && pos.numel() == d.N, op, ": pos ", pos.shape_str(), " should be i32[", d.N, "]");
  FT_CHECK(neg.dtype == DType::i32 && d.N > 0 && neg.numel() % d.N == 0 && neg.numel() >= d.N, op, ": neg ",
           neg.shape_str(), " should be i32[N=", d.N, ",K] with K >= 1");
  d.K = neg.numel() / d.N;
  if (dloss != 0.0f)
    FT_CHECK(dh.numel() == d.N * d.C && dE.numel() == d.Vp * d.C, op, ": dh ", dh.shape_str(), " dE ",
             dE.shape_str(), " should be [", d.N, ",", d.C, "] and [", d.Vp, ",", d.C, "]");
  return d;
}

// item_scores: items i32[N, M], out f32[N, M]. Returns the dims with K = M.
inline Dims check_item_scores(const Tensor& out, const Tensor& h, const Tensor& E, const Tensor& items) {
  const char* op = "item_scores";
  Dims d = check_table(op, h, E);
  FT_CHECK(items.dtype == DType::i32 && d.N > 0 && items.numel() % d.N == 0, op, ": items ", items.shape_str(),
           " should be i32[N=", d.N, ",M]");
  d.K = items.numel() / d.N;
  FT_CHECK(out.dtype == DType::f32 && out.numel() == d.N * d.K, op, ": out ", out.shape_str(), " should be f32[",
           d.N, ",", d.K, "]");
  return d;
}

}  // namespace ft::bpr
