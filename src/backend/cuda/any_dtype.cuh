// Element loads and stores whose storage dtype is a kernel argument rather than a template
// parameter, for ops whose operands may each be f32, bf16 or f16 independently (patchify's
// f32 image and bf16 tokens, diffusion_mix's f32 x0 and bf16 x_t): one kernel instead of one
// instantiation per combination. The switch is uniform across a warp (one dtype a tensor);
// these ops are memory-bound, so it costs nothing measurable. Math stays fp32.
#pragma once
#include "backend/cuda/cuda_common.cuh"

namespace ft::cuda {

// A tensor's data with its dtype (f32, bf16 or f16; launchers check).
struct AnyPtr {
  void* p = nullptr;
  DType t = DType::f32;
};
struct AnyCPtr {
  const void* p = nullptr;
  DType t = DType::f32;
};

inline AnyPtr any_of(const Tensor& x) { return {x.data, x.dtype}; }
inline AnyCPtr cany_of(const Tensor& x) { return {x.data, x.dtype}; }

__device__ __forceinline__ float load_any(AnyCPtr a, int64_t i) {
  switch (a.t) {
    case DType::bf16: return to_f32(static_cast<const bf16*>(a.p)[i]);
    case DType::f16: return to_f32(static_cast<const f16*>(a.p)[i]);
    default: return static_cast<const float*>(a.p)[i];
  }
}
__device__ __forceinline__ void store_any(AnyPtr a, int64_t i, float v) {
  switch (a.t) {
    case DType::bf16: static_cast<bf16*>(a.p)[i] = from_f32<bf16>(v); break;
    case DType::f16: static_cast<f16*>(a.p)[i] = from_f32<f16>(v); break;
    default: static_cast<float*>(a.p)[i] = v; break;
  }
}

// Grid of a grid-stride loop over n items, kPackBlock threads a block: enough blocks to fill
// the device a few times over, never past what the items need.
inline unsigned grid_stride_blocks(int64_t n, int num_sms) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(ceil_div(n, kPackBlock), 32LL * num_sms)));
}

}  // namespace ft::cuda
