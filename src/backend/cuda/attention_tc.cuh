// Tensor-core building blocks shared by the attention kernels (attention.cu, attention_tc2.cu):
// ldmatrix, mma.sync m16n8k16 (bf16 or f16 in, fp32 accumulate) and cp.async wrappers.
// ldmatrix moves 16-bit words whatever their format, so only mma and pack2 take the type.
#pragma once
#include <type_traits>

#include "backend/cuda/cuda_ops.cuh"

namespace ft::cuda::tc {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// Tensor-core instructions need sm_80+; launchers take these paths only on such devices, and
// builds for older targets (CMake's default when no architecture is given) compile a trap.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define FT_TC_UNAVAILABLE 1
#endif
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void* p) {
#ifdef FT_TC_UNAVAILABLE
  __trap();
#else
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
#endif
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const void* p) {
#ifdef FT_TC_UNAVAILABLE
  __trap();
#else
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
#endif
}
// T = bf16 (default, attention.cu's first-generation kernels) or f16.
template <class T = bf16>
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#ifdef FT_TC_UNAVAILABLE
  __trap();
#else
  if constexpr (std::is_same_v<T, f16>)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}
// Two floats rounded to T (lo in the low half), as one mma operand register.
template <class T = bf16> __device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, f16>) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  } else {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
}
// cp.async of 16 (or 4) bytes; when !ok nothing is read and the destination is zero-filled.
__device__ __forceinline__ void cp16(void* dst, const void* src, bool ok) {
#ifdef FT_TC_UNAVAILABLE
  __trap();
#else
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(ok ? 16 : 0));
#endif
}
__device__ __forceinline__ void cp4(void* dst, const void* src, bool ok) {
#ifdef FT_TC_UNAVAILABLE
  __trap();
#else
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(ok ? 4 : 0));
#endif
}
__device__ __forceinline__ void cp_commit() {
#ifndef FT_TC_UNAVAILABLE
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
template <int N> __device__ __forceinline__ void cp_wait() {
#ifndef FT_TC_UNAVAILABLE
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

}  // namespace ft::cuda::tc

namespace ft::cuda {

// Masks beyond GPT-2's causal one (AttentionOptions), for the kernels' GEN instantiations.
// Every attention kernel is templated on GEN: false is GPT-2's causal, unpadded kernel exactly
// as it always was (the mask argument is ignored); true reads the mask at run time. Packed
// samples take a third instantiation, PACK (with GEN = false: causal, every row T long),
// which adds each query's lower key bound to GPT-2's kernel and skips the key (query) tiles
// that lie wholly before (after) the samples of a block's rows.
struct AttnMask {
  bool causal = true;
  const int* seq_lens = nullptr;  // device i32[B], or nullptr: every sample is T long
  const int* positions = nullptr;  // device i32[B,T] of packed samples (PACK kernels only)
};
// PACK: the first key query `row` (< T) of batch row b sees, row - positions[b,row] (its
// sample's first token). Clamped to [0, row]: positions the caller got wrong then give wrong
// sums, but every row still sees itself and no kernel leaves its rows' key range.
__device__ __forceinline__ int64_t attn_first_key(const AttnMask& m, int64_t b, int64_t row,
                                                  int64_t T_) {
  const int64_t p = m.positions[b * T_ + row];
  return row - (p < 0 ? 0 : p > row ? row : p);
}
template <bool GEN> __device__ __forceinline__ bool attn_causal(const AttnMask& m) {
  if constexpr (GEN) return m.causal;
  else return true;
}
// Keys (and real query rows) of sample b: [0, len). Lengths outside [1, T] are clamped so
// that no kernel reads past the sample, whatever the buffer holds.
template <bool GEN>
__device__ __forceinline__ int64_t attn_len(const AttnMask& m, int64_t b, int64_t T_) {
  if constexpr (GEN) {
    if (m.seq_lens == nullptr) return T_;
    const int64_t l = m.seq_lens[b];
    return l < 1 ? 1 : l > T_ ? T_ : l;
  } else {
    return T_;
  }
}

// attention_tc2.cu: T = bf16 or f16, HS = 64, sm_80+; 16-byte aligned pointers.
// Drow: B*NH*T floats. Instantiated for bf16 and f16 there. mask: nullptr for GPT-2's causal
// kernels, else the PACK kernels when it has positions, the GEN kernels otherwise (padded
// query rows: output 0, lse +inf).
template <class T>
void attention_forward_tc2(const Ctx& c, T* out, float* lse, const T* qkv, int64_t B,
                           int64_t T_, int64_t NH, const AttnMask* mask = nullptr);
template <class T>
void attention_backward_tc2(const Ctx& c, T* dqkv, float* Drow, const T* dout, const T* qkv,
                            const T* out, const float* lse, int64_t B, int64_t T_, int64_t NH,
                            const AttnMask* mask = nullptr);
}  // namespace ft::cuda
