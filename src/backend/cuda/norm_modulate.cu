// The fused adaLN input (Backend::norm_modulate_forward/backward): a no-affine LayerNorm or
// RMSNorm, then modulate x * (1 + scale[b]) + shift[b], optionally written in Swin window
// order. Only mean/rstd are saved; the backward recomputes xhat from inp.
//
// Forward: one warp per OUTPUT row (its input row is window::partition_src of it); where C is
// a whole number of 16-byte packs (and pointers are aligned) the row sits in registers, K
// packs a lane, and the statistics come from the registers (two passes, f32, the same lane
// and butterfly order as layernorm.cu / rmsnorm.cu); else a loop kernel re-reads the row
// element by element (any C). With the gated residual in front (RES, Backend::
// gated_residual_norm_modulate_forward), the register kernel computes the input row from res,
// gate and y, stores it and goes on from the registers: one read of the row saved.
// Backward: block (chunk g, sample b) owns R consecutive output rows of b; its warps walk
// them, each row: g = dout * (1 + scale), the norm's backward added into dinp[src], and per
// lane running column sums of dout and dout * xhat (registers in the pack kernel, the warp's
// own shared-memory row in the loop kernel). The block then adds its warps' sums in warp
// order and writes f32 partials [B, G, 2, C] to the op scratch, which a second kernel sums
// over the G chunks in order (G == 1: the block writes dshift/dscale itself). Every sum has
// an order fixed by the launch shape alone: the same bits run to run, no float atomics.
#include <algorithm>
#include <initializer_list>

#include "backend/cuda/norm_modulate_kernels.cuh"

namespace ft::cuda {

// ---- CUDA kernels ---------------------------------------------------------------------------

// The gated residual in front of the forward (RES): the input row n is r[n] = res[n] +
// gate[b] * y[ysrc(n)], computed and stored by the kernel instead of read.
template <class T> struct NmResidual {
  T* r = nullptr;
  const T* res = nullptr;
  const T* y = nullptr;
  const T* gate = nullptr;
  window::Geom yg;  // y in window order when ywin: its row of token row n is reverse_src(yg, n)
  bool ywin = false;
};

// Forward, rows of up to 32 * K packs held in registers (lane owns packs lane + 32 i). RES:
// the row is the gated residual's result (gated_residual.cu's arithmetic, rounded to T and
// stored to r), so the statistics see r as stored, as the two ops would.
template <class T, int K, bool RMS, bool RES = false>
__global__ void __launch_bounds__(kNmFwdThreads)
    norm_modulate_forward_reg_kernel(T* out, float* mean, float* rstd, const T* inp, const T* shift,
                                     const T* scale, int64_t N, int64_t T_, int64_t C, window::Geom g, bool win,
                                     float eps, NmResidual<T> rin) {
  wait_for_prior_kernel();
  constexpr int P = Pack<T>::N;
  const int lane = threadIdx.x % 32;
  const int64_t row = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  if (row >= N) return;
  const int64_t src = nm_src(g, win, row), b = row / T_, CP = C / P;
  Pack<T> xv[K];
  if constexpr (RES) {
    const T* rs = rin.res + src * C;
    const T* yy = rin.y + (rin.ywin ? window::reverse_src(rin.yg, src) : src) * C;
    const T* gt = rin.gate + b * C;
    T* r = rin.r + src * C;
#pragma unroll
    for (int i = 0; i < K; ++i)
      if (lane + 32 * i < CP) {
        const int64_t j = (lane + 32 * i) * P;
        const Pack<T> rv = load16(rs + j), yv = load16(yy + j), gv = load16(gt + j);
#pragma unroll
        for (int k = 0; k < P; ++k) xv[i].set(k, rv.f(k) + gv.f(k) * yv.f(k));
        store16(r + j, xv[i]);
      }
  } else {
    const T* x = inp + src * C;
#pragma unroll
    for (int i = 0; i < K; ++i)
      if (lane + 32 * i < CP) xv[i] = load16(x + (lane + 32 * i) * P);
  }
  float m = 0.f;
  if constexpr (!RMS) {
    float sum = 0.f;
#pragma unroll
    for (int i = 0; i < K; ++i)
      if (lane + 32 * i < CP)
#pragma unroll
        for (int k = 0; k < P; ++k) sum += xv[i].f(k);
    m = warp_sum(sum) / C;
  }
  float acc = 0.f;  // sum (x - mean)^2 (layer) or x^2 (rms)
#pragma unroll
  for (int i = 0; i < K; ++i)
    if (lane + 32 * i < CP)
#pragma unroll
      for (int k = 0; k < P; ++k) {
        const float d = RMS ? xv[i].f(k) : xv[i].f(k) - m;
        acc += d * d;
      }
  const float s = rsqrtf(warp_sum(acc) / C + eps);
  const T* sh = shift + b * C;
  const T* sc = scale + b * C;
  T* o = out + row * C;
#pragma unroll
  for (int i = 0; i < K; ++i) {
    const int64_t j = lane + 32 * i;
    if (j < CP) {
      const Pack<T> shv = load16(sh + j * P), scv = load16(sc + j * P);
      Pack<T> y;
#pragma unroll
      for (int k = 0; k < P; ++k) {
        const float xh = RMS ? xv[i].f(k) * s : (xv[i].f(k) - m) * s;
        y.set(k, xh * (1.f + scv.f(k)) + shv.f(k));
      }
      store16(o + j * P, y);
    }
  }
  if (lane == 0) {
    if constexpr (!RMS) mean[src] = m;
    rstd[src] = s;
  }
}

// Forward, any C: each pass re-reads the row (PACK: 16-byte packs, else single elements).
// The last parameter only gives it the register kernel's signature: no gated residual here.
template <class T, bool PACK, bool RMS>
__global__ void __launch_bounds__(kNmFwdThreads)
    norm_modulate_forward_loop_kernel(T* out, float* mean, float* rstd, const T* inp, const T* shift,
                                      const T* scale, int64_t N, int64_t T_, int64_t C, window::Geom g, bool win,
                                      float eps, NmResidual<T>) {
  wait_for_prior_kernel();
  const int lane = threadIdx.x % 32;
  const int64_t row = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  if (row >= N) return;
  const int64_t src = nm_src(g, win, row), b = row / T_;
  const T* x = inp + src * C;
  float m = 0.f;
  if constexpr (!RMS) {
    float sum = 0.f;
    row_for_lane<T, PACK>(x, C, lane, [&](int64_t, float v) { sum += v; });
    m = warp_sum(sum) / C;
  }
  float acc = 0.f;
  row_for_lane<T, PACK>(x, C, lane, [&](int64_t, float v) {
    const float d = RMS ? v : v - m;
    acc += d * d;
  });
  const float s = rsqrtf(warp_sum(acc) / C + eps);
  const T* sh = shift + b * C;
  const T* sc = scale + b * C;
  T* o = out + row * C;
  if constexpr (PACK) {
    constexpr int P = Pack<T>::N;
    for (int64_t c = (int64_t)lane * P; c < C; c += 32 * P) {
      const Pack<T> xv = load16(x + c), shv = load16(sh + c), scv = load16(sc + c);
      Pack<T> y;
#pragma unroll
      for (int k = 0; k < P; ++k) {
        const float xh = RMS ? xv.f(k) * s : (xv.f(k) - m) * s;
        y.set(k, xh * (1.f + scv.f(k)) + shv.f(k));
      }
      store16(o + c, y);
    }
  } else {
    for (int64_t c = lane; c < C; c += 32) {
      const float v = to_f32(x[c]), xh = RMS ? v * s : (v - m) * s;
      o[c] = from_f32<T>(xh * (1.f + to_f32(sc[c])) + to_f32(sh[c]));
    }
  }
  if (lane == 0) {
    if constexpr (!RMS) mean[src] = m;
    rstd[src] = s;
  }
}

// Backward, rows of up to 32 * K packs in registers; the lane's column sums of its packs
// (2 K P floats) stay in registers across the chunk's rows. Block (chunk, b) of kNmWarps
// warps; shared memory: the block's 2C column sums.
template <class T, int K, bool RMS>
__global__ void __launch_bounds__(kNmWarps * 32, K <= 3 ? 2 : 1)
    norm_modulate_backward_reg_kernel(T* dinp, T* dshift, T* dscale, float* partial, const T* dout, const T* inp,
                                      const float* mean, const float* rstd, const T* scale, int64_t T_,
                                      int64_t C, int64_t R, window::Geom g, bool win, bool accumulate) {
  wait_for_prior_kernel();
  constexpr int P = Pack<T>::N;
  extern __shared__ float cs[];  // [2][C]
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t b = blockIdx.y, CP = C / P;
  const int64_t r0 = b * T_ + (int64_t)blockIdx.x * R, r1 = r0 + R < (b + 1) * T_ ? r0 + R : (b + 1) * T_;
  float a1[K][P], a2[K][P];
#pragma unroll
  for (int i = 0; i < K; ++i)
#pragma unroll
    for (int k = 0; k < P; ++k) a1[i][k] = a2[i][k] = 0.f;
  const T* sc = scale + b * C;
  for (int64_t row = r0 + warp; row < r1; row += kNmWarps) {
    const int64_t src = nm_src(g, win, row);
    const T* x = inp + src * C;
    const T* dy = dout + row * C;
    T* dx = dinp + src * C;
    // scale is re-read each row (an L1 hit) rather than held: registers go to the column sums
    Pack<T> xv[K], dv[K], gv[K], scv[K];
#pragma unroll
    for (int i = 0; i < K; ++i) {
      const int64_t j = lane + 32 * i;
      if (j < CP) {  // inp and dout are read once here: stream them past L2
        xv[i] = load16_cs(x + j * P);
        dv[i] = load16_cs(dy + j * P);
        if (accumulate) gv[i] = load16(dx + j * P);
        else *reinterpret_cast<int4*>(&gv[i]) = make_int4(0, 0, 0, 0);  // overwrite: the old dinp unread
        scv[i] = load16(sc + j * P);
      }
    }
    const float m = RMS ? 0.f : mean[src], s = rstd[src];
    nm_backward_row<T, K, RMS>(xv, dv, gv, scv, m, s, a1, a2, dx, lane, CP, C);
  }
  nm_warp_sums<K, P>(cs, a1, a2, lane, warp, CP, C);
  nm_write_block_sums(dshift, dscale, partial, cs, C);
}

// Backward, any C: each pass re-reads the row; each warp keeps its column sums in its own
// shared-memory row ws[warp][2][C] (lanes own disjoint columns: no atomics), and the block
// adds the rows in warp order into ws[0].
template <class T, bool PACK, bool RMS>
__global__ void __launch_bounds__(kNmWarps * 32)
    norm_modulate_backward_loop_kernel(T* dinp, T* dshift, T* dscale, float* partial, const T* dout,
                                       const T* inp, const float* mean, const float* rstd, const T* scale,
                                       int64_t T_, int64_t C, int64_t R, window::Geom g, bool win,
                                       bool accumulate) {
  wait_for_prior_kernel();
  extern __shared__ float ws[];  // [nw][2][C]
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
  const int64_t b = blockIdx.y;
  const int64_t r0 = b * T_ + (int64_t)blockIdx.x * R, r1 = r0 + R < (b + 1) * T_ ? r0 + R : (b + 1) * T_;
  float* a1 = ws + (int64_t)warp * 2 * C;
  float* a2 = a1 + C;
  for (int64_t c = lane; c < 2 * C; c += 32) a1[c] = 0.f;
  __syncwarp();
  const T* sc = scale + b * C;
  for (int64_t row = r0 + warp; row < r1; row += nw) {
    const int64_t src = nm_src(g, win, row);
    const T* x = inp + src * C;
    const T* dy = dout + row * C;
    T* dx = dinp + src * C;
    const float m = RMS ? 0.f : mean[src], s = rstd[src];
    float sum_g = 0.f, sum_gx = 0.f;
    row_for_lane<T, PACK>(x, C, lane, [&](int64_t c, float v) {
      const float d = to_f32(dy[c]), gg = d * (1.f + to_f32(sc[c]));
      const float xh = RMS ? v * s : (v - m) * s;
      sum_g += gg;
      sum_gx += gg * xh;
      a1[c] += d;
      a2[c] += d * xh;
    });
    const float mg = RMS ? 0.f : warp_sum(sum_g) / C, mgx = warp_sum(sum_gx) / C;
    row_for_lane<T, PACK>(x, C, lane, [&](int64_t c, float v) {
      const float gg = to_f32(dy[c]) * (1.f + to_f32(sc[c]));
      const float old = accumulate ? to_f32(dx[c]) : 0.f;  // overwrite: the old dinp unread
      dx[c] = from_f32<T>(RMS ? old + s * (gg - v * s * mgx) : old + (gg - mg - (v - m) * s * mgx) * s);
    });
  }
  __syncthreads();
  for (int64_t c = threadIdx.x; c < 2 * C; c += blockDim.x) {
    float acc = ws[c];
    for (int w = 1; w < nw; ++w) acc += ws[(int64_t)w * 2 * C + c];
    ws[c] = acc;  // each column is read and written by one thread only
  }
  __syncthreads();
  nm_write_block_sums(dshift, dscale, partial, ws, C);
}

// dshift[b,c] = sum_g partial[b][g][0][c], dscale[b,c] = sum_g partial[b][g][1][c], in chunk
// order; one thread per (b, column of the 2C).
template <class T>
__global__ void __launch_bounds__(kNmReduceThreads)
    norm_modulate_colsum_kernel(T* dshift, T* dscale, const float* partial, int64_t G, int64_t B, int64_t C) {
  wait_for_prior_kernel();
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= B * 2 * C) return;
  const int64_t b = i / (2 * C), c = i % (2 * C);
  const float* p = partial + b * G * 2 * C + c;
  float acc = 0.f;
#pragma unroll 4
  for (int64_t k = 0; k < G; ++k) acc += p[k * 2 * C];
  if (c < C) dshift[b * C + c] = from_f32<T>(acc);
  else dscale[b * C + c - C] = from_f32<T>(acc);
}

// ---- kernel launchers -----------------------------------------------------------------------

void norm_modulate_forward(const Ctx& c, DType t, void* out, float* mean, float* rstd, const void* inp,
                           const void* shift, const void* scale, int64_t B, int64_t T, int64_t C,
                           const window::Geom* win, bool rms, float eps) {
  const int64_t N = B * T;
  if (N == 0 || C == 0) return;
  const window::Geom g = win ? *win : window::Geom{};
  const unsigned grid = (unsigned)ceil_div(N * 32, kNmFwdThreads);
  FT_CHECK(ceil_div(N * 32, kNmFwdThreads) < (int64_t{1} << 31), "norm_modulate_forward: ", N, " rows exceed the grid");
  dispatch_float(t, [&](auto tag) {
    using E = decltype(tag);
    auto* o = static_cast<E*>(out);
    auto* x = static_cast<const E*>(inp);
    auto* sh = static_cast<const E*>(shift);
    auto* sc = static_cast<const E*>(scale);
    const bool packed = nm_packed<E>(C, {out, inp, shift, scale});
    const int K = packed ? nm_packs_per_lane(C, Pack<E>::N, {1, 2, 3, 4, 6, 8}) : 0;
    auto go = [&](auto kernel) {
      launch(c, kernel, dim3(grid), dim3(kNmFwdThreads), 0, o, mean, rstd, x, sh, sc, N, T, C, g, win != nullptr, eps,
             NmResidual<E>{});
    };
    auto by_norm = [&](auto layer, auto rmsk) { rms ? go(rmsk) : go(layer); };
#define FT_NM_FWD_REG(KK) \
  case KK: by_norm(norm_modulate_forward_reg_kernel<E, KK, false>, norm_modulate_forward_reg_kernel<E, KK, true>); break;
    switch (K) {
      FT_NM_FWD_REG(1)
      FT_NM_FWD_REG(2)
      FT_NM_FWD_REG(3)
      FT_NM_FWD_REG(4)
      FT_NM_FWD_REG(6)
      FT_NM_FWD_REG(8)
      default:
        if (packed)
          by_norm(norm_modulate_forward_loop_kernel<E, true, false>, norm_modulate_forward_loop_kernel<E, true, true>);
        else
          by_norm(norm_modulate_forward_loop_kernel<E, false, false>,
                  norm_modulate_forward_loop_kernel<E, false, true>);
    }
#undef FT_NM_FWD_REG
  });
}

bool gated_residual_norm_modulate_forward(const Ctx& c, DType t, void* r, void* out, float* mean, float* rstd,
                                          const void* res, const void* y, const void* gate, const window::Geom* ywin,
                                          const void* shift, const void* scale, int64_t B, int64_t T, int64_t C,
                                          const window::Geom* win, bool rms, float eps) {
  const int64_t N = B * T;
  if (N == 0 || C == 0) return true;
  const window::Geom g = win ? *win : window::Geom{};
  const unsigned grid = (unsigned)ceil_div(N * 32, kNmFwdThreads);
  FT_CHECK(ceil_div(N * 32, kNmFwdThreads) < (int64_t{1} << 31), "gated_residual_norm_modulate_forward: ", N,
           " rows exceed the grid");
  bool done = false;
  dispatch_float(t, [&](auto tag) {
    using E = decltype(tag);
    if (!nm_packed<E>(C, {r, out, res, y, gate, shift, scale})) return;
    const int K = nm_packs_per_lane(C, Pack<E>::N, {1, 2, 3, 4, 6, 8});
    NmResidual<E> rin;
    rin.r = static_cast<E*>(r);
    rin.res = static_cast<const E*>(res);
    rin.y = static_cast<const E*>(y);
    rin.gate = static_cast<const E*>(gate);
    rin.ywin = ywin != nullptr;
    if (ywin) rin.yg = *ywin;
    auto go = [&](auto kernel) {
      launch(c, kernel, dim3(grid), dim3(kNmFwdThreads), 0, static_cast<E*>(out), mean, rstd, nullptr,
             static_cast<const E*>(shift), static_cast<const E*>(scale), N, T, C, g, win != nullptr, eps, rin);
      done = true;
    };
    auto by_norm = [&](auto layer, auto rmsk) { rms ? go(rmsk) : go(layer); };
#define FT_NM_RES_REG(KK)                                                                         \
  case KK:                                                                                        \
    by_norm(norm_modulate_forward_reg_kernel<E, KK, false, true>,                                 \
            norm_modulate_forward_reg_kernel<E, KK, true, true>);                                 \
    break;
    switch (K) {
      FT_NM_RES_REG(1)
      FT_NM_RES_REG(2)
      FT_NM_RES_REG(3)
      FT_NM_RES_REG(4)
      FT_NM_RES_REG(6)
      FT_NM_RES_REG(8)
      default:
        break;  // no register kernel for this C: the caller runs the two ops
    }
#undef FT_NM_RES_REG
  });
  return done;
}

size_t norm_modulate_backward_scratch(int64_t B, int64_t T, int64_t C, int num_sms) {
  if (B <= 0 || T <= 0 || C <= 0) return 0;
  const NmChunks ch = nm_chunks(B, T, num_sms);
  return ch.G == 1 ? 0 : (size_t)(B * ch.G * 2 * C) * sizeof(float);
}

void norm_modulate_backward(const Ctx& c, DType t, void* dinp, void* dshift, void* dscale, const void* dout,
                            const void* inp, const float* mean, const float* rstd, const void* scale, int64_t B,
                            int64_t T, int64_t C, const window::Geom* win, bool rms, bool overwrite) {
  if (B == 0 || T == 0 || C == 0) return;
  FT_CHECK(B <= 65535, "norm_modulate_backward: B=", B, " exceeds the grid's 65535");
  const NmChunks ch = nm_chunks(B, T, c.num_sms);
  const size_t need = norm_modulate_backward_scratch(B, T, C, c.num_sms);
  FT_CHECK(need <= c.scratch_bytes, "norm_modulate_backward: op scratch of ", c.scratch_bytes,
           " bytes is under the ", need, " needed; size the workspace with OpShape::norm_modulate(", B, ", ", T,
           ", ", C, ")");
  float* partial = need ? static_cast<float*>(c.scratch) : nullptr;
  const window::Geom g = win ? *win : window::Geom{};
  const dim3 grid((unsigned)ch.G, (unsigned)B);
  dispatch_float(t, [&](auto tag) {
    using E = decltype(tag);
    auto* dx = static_cast<E*>(dinp);
    auto* dsh = static_cast<E*>(dshift);
    auto* dsc = static_cast<E*>(dscale);
    auto* dy = static_cast<const E*>(dout);
    auto* x = static_cast<const E*>(inp);
    auto* sc = static_cast<const E*>(scale);
    const bool packed = nm_packed<E>(C, {dinp, dout, inp, scale});
    const int K = packed ? nm_packs_per_lane(C, Pack<E>::N, {1, 2, 3, 4, 6}) : 0;
    // register kernel: the block's 2C sums; loop kernel: 2C a warp, as many warps as fit
    int nw = kNmWarps;
    size_t smem = 2 * C * sizeof(float);
    if (K == 0) {
      nw = (int)std::min<int64_t>(kNmWarps, (int64_t)(c.max_smem_optin / smem));
      FT_CHECK(nw >= 1, "norm_modulate_backward: C=", C, " too large for shared memory");
      smem *= nw;
    }
    auto go = [&](auto kernel) {
      if (smem > 48 * 1024)
        CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
      launch(c, kernel, grid, dim3(nw * 32), smem, dx, dsh, dsc, partial, dy, x, mean, rstd, sc, T, C, ch.R, g,
             win != nullptr, !overwrite);
    };
    auto by_norm = [&](auto layer, auto rmsk) { rms ? go(rmsk) : go(layer); };
#define FT_NM_BWD_REG(KK)                                                                    \
  case KK:                                                                                   \
    by_norm(norm_modulate_backward_reg_kernel<E, KK, false>, norm_modulate_backward_reg_kernel<E, KK, true>); \
    break;
    switch (K) {
      FT_NM_BWD_REG(1)
      FT_NM_BWD_REG(2)
      FT_NM_BWD_REG(3)
      FT_NM_BWD_REG(4)
      FT_NM_BWD_REG(6)
      default:
        if (packed)
          by_norm(norm_modulate_backward_loop_kernel<E, true, false>,
                  norm_modulate_backward_loop_kernel<E, true, true>);
        else
          by_norm(norm_modulate_backward_loop_kernel<E, false, false>,
                  norm_modulate_backward_loop_kernel<E, false, true>);
    }
#undef FT_NM_BWD_REG
    if (ch.G > 1) {
      launch(c, norm_modulate_colsum_kernel<E>, dim3((unsigned)ceil_div(B * 2 * C, kNmReduceThreads)),
             dim3(kNmReduceThreads), 0, dsh, dsc, partial, ch.G, B, C);
    }
  });
}

}  // namespace ft::cuda
