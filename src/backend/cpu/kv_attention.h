// Generation with a KV cache on the CPU (fp32): storing a step's keys and values into the
// cache, one query per row attending over its cached keys, and the greedy argmax of logits.
// The reference the CUDA kernels (backend/cuda/kv_attention.cu) are tested against.
#pragma once
#include <cstdint>

namespace ft {

// kcache/vcache[row i, start[i] + s, :] = k/v of qkv[i, s, :] for s < t (start null: 0).
// Caches are rows of Tmax positions of C floats; qkv rows are 3C wide.
void kv_cache_store_cpu(float* kcache, float* vcache, const float* qkv, const int32_t* start,
                        int64_t b, int64_t t, int64_t C, int64_t Tmax);

// out[g, h*HS..] = softmax_j(q_g,h . k_g,j,h / sqrt(HS)) v_g,j,h over j < lens[g], with q_g
// the first C columns of qkv row g (qkv rows 3C wide).
void attention_decode_cpu(float* out, const float* qkv, const float* kcache, const float* vcache,
                          const int32_t* lens, int64_t G, int64_t C, int64_t Tmax, int n_head);

// out[g] = first index of the largest of logits[g, 0:V] (rows Vp wide); NaN never wins
// (a row of NaN gives 0).
void argmax_rows_cpu(int32_t* out, const float* logits, int64_t G, int64_t V, int64_t Vp);

}  // namespace ft
