// Shape checks of the KV-cache ops (Backend::kv_cache_store, attention_decode, argmax_rows),
// shared by the CPU and CUDA backends so both refuse the same arguments. Host code only.
#pragma once
#include <cstdint>

#include "core/error.h"
#include "core/tensor.h"

namespace ft::kv {

struct CacheDims {
  int64_t rows = 0, Tmax = 0, C = 0;  // a cache [rows, Tmax, C]
};

inline CacheDims check_caches(const char* op, const Tensor& k, const Tensor& v, DType act) {
  FT_CHECK(k.ndim == 3 && v.ndim == 3, op, ": caches ", k.shape_str(), " and ", v.shape_str(),
           " should be [G, Tmax, C]");
  for (int i = 0; i < 3; ++i) FT_CHECK(k.dim(i) == v.dim(i), op, ": caches differ: ", k.shape_str(), " vs ", v.shape_str());
  FT_CHECK(k.dtype == act && v.dtype == act, op, ": caches must be ", dtype_name(act), ", got ", dtype_name(k.dtype));
  return {k.dim(0), k.dim(1), k.dim(2)};
}

// kv_cache_store: qkv [b, t, 3C]; start i32[b] or empty. Returns b, t.
inline void check_store(const Tensor& k, const Tensor& v, const Tensor& qkv, const Tensor& start, int64_t* b,
                        int64_t* t, CacheDims* cd) {
  const char* op = "kv_cache_store";
  *cd = check_caches(op, k, v, qkv.dtype);
  FT_CHECK(qkv.ndim == 3 && qkv.dim(2) == 3 * cd->C, op, ": qkv ", qkv.shape_str(), " should be [b, t, ", 3 * cd->C, "]");
  *b = qkv.dim(0), *t = qkv.dim(1);
  FT_CHECK(*b <= cd->rows && *t <= cd->Tmax, op, ": qkv ", qkv.shape_str(), " does not fit caches ", k.shape_str());
  FT_CHECK(start.empty() || (start.dtype == DType::i32 && start.numel() == *b), op, ": start ", start.shape_str(),
           " should be i32[", *b, "]");
}

// attention_decode: out [G, C], qkv [G, 3C], caches [>=G, Tmax, C], lens i32[G]. Returns G.
inline int64_t check_decode(const Tensor& out, const Tensor& qkv, const Tensor& k, const Tensor& v,
                            const Tensor& lens, int n_head, CacheDims* cd) {
  const char* op = "attention_decode";
  *cd = check_caches(op, k, v, qkv.dtype);
  const int64_t C = cd->C, G = qkv.numel() / (3 * C);
  FT_CHECK(qkv.ndim >= 1 && qkv.dim(-1) == 3 * C && G >= 1 && G <= cd->rows, op, ": qkv ", qkv.shape_str(), " vs caches ",
           k.shape_str());
  FT_CHECK(out.dtype == qkv.dtype && out.numel() == G * C, op, ": out ", out.shape_str(), " should be [", G, ", ", C, "]");
  FT_CHECK(lens.dtype == DType::i32 && lens.numel() == G, op, ": lens ", lens.shape_str(), " should be i32[", G, "]");
  FT_CHECK(n_head > 0 && C % n_head == 0, op, ": C=", C, " n_head=", n_head);
  return G;
}

// argmax_rows: out i32[G], logits [G, Vp] with V <= Vp. Returns G.
inline int64_t check_argmax(const Tensor& out, const Tensor& logits, int64_t V) {
  const char* op = "argmax_rows";
  FT_CHECK(out.dtype == DType::i32, op, ": out must be i32, got ", out.shape_str());
  const int64_t G = out.numel();
  FT_CHECK(G >= 1 && logits.numel() % G == 0 && V >= 1 && V <= logits.numel() / G, op, ": logits ",
           logits.shape_str(), " for ", G, " rows of ", V);
  return G;
}

}  // namespace ft::kv
