// The backward of the block's middle in one pass (Backend::norm_modulate_gated_residual_backward):
// the fused norm + modulate's backward (norm_modulate.cu's register kernel, row for row) adds
// the norm's input gradient into dr, and from the same registers the gated residual behind it
// (r = res + gate * y) writes dy = gate * dr into y's row (window order or not) and sums dgate
// = dr * y and the bias gradient of y's product (the stored dy) by column. Against the two
// kernels it saves reading dr back. Each block keeps four column sums a lane (dshift, dscale
// in registers, dgate, dbias in its warp's shared memory), adds its warps' in warp order and
// writes f32 partials [B, G, 4, C]; a second kernel sums the G chunks in order into dshift, dscale, dgate and the
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

// Per-warp column sums in shared memory: the warp's slab [2][K][P][32] floats, lane l's
// element k of its pack i at [s][i][k][l], so a warp's access to one (s, i, k) touches 32
// consecutive words (no bank conflict). Only lane l ever touches its words: no barrier until
// the block's end.
template <int K, int P> constexpr int kNmrSlab = 2 * K * P * 32;

// Block (chunk, b) of kNmWarps warps over rows of up to 32 * K packs, as
// norm_modulate_backward_reg_kernel, then the gated residual's part of each row. The norm's
// two column sums stay in registers; the gated residual's two (dgate, dbias) go to the warp's
// slab in shared memory, which leaves two blocks an SM (four sums in registers left one, with
// 8 warps an SM too few to cover the row's dependent loads: 0.626 ms against the two kernels'
// 0.440 at CDEIT's first stage, session 17). The per-sample rows (scale, gate) are read once
// a block, y with the row's other loads. Shared memory: the slabs, then the block's 2C sums.
template <class T, int K, bool RMS>
__global__ void __launch_bounds__(kNmWarps * 32, 2)
    norm_modulate_residual_backward_kernel(T* dr, float* partial, const T* dout, const T* r, const float* mean,
                                           const float* rstd, const T* scale, int64_t T_, int64_t C, int64_t R,
                                           window::Geom g, bool win, NmResidualGrad<T> rg) {
  constexpr int P = Pack<T>::N, SLAB = kNmrSlab<K, P>;
  extern __shared__ float nmr_smem[];  // [kNmWarps][SLAB], then cs[2C]
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  float* slab = nmr_smem + warp * SLAB;
  float* cs = nmr_smem + kNmWarps * SLAB;
  const int64_t b = blockIdx.y, CP = C / P;
  const int64_t r0 = b * T_ + (int64_t)blockIdx.x * R, r1 = r0 + R < (b + 1) * T_ ? r0 + R : (b + 1) * T_;
  float a1[K][P], a2[K][P];
  Pack<T> scv[K], gtv[K];
#pragma unroll
  for (int i = 0; i < K; ++i) {
    const int64_t j = lane + 32 * i;
    if (j < CP) {
      scv[i] = load16(scale + b * C + j * P);
      gtv[i] = load16(rg.gate + b * C + j * P);
    }
#pragma unroll
    for (int k = 0; k < P; ++k) {
      a1[i][k] = a2[i][k] = 0.f;
      slab[(i * P + k) * 32 + lane] = 0.f;
      slab[((K + i) * P + k) * 32 + lane] = 0.f;
    }
  }
  for (int64_t row = r0 + warp; row < r1; row += kNmWarps) {
    const int64_t src = nm_src(g, win, row);
    const int64_t yrow = rg.ywin ? window::reverse_src(rg.yg, src) : src;
    const T* x = r + src * C;
    const T* dy = dout + row * C;
    const T* yy = rg.y + yrow * C;
    T* dx = dr + src * C;
    T* dyy = rg.dy + yrow * C;
    Pack<T> xv[K], dv[K], gv[K], yv[K];
#pragma unroll
    for (int i = 0; i < K; ++i) {
      const int64_t j = lane + 32 * i;
      if (j < CP) {
        xv[i] = load16_cs(x + j * P);
        dv[i] = load16_cs(dy + j * P);
        gv[i] = load16(dx + j * P);
        yv[i] = load16_cs(yy + j * P);  // y read before dy is written (they may alias)
      }
    }
    const float m = RMS ? 0.f : mean[src], s = rstd[src];
    // gv becomes the new dr row (stored, rounded as the two kernels store it)
    nm_backward_row<T, K, RMS>(xv, dv, gv, scv, m, s, a1, a2, dx, lane, CP, C);
    // the gated residual's backward of the row, from the stored dr in registers
#pragma unroll
    for (int i = 0; i < K; ++i) {
      const int64_t j = lane + 32 * i;
      if (j < CP) {
        Pack<T> o;
#pragma unroll
        for (int k = 0; k < P; ++k) {
          const float d = gv[i].f(k);
          o.set(k, d * gtv[i].f(k));
          slab[(i * P + k) * 32 + lane] += d * yv[i].f(k);
          slab[((K + i) * P + k) * 32 + lane] += o.f(k);
        }
        store16(dyy + j * P, o);
      }
    }
  }
  nm_warp_sums<K, P>(cs, a1, a2, lane, warp, CP, C);  // ends with a barrier: every slab is final
  float* p = partial + ((int64_t)b * gridDim.x + blockIdx.x) * 4 * C;
  for (int64_t c = threadIdx.x; c < 2 * C; c += blockDim.x) p[c] = cs[c];
  for (int at = threadIdx.x; at < SLAB; at += blockDim.x) {  // the slabs' sums, warp 0 first
    const int which = at / (K * P * 32), i = at / (P * 32) % K, k = at / 32 % P, pk = i * 32 + at % 32;
    if (pk >= CP) continue;
    float acc = 0.f;
    for (int w = 0; w < kNmWarps; ++w) acc += nmr_smem[w * SLAB + at];
    p[(2 + which) * C + pk * P + k] = acc;
  }
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
    // rows of up to 64 packs (C = 512 in bf16): wider ones need more registers than two
    // blocks an SM leave (K = 3 spills) and run as the two ops
    const int K = nm_packs_per_lane(C, Pack<E>::N, {1, 2});
    if (K == 0) return;
    NmResidualGrad<E> rg;
    rg.dy = static_cast<E*>(dy);
    rg.y = static_cast<const E*>(y);
    rg.gate = static_cast<const E*>(gate);
    rg.ywin = ywin != nullptr;
    if (ywin) rg.yg = *ywin;
    size_t smem = 0;  // set per K below
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
    smem = (kNmWarps * kNmrSlab<KK, Pack<E>::N> + 2 * C) * sizeof(float);                   \
    by_norm(norm_modulate_residual_backward_kernel<E, KK, false>,                           \
            norm_modulate_residual_backward_kernel<E, KK, true>);                           \
    break;
    switch (K) {
      FT_NMR_BWD(1)
      FT_NMR_BWD(2)
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
