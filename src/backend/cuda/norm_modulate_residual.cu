// The backward of the block's middle in one pass (Backend::norm_modulate_gated_residual_backward):
// the fused norm + modulate's backward (norm_modulate.cu's register kernel, row for row) adds
// the norm's input gradient into dr, and from the same registers the gated residual behind it
// (r = res + gate * y) writes dy = gate * dr into y's row (window order or not) and sums dgate
// = dr * y and the bias gradient of y's product (the stored dy) by column. Against the two
// kernels it saves reading dr back. Each block keeps four column sums a lane in registers
// (dshift, dscale, dgate, dbias), adds its warps' in warp order and writes f32 partials
// [B, G, 4, C]; a second kernel sums the G chunks in order into dshift, dscale, dgate and the
// per-sample bias partials [B, C], which matmul.cu's bias_reduce adds over the samples. Every
// sum has a fixed order: the same bits run to run (not the two kernels' bits: their column
// sums run in another order).
#include "backend/cuda/norm_modulate_kernels.cuh"

namespace ft::cuda {

namespace {

// The gated residual behind the norm: y, gate and their gradients (dy in y's row order).
template <class T> struct NmResidualGrad {
  T* dy = nullptr;
  const T* y = nullptr;
  const T* gate = nullptr;
  window::Geom yg;  // with ywin, token row n's y row is window::reverse_src(yg, n)
  bool ywin = false;
};

// Block (chunk, b) of kNmWarps warps over rows of up to 32 * K packs, as
// norm_modulate_backward_reg_kernel, then the gated residual's part of each row; shared memory:
// the block's 4C column sums.
template <class T, int K, bool RMS>
__global__ void __launch_bounds__(kNmWarps * 32, 1)
    norm_modulate_residual_backward_kernel(T* dr, float* partial, const T* dout, const T* r, const float* mean,
                                           const float* rstd, const T* scale, int64_t T_, int64_t C, int64_t R,
                                           window::Geom g, bool win, NmResidualGrad<T> rg) {
  constexpr int P = Pack<T>::N;
  extern __shared__ float cs[];  // [4][C]
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t b = blockIdx.y, CP = C / P;
  const int64_t r0 = b * T_ + (int64_t)blockIdx.x * R, r1 = r0 + R < (b + 1) * T_ ? r0 + R : (b + 1) * T_;
  float a1[K][P], a2[K][P], a3[K][P], a4[K][P];
#pragma unroll
  for (int i = 0; i < K; ++i)
#pragma unroll
    for (int k = 0; k < P; ++k) a1[i][k] = a2[i][k] = a3[i][k] = a4[i][k] = 0.f;
  const T* sc = scale + b * C;
  const T* gt = rg.gate + b * C;
  for (int64_t row = r0 + warp; row < r1; row += kNmWarps) {
    const int64_t src = nm_src(g, win, row);
    const T* x = r + src * C;
    const T* dy = dout + row * C;
    T* dx = dr + src * C;
    Pack<T> xv[K], dv[K], gv[K], scv[K];
#pragma unroll
    for (int i = 0; i < K; ++i) {
      const int64_t j = lane + 32 * i;
      if (j < CP) {
        xv[i] = load16_cs(x + j * P);
        dv[i] = load16_cs(dy + j * P);
        gv[i] = load16(dx + j * P);
        scv[i] = load16(sc + j * P);
      }
    }
    const float m = RMS ? 0.f : mean[src], s = rstd[src];
    // gv becomes the new dr row (stored, rounded as the two kernels store it)
    nm_backward_row<T, K, RMS>(xv, dv, gv, scv, m, s, a1, a2, dx, lane, CP, C);
    // the gated residual's backward of the row, from the stored dr in registers
    const int64_t yrow = rg.ywin ? window::reverse_src(rg.yg, src) : src;
    const T* yy = rg.y + yrow * C;
    T* dyy = rg.dy + yrow * C;
#pragma unroll
    for (int i = 0; i < K; ++i) {
      const int64_t j = lane + 32 * i;
      if (j < CP) {
        const Pack<T> yv = load16_cs(yy + j * P), gtv = load16(gt + j * P);  // y read before dy (may alias)
        Pack<T> o;
#pragma unroll
        for (int k = 0; k < P; ++k) {
          const float d = gv[i].f(k);
          o.set(k, d * gtv.f(k));
          a3[i][k] += d * yv.f(k);
          a4[i][k] += o.f(k);
        }
        store16(dyy + j * P, o);
      }
    }
  }
  nm_warp_sums<K, P>(cs, a1, a2, lane, warp, CP, C);
  nm_warp_sums<K, P>(cs + 2 * C, a3, a4, lane, warp, CP, C);
  float* p = partial + ((int64_t)b * gridDim.x + blockIdx.x) * 4 * C;
  for (int64_t c = threadIdx.x; c < 4 * C; c += blockDim.x) p[c] = cs[c];
}

// Over the G chunks in order, one thread per (b, column of the 4C): dshift, dscale, dgate
// [B, C] in the storage type, and the bias partials [B, C] as floats (when wanted).
template <class T>
__global__ void __launch_bounds__(kNmReduceThreads)
    norm_modulate_residual_colsum_kernel(T* dshift, T* dscale, T* dgate, float* bias_part, const float* partial,
                                         int64_t G, int64_t B, int64_t C) {
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= B * 4 * C) return;
  const int64_t b = i / (4 * C), c = i % (4 * C), which = c / C, col = c % C;
  const float* p = partial + b * G * 4 * C + c;
  float acc = 0.f;
#pragma unroll 4
  for (int64_t k = 0; k < G; ++k) acc += p[k * 4 * C];
  if (which == 0) dshift[b * C + col] = from_f32<T>(acc);
  else if (which == 1) dscale[b * C + col] = from_f32<T>(acc);
  else if (which == 2) dgate[b * C + col] = from_f32<T>(acc);
  else if (bias_part) bias_part[b * C + col] = acc;
}

}  // namespace

size_t norm_modulate_residual_backward_scratch(int64_t B, int64_t T, int64_t C, int num_sms) {
  if (B <= 0 || T <= 0 || C <= 0) return 0;
  const NmChunks ch = nm_chunks(B, T, num_sms);
  return (size_t)(B * ch.G * 4 * C + B * C) * sizeof(float);
}

bool norm_modulate_gated_residual_backward(const Ctx& c, DType t, void* dr, void* dshift, void* dscale,
                                           const void* dout, const void* r, const float* mean, const float* rstd,
                                           const void* scale, const window::Geom* win, void* dy, void* dgate,
                                           const void* y, const void* gate, const window::Geom* ywin, void* dbias,
                                           float beta, int64_t B, int64_t T, int64_t C, bool rms) {
  if (B == 0 || T == 0 || C == 0) return true;
  if (B > 65535 || norm_modulate_residual_backward_scratch(B, T, C, c.num_sms) > c.scratch_bytes) return false;
  const NmChunks ch = nm_chunks(B, T, c.num_sms);
  float* partial = static_cast<float*>(c.scratch);
  float* bias_part = dbias ? partial + B * ch.G * 4 * C : nullptr;
  const window::Geom g = win ? *win : window::Geom{};
  bool done = false;
  dispatch_float(t, [&](auto tag) {
    using E = decltype(tag);
    if (!nm_packed<E>(C, {dr, dout, r, scale, dy, y, gate})) return;
    const int K = nm_packs_per_lane(C, Pack<E>::N, {1, 2, 3, 4});
    if (K == 0) return;
    NmResidualGrad<E> rg;
    rg.dy = static_cast<E*>(dy);
    rg.y = static_cast<const E*>(y);
    rg.gate = static_cast<const E*>(gate);
    rg.ywin = ywin != nullptr;
    if (ywin) rg.yg = *ywin;
    const size_t smem = 4 * C * sizeof(float);
    auto go = [&](auto kernel) {
      if (smem > 48 * 1024)
        CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
      kernel<<<dim3((unsigned)ch.G, (unsigned)B), kNmWarps * 32, smem, c.stream>>>(
          static_cast<E*>(dr), partial, static_cast<const E*>(dout), static_cast<const E*>(r), mean, rstd,
          static_cast<const E*>(scale), T, C, ch.R, g, win != nullptr, rg);
      CUDA_CHECK_LAUNCH();
    };
    auto by_norm = [&](auto layer, auto rmsk) { rms ? go(rmsk) : go(layer); };
#define FT_NMR_BWD(KK)                                                                      \
  case KK:                                                                                  \
    by_norm(norm_modulate_residual_backward_kernel<E, KK, false>,                           \
            norm_modulate_residual_backward_kernel<E, KK, true>);                           \
    break;
    switch (K) {
      FT_NMR_BWD(1)
      FT_NMR_BWD(2)
      FT_NMR_BWD(3)
      FT_NMR_BWD(4)
      default:
        return;
    }
#undef FT_NMR_BWD
    norm_modulate_residual_colsum_kernel<E><<<(unsigned)ceil_div(B * 4 * C, kNmReduceThreads), kNmReduceThreads, 0,
                                              c.stream>>>(static_cast<E*>(dshift), static_cast<E*>(dscale),
                                                          static_cast<E*>(dgate), bias_part, partial, ch.G, B, C);
    CUDA_CHECK_LAUNCH();
    if (dbias) bias_reduce(c, t, dbias, bias_part, static_cast<int>(B), C, beta);
    done = true;
  });
  return done;
}

}  // namespace ft::cuda
