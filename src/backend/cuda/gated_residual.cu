// Gated residual (DiT): out[B,T,C] = res + gate[B,C] * y, and its backward (dy = gate * dout,
// dgate summed over T deterministically; see row_broadcast.cuh). The residual's gradient is
// dout itself, so the backward writes no dres.
#include "backend/cuda/row_broadcast.cuh"

namespace ft::cuda {

// ---- CUDA kernels ---------------------------------------------------------------------------

// As modulate_forward_kernel: thread i handles STEP elements (1, or an aligned pack). WIN: y
// in window order (its row for token row i / C is window::reverse_src; a pack stays in a row).
template <class T, int STEP, bool WIN>
__global__ void gated_residual_forward_kernel(T* out, const T* res, const T* y, const T* gate,
                                              int64_t n, int64_t TC, int64_t C, window::Geom win) {
  wait_for_prior_kernel();
  const int64_t i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * STEP;
  if (i >= n) return;
  const int64_t r = (i / TC) * C + i % C;  // the element's (b, c) in gate
  const int64_t iy = WIN ? window::reverse_src(win, i / C) * C + i % C : i;
  if constexpr (STEP == 1) {
    out[i] = from_f32<T>(to_f32(res[i]) + to_f32(gate[r]) * to_f32(y[iy]));
  } else {
    Pack<T> rv = load16(res + i), yv = load16(y + iy), g = load16(gate + r), o;
#pragma unroll
    for (int k = 0; k < STEP; ++k) o.set(k, rv.f(k) + g.f(k) * yv.f(k));
    store16(out + i, o);
  }
}

// ---- kernel launchers -----------------------------------------------------------------------

void gated_residual_forward(const Ctx& c, DType t, void* out, const void* res, const void* y,
                            const void* gate, int64_t B, int64_t T, int64_t C, const window::Geom* win) {
  const int64_t n = B * T * C;
  launch_row_broadcast_forward(t, n, C, {out, res, y, gate}, [&](auto tag, auto step, unsigned grid) {
    using E = decltype(tag);
    constexpr int S = decltype(step)::value;
    if (win)
      launch(c, gated_residual_forward_kernel<E, S, true>, dim3(grid), dim3(kPackBlock), 0, static_cast<E*>(out),
             static_cast<const E*>(res), static_cast<const E*>(y), static_cast<const E*>(gate), n, T * C, C, *win);
    else
      launch(c, gated_residual_forward_kernel<E, S, false>, dim3(grid), dim3(kPackBlock), 0, static_cast<E*>(out),
             static_cast<const E*>(res), static_cast<const E*>(y), static_cast<const E*>(gate), n, T * C, C,
             window::Geom{});
  });
}

void gated_residual_backward(const Ctx& c, DType t, void* dy, void* dgate, const void* dout,
                             const void* y, const void* gate, int64_t B, int64_t T, int64_t C,
                             const window::Geom* win, void* dbias, float beta) {
  // The bias gradient's first stage comes from the same pass (per-sample column sums of dy in
  // the scratch) where the scratch holds [B, C] floats; else a reduction over dy after it.
  float* part = dbias && c.scratch_bytes >= static_cast<size_t>(B * C) * sizeof(float)
                    ? static_cast<float*>(c.scratch) : nullptr;
  launch_row_broadcast_backward<false>(c, t, dy, nullptr, dgate, dout, y, gate, B, T, C, win, part);
  if (part) bias_reduce(c, t, dbias, part, static_cast<int>(B), C, beta);
  else if (dbias) bias_backward(c, t, dbias, dy, B * T, C, beta);
}

}  // namespace ft::cuda
