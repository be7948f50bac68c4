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
#include "backend/cuda/attention_tc.cuh"  // cp.async wrappers
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

// The gated residual's part of a row, after nm_backward_row left the row's new dr in gv: dy =
// gate * dr stored in y's row, dgate (dr * y) and dbias (the stored dy) added to the warp's slab.
template <class T, int K>
__device__ __forceinline__ void nmr_residual_row(const Pack<T> (&gv)[K], const Pack<T> (&yv)[K],
                                                 const Pack<T> (&gtv)[K], float* slab, T* dyy, int lane, int64_t CP) {
  constexpr int P = Pack<T>::N;
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

// The start of a block: the lane's per-sample packs (scale, gate), its column sums and its
// warp's slab zeroed.
template <class T, int K>
__device__ __forceinline__ void nmr_block_start(Pack<T> (&scv)[K], Pack<T> (&gtv)[K], float (&a1)[K][Pack<T>::N],
                                                float (&a2)[K][Pack<T>::N], float* slab, const T* scale,
                                                const T* gate, int64_t b, int lane, int64_t CP, int64_t C) {
  constexpr int P = Pack<T>::N;
#pragma unroll
  for (int i = 0; i < K; ++i) {
    const int64_t j = lane + 32 * i;
    if (j < CP) {
      scv[i] = load16(scale + b * C + j * P);
      gtv[i] = load16(gate + b * C + j * P);
    }
#pragma unroll
    for (int k = 0; k < P; ++k) {
      a1[i][k] = a2[i][k] = 0.f;
      slab[(i * P + k) * 32 + lane] = 0.f;
      slab[((K + i) * P + k) * 32 + lane] = 0.f;
    }
  }
}

// The end of a block: the warps' sums (registers and slabs, warp order) into the block's four
// partial rows [4][C] (dshift, dscale, dgate, dbias).
template <int K, int P>
__device__ __forceinline__ void nmr_block_end(float* smem, const float (&a1)[K][P], const float (&a2)[K][P],
                                              float* partial, int lane, int warp, int64_t CP, int64_t C) {
  constexpr int SLAB = kNmrSlab<K, P>;
  float* cs = smem + kNmWarps * SLAB;
  nm_warp_sums<K, P>(cs, a1, a2, lane, warp, CP, C);  // ends with a barrier: every slab is final
  float* p = partial + ((int64_t)blockIdx.y * gridDim.x + blockIdx.x) * 4 * C;
  for (int64_t c = threadIdx.x; c < 2 * C; c += blockDim.x) p[c] = cs[c];
  for (int at = threadIdx.x; at < SLAB; at += blockDim.x) {  // the slabs' sums, warp 0 first
    const int which = at / (K * P * 32), i = at / (P * 32) % K, k = at / 32 % P, pk = i * 32 + at % 32;
    if (pk >= CP) continue;
    float acc = 0.f;
    for (int w = 0; w < kNmWarps; ++w) acc += smem[w * SLAB + at];
    p[(2 + which) * C + pk * P + k] = acc;
  }
}

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
  wait_for_prior_kernel();
  constexpr int P = Pack<T>::N, SLAB = kNmrSlab<K, P>;
  extern __shared__ float nmr_smem[];  // [kNmWarps][SLAB], then cs[2C]
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  float* slab = nmr_smem + warp * SLAB;
  const int64_t b = blockIdx.y, CP = C / P;
  const int64_t r0 = b * T_ + (int64_t)blockIdx.x * R, r1 = r0 + R < (b + 1) * T_ ? r0 + R : (b + 1) * T_;
  float a1[K][P], a2[K][P];
  Pack<T> scv[K], gtv[K];
  nmr_block_start<T, K>(scv, gtv, a1, a2, slab, scale, rg.gate, b, lane, CP, C);
  for (int64_t row = r0 + warp; row < r1; row += kNmWarps) {
    const int64_t src = nm_src(g, win, row);
    const int64_t yrow = rg.ywin ? window::reverse_src(rg.yg, src) : src;
    const T* x = r + src * C;
    const T* dy = dout + row * C;
    const T* yy = rg.y + yrow * C;
    T* dx = dr + src * C;
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
    nmr_residual_row<T, K>(gv, yv, gtv, slab, rg.dy + yrow * C, lane, CP);
  }
  nmr_block_end<K, P>(nmr_smem, a1, a2, partial, lane, warp, CP, C);
}

// The same, each warp's next kNmrStages rows in flight by cp.async (FT_RESIDUAL_NORM_STAGED=1):
// the kernel above has one row a warp in flight and waits for it (four 1 KB rows at C = 512)
// before the row's arithmetic, shuffles and stores, so an SM's loads stop between rows; at
// 2.05 TB/s on an H100 it ran below SiLU's cp.async kernel (2.5, session 20). Each lane copies
// its own packs (and the row's mean and rstd) into its own slots of the warp's stage buffer and
// reads back only those, so no barrier is needed; rows are distinct (no row of one tensor is
// another row of another), so prefetching later rows while this one is stored is safe.
constexpr int kNmrStages = 2;
// a warp's stage buffer: the four inputs' 16-byte packs, then each slot's mean and rstd
template <int K> constexpr int kNmrStageBytes = kNmrStages * (4 * K * 32 * 16 + 2 * 32 * 4);

template <class T, int K, bool RMS>
__global__ void __launch_bounds__(kNmWarps * 32, 2)
    norm_modulate_residual_backward_staged_kernel(T* dr, float* partial, const T* dout, const T* r,
                                                  const float* mean, const float* rstd, const T* scale, int64_t T_,
                                                  int64_t C, int64_t R, window::Geom g, bool win,
                                                  NmResidualGrad<T> rg) {
  wait_for_prior_kernel();
  constexpr int P = Pack<T>::N, SLAB = kNmrSlab<K, P>, S = kNmrStages;
  extern __shared__ float nmr_smem[];  // [kNmWarps][SLAB], cs[2C], then [kNmWarps] stage buffers
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  float* slab = nmr_smem + warp * SLAB;
  unsigned char* stage = reinterpret_cast<unsigned char*>(nmr_smem + kNmWarps * SLAB + 2 * C) +
                         (size_t)warp * kNmrStageBytes<K>;
  Pack<T>* st = reinterpret_cast<Pack<T>*>(stage);                            // [S][4][K][32]
  float* ms = reinterpret_cast<float*>(stage + S * 4 * K * 32 * sizeof(Pack<T>));  // [S][2][32]
  const int64_t b = blockIdx.y, CP = C / P;
  const int64_t r0 = b * T_ + (int64_t)blockIdx.x * R, r1 = r0 + R < (b + 1) * T_ ? r0 + R : (b + 1) * T_;
  float a1[K][P], a2[K][P];
  Pack<T> scv[K], gtv[K];
  nmr_block_start<T, K>(scv, gtv, a1, a2, slab, scale, rg.gate, b, lane, CP, C);
  auto issue = [&](int64_t row, int slot) {  // past r1: an empty group (the waits count groups)
    const bool live = row < r1;
    const int64_t src = live ? nm_src(g, win, row) : 0;
    const int64_t yrow = live && rg.ywin ? window::reverse_src(rg.yg, src) : src;
    const T* from[4] = {r + src * C, dout + (live ? row : 0) * C, dr + src * C, rg.y + yrow * C};
#pragma unroll
    for (int i = 0; i < K; ++i) {
      const int64_t j = lane + 32 * i;
      const bool ok = live && j < CP;
#pragma unroll
      for (int t = 0; t < 4; ++t) tc::cp16(&st[((slot * 4 + t) * K + i) * 32 + lane], from[t] + (ok ? j * P : 0), ok);
    }
    tc::cp4(&ms[(slot * 2) * 32 + lane], RMS ? rstd : mean + src, live && !RMS);
    tc::cp4(&ms[(slot * 2 + 1) * 32 + lane], rstd + src, live);
    tc::cp_commit();
  };
  for (int k = 0; k < S; ++k) issue(r0 + warp + (int64_t)k * kNmWarps, k);
  int slot = 0;
  for (int64_t row = r0 + warp; row < r1; row += kNmWarps) {
    tc::cp_wait<S - 1>();  // groups complete in order: this row's is done
    Pack<T> xv[K], dv[K], gv[K], yv[K];
#pragma unroll
    for (int i = 0; i < K; ++i) {
      xv[i] = st[((slot * 4 + 0) * K + i) * 32 + lane];
      dv[i] = st[((slot * 4 + 1) * K + i) * 32 + lane];
      gv[i] = st[((slot * 4 + 2) * K + i) * 32 + lane];
      yv[i] = st[((slot * 4 + 3) * K + i) * 32 + lane];
    }
    const float m = RMS ? 0.f : ms[(slot * 2) * 32 + lane], s = ms[(slot * 2 + 1) * 32 + lane];
    // the slot just read is refilled: keep the compiler from moving its shared-memory reads
    // past the copy (cp16's asm names no memory)
    asm volatile("" ::: "memory");
    issue(row + (int64_t)S * kNmWarps, slot);
    slot = slot + 1 == S ? 0 : slot + 1;
    const int64_t src = nm_src(g, win, row);
    const int64_t yrow = rg.ywin ? window::reverse_src(rg.yg, src) : src;
    nm_backward_row<T, K, RMS>(xv, dv, gv, scv, m, s, a1, a2, dr + src * C, lane, CP, C);
    nmr_residual_row<T, K>(gv, yv, gtv, slab, rg.dy + yrow * C, lane, CP);
  }
  tc::cp_wait<0>();
  nmr_block_end<K, P>(nmr_smem, a1, a2, partial, lane, warp, CP, C);
}

// Over the G chunks in order, one thread per (b, column of the 4C): dshift, dscale, dgate
// [B, C] in the storage type, and the bias partials [B, C] as floats (when wanted).
template <class T>
__global__ void __launch_bounds__(kNmReduceThreads)
    norm_modulate_residual_colsum_kernel(T* dshift, T* dscale, T* dgate, float* bias_part, const float* partial,
                                         int64_t G, int64_t B, int64_t C) {
  wait_for_prior_kernel();
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
                                           float beta, int64_t B, int64_t T, int64_t C, bool rms, bool staged) {
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
      launch(c, kernel, dim3((unsigned)ch.G, (unsigned)B), dim3(kNmWarps * 32), smem, static_cast<E*>(dr), partial,
             static_cast<const E*>(dout), static_cast<const E*>(r), mean, rstd, static_cast<const E*>(scale), T, C,
             ch.R, g, win != nullptr, rg);
    };
    auto by_norm = [&](auto layer, auto rmsk) { rms ? go(rmsk) : go(layer); };
#define FT_NMR_BWD(KK)                                                                      \
  case KK:                                                                                  \
    smem = (kNmWarps * kNmrSlab<KK, Pack<E>::N> + 2 * C) * sizeof(float);                   \
    if (staged) {                                                                           \
      smem += kNmWarps * kNmrStageBytes<KK>;                                                \
      by_norm(norm_modulate_residual_backward_staged_kernel<E, KK, false>,                  \
              norm_modulate_residual_backward_staged_kernel<E, KK, true>);                  \
    } else {                                                                                \
      by_norm(norm_modulate_residual_backward_kernel<E, KK, false>,                         \
              norm_modulate_residual_backward_kernel<E, KK, true>);                         \
    }                                                                                       \
    break;
    switch (K) {
      FT_NMR_BWD(1)
      FT_NMR_BWD(2)
      default:
        return;
    }
#undef FT_NMR_BWD
    launch(c, norm_modulate_residual_colsum_kernel<E>, dim3((unsigned)ceil_div(B * 4 * C, kNmReduceThreads)),
           dim3(kNmReduceThreads), 0, static_cast<E*>(dshift), static_cast<E*>(dscale), static_cast<E*>(dgate),
           bias_part, partial, ch.G, B, C);
    if (dbias) bias_reduce(c, t, dbias, bias_part, static_cast<int>(B), C, beta);
    done = true;
  });
  return done;
}

}  // namespace ft::cuda
