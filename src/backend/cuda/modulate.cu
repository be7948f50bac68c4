// adaLN modulation (DiT): out[B,T,C] = x * (1 + scale[B,C]) + shift[B,C], and its backward
// (dx, and dshift/dscale summed over T deterministically; see row_broadcast.cuh).
#include "backend/cuda/row_broadcast.cuh"

namespace ft::cuda {

// ---- CUDA kernels ---------------------------------------------------------------------------

// Thread i handles elements [i*STEP, i*STEP + STEP) of the n = B*T*C; STEP is 1 or a pack
// (then C % STEP == 0 and every pointer 16-byte aligned).
template <class T, int STEP>
__global__ void modulate_forward_kernel(T* out, const T* x, const T* shift, const T* scale,
                                        int64_t n, int64_t TC, int64_t C) {
  wait_for_prior_kernel();
  const int64_t i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * STEP;
  if (i >= n) return;
  const int64_t r = (i / TC) * C + i % C;  // the element's (b, c) in shift/scale
  if constexpr (STEP == 1) {
    out[i] = from_f32<T>(to_f32(x[i]) * (1.f + to_f32(scale[r])) + to_f32(shift[r]));
  } else {
    Pack<T> xv = load16(x + i), sh = load16(shift + r), sc = load16(scale + r), y;
#pragma unroll
    for (int k = 0; k < STEP; ++k) y.set(k, xv.f(k) * (1.f + sc.f(k)) + sh.f(k));
    store16(out + i, y);
  }
}

// ---- kernel launchers -----------------------------------------------------------------------

void modulate_forward(const Ctx& c, DType t, void* out, const void* x, const void* shift,
                      const void* scale, int64_t B, int64_t T, int64_t C) {
  const int64_t n = B * T * C;
  launch_row_broadcast_forward(t, n, C, {out, x, shift, scale}, [&](auto tag, auto step, unsigned grid) {
    using E = decltype(tag);
    launch(c, modulate_forward_kernel<E, decltype(step)::value>, dim3(grid), dim3(kPackBlock), 0, static_cast<E*>(out),
           static_cast<const E*>(x), static_cast<const E*>(shift), static_cast<const E*>(scale), n, T * C, C);
  });
}

void modulate_backward(const Ctx& c, DType t, void* dx, void* dshift, void* dscale,
                       const void* dout, const void* x, const void* scale, int64_t B, int64_t T,
                       int64_t C) {
  launch_row_broadcast_backward<true>(c, t, dx, dshift, dscale, dout, x, scale, B, T, C);
}

}  // namespace ft::cuda
