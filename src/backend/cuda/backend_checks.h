// Argument checks and switches shared by CudaBackend's op methods (cuda_backend.cu): dtype
// and shape checks at the Backend interface, FT_* environment switches. Host code only.
#pragma once
#include <cstdlib>
#include <initializer_list>
#include <string>

#include "backend/backend.h"
#include "core/error.h"
#include "core/tensor.h"

namespace ft::cuda {

// C of a [.., C] tensor and the product of the dims before it.
inline int64_t last_dim(const Tensor& t) { return t.dim(-1); }
inline int64_t rows(const Tensor& t) { return t.numel() / t.dim(-1); }

// The value of a backend switch (FT_* environment variable): unset gives `fallback`, anything
// outside `allowed` is bad input naming the variable.
inline std::string env_choice(const char* name, std::initializer_list<std::string> allowed,
                              const std::string& fallback) {
  const char* e = std::getenv(name);
  if (!e) return fallback;
  const std::string v = e;
  std::string list;
  for (const std::string& a : allowed) {
    if (v == a) return v;
    list += (list.empty() ? "" : ", ") + a;
  }
  throw UserError(detail::concat(name, "=", v, ": expected one of ", list));
}

inline void check_float(const Tensor& t, const char* what) {
  FT_CHECK(t.dtype == DType::f32 || t.dtype == DType::bf16 || t.dtype == DType::f16, what,
           ": dtype ", dtype_name(t.dtype), " (CUDA backend takes f32, bf16 or f16)");
}
inline void check_same(const Tensor& a, const Tensor& b, const char* what) {
  FT_CHECK(a.dtype == b.dtype, what, ": dtypes differ (", dtype_name(a.dtype), " vs ",
           dtype_name(b.dtype), ")");
}

// N, C, OC of a forward product out[N,OC] = inp[N,C] @ w[OC,C]^T (+ bias[OC]) after checking
// dtypes and shapes; `outs` are the [N,OC] results (output, pre-activation, ...).
struct ProductDims {
  int64_t N, C, OC;
};
inline ProductDims check_forward_product(const char* op, const Tensor& inp, const Tensor& w,
                                         const Tensor& bias,
                                         std::initializer_list<const Tensor*> outs) {
  check_float(inp, op);
  check_same(w, inp, op);
  const int64_t C = last_dim(inp), N = rows(inp), OC = w.dim(0);
  FT_CHECK(w.ndim == 2 && w.dim(1) == C, op, ": w ", w.shape_str(), " vs inp ", inp.shape_str());
  for (const Tensor* o : outs) {
    check_same(*o, inp, op);
    FT_CHECK(o->numel() == N * OC, op, ": ", o->shape_str(), " is not [", N, ", ", OC, "]");
  }
  if (!bias.empty()) {
    check_same(bias, inp, op);
    FT_CHECK(bias.numel() == OC, op, ": bias ", bias.shape_str());
  }
  return {N, C, OC};
}

// Element-wise ops: every tensor of `others` has inp's dtype and size.
inline void check_elementwise(const char* op, const Tensor& inp,
                              std::initializer_list<const Tensor*> others) {
  check_float(inp, op);
  for (const Tensor* t : others) {
    check_same(*t, inp, op);
    FT_CHECK(t->numel() == inp.numel(), op, ": ", t->shape_str(), " vs ", inp.shape_str());
  }
}
// Row-broadcast ops: like [B,T,C]; `full` tensors as like, `rows` [B,C], one dtype.
struct Btc {
  int64_t B, T, C;
};
inline Btc check_row_broadcast(const char* op, const Tensor& like,
                               std::initializer_list<const Tensor*> full,
                               std::initializer_list<const Tensor*> row_ts) {
  check_elementwise(op, like, full);
  FT_CHECK(like.ndim == 3, op, ": ", like.shape_str(), " should be [B,T,C]");
  const Btc d{like.dim(0), like.dim(1), like.dim(2)};
  for (const Tensor* r : row_ts) {
    check_same(*r, like, op);
    FT_CHECK(r->numel() == d.B * d.C, op, ": ", r->shape_str(), " should be [", d.B, ",", d.C, "]");
  }
  return d;
}

// opt.seq_lens: device i32[B]. Its values live on the device and are not read here; the
// kernels clamp them to [1, T], so a bad length cannot make them read out of bounds.
inline const int* seq_lens_of(const char* op, const AttentionOptions& opt, int64_t B) {
  if (opt.seq_lens.empty()) return nullptr;
  FT_CHECK(opt.seq_lens.dtype == DType::i32 && opt.seq_lens.numel() == B, op, ": seq_lens ",
           opt.seq_lens.shape_str(), " should be i32[", B, "]");
  return static_cast<const int*>(opt.seq_lens.data);
}

// The device pointer of optional per-token positions (i32, n entries), null when absent.
inline const int* positions_of(const char* op, const Tensor& positions, int64_t n) {
  if (positions.empty()) return nullptr;
  FT_CHECK(positions.dtype == DType::i32 && positions.numel() == n, op, ": positions ", positions.shape_str(),
           " should be i32 with ", n, " entries");
  return static_cast<const int*>(positions.data);
}

// opt.positions: device i32[B,T] of packed samples, only with causal attention and without
// seq_lens (the same refusals as the CPU backend's). Its values live on the device and are
// not read here: the kernels trust AttentionOptions' precondition, but clamp each query's
// first key to [0, t], so bad positions give wrong sums, never reads out of bounds.
inline const int* attention_positions_of(const char* op, const AttentionOptions& opt, int64_t B,
                                         int64_t T) {
  if (opt.positions.empty()) return nullptr;
  FT_CHECK(opt.causal, op, ": positions (packed samples) need causal attention");
  FT_CHECK(opt.seq_lens.empty(), op, ": positions and seq_lens exclude each other (pad the "
           "last packed sample as a sample of its own instead)");
  return positions_of(op, opt.positions, B * T);
}

}  // namespace ft::cuda
