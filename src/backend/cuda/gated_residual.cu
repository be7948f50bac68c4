// Gated residual (DiT): out[B,T,C] = res + gate[B,C] * y, and its backward (dy = gate * dout,
// dgate summed over T deterministically; see row_broadcast.cuh). The residual's gradient is
// dout itself, so the backward writes no dres.
#include "backend/cuda/row_broadcast.cuh"

namespace ft::cuda {

// ---- CUDA kernels ---------------------------------------------------------------------------

// As modulate_forward_kernel: thread i handles STEP elements (1, or an aligned pack).
template <class T, int STEP>
__global__ void gated_residual_forward_kernel(T* out, const T* res, const T* y, const T* gate,
                                              int64_t n, int64_t TC, int64_t C) {
  const int64_t i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * STEP;
  if (i >= n) return;
  const int64_t r = (i / TC) * C + i % C;  // the element's (b, c) in gate
  if constexpr (STEP == 1) {
    out[i] = from_f32<T>(to_f32(res[i]) + to_f32(gate[r]) * to_f32(y[i]));
  } else {
    Pack<T> rv = load16(res + i), yv = load16(y + i), g = load16(gate + r), o;
#pragma unroll
    for (int k = 0; k < STEP; ++k) o.set(k, rv.f(k) + g.f(k) * yv.f(k));
    store16(out + i, o);
  }
}

// ---- kernel launchers -----------------------------------------------------------------------

void gated_residual_forward(const Ctx& c, DType t, void* out, const void* res, const void* y,
                            const void* gate, int64_t B, int64_t T, int64_t C) {
  const int64_t n = B * T * C;
  launch_row_broadcast_forward(t, n, C, {out, res, y, gate}, [&](auto tag, auto step, unsigned grid) {
    using E = decltype(tag);
    gated_residual_forward_kernel<E, decltype(step)::value><<<grid, kPackBlock, 0, c.stream>>>(
        static_cast<E*>(out), static_cast<const E*>(res), static_cast<const E*>(y), static_cast<const E*>(gate),
        n, T * C, C);
  });
}

void gated_residual_backward(const Ctx& c, DType t, void* dy, void* dgate, const void* dout,
                             const void* y, const void* gate, int64_t B, int64_t T, int64_t C) {
  launch_row_broadcast_backward<false>(c, t, dy, nullptr, dgate, dout, y, gate, B, T, C);
}

}  // namespace ft::cuda
