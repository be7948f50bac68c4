// Residual add out = a + b, 16-byte vectorised (out may alias a or b).
#include "backend/cuda/cuda_ops.cuh"

namespace ft::cuda {

// ---- CUDA kernels ---------------------------------------------------------------------------

template <class T>
__global__ void residual_forward_kernel(T* out, const T* a, const T* b, int64_t n) {
  wait_for_prior_kernel();
  constexpr int P = Pack<T>::N;
  const int64_t i = pack_begin<T>();
  if (i + P <= n) {
    Pack<T> x = load16(a + i), y = load16(b + i), z;
#pragma unroll
    for (int k = 0; k < P; ++k) z.set(k, x.f(k) + y.f(k));
    store16(out + i, z);
  } else {
    for (int64_t j = i; j < n; ++j) out[j] = from_f32<T>(to_f32(a[j]) + to_f32(b[j]));
  }
}

// ---- kernel launchers -----------------------------------------------------------------------

void residual_forward(const Ctx& c, DType t, void* out, const void* a, const void* b, int64_t n) {
  FT_CHECK(aligned16(out) && aligned16(a) && aligned16(b), "residual: pointers must be 16-byte aligned");
  dispatch_float(t, [&](auto tag) {
    using E = decltype(tag);
    launch(c, residual_forward_kernel<E>, dim3(pack_grid<E>(n)), dim3(kPackBlock), 0, static_cast<E*>(out),
           static_cast<const E*>(a), static_cast<const E*>(b), n);
  });
}

}  // namespace ft::cuda
