// LayerNorm: forward saves fp32 mean/rstd; backward is deterministic (per-block partial
// dw/db in fp32, then a fixed-order reduction over blocks) and accumulates dinp, dw, db. The
// backward holds a row in registers where it fits (C up to 32 lanes x 8 packs), else loops.
// Without affine (w, b null: DiT's LayerNorm(elementwise_affine=False)) the forward skips the
// scale and shift, and the backward is one warp a row for dinp alone (no parameter sums).
#include "backend/cuda/cuda_ops.cuh"

namespace ft::cuda {

namespace {
constexpr int kLnWarps = 4;  // warps per block in the backward kernel
// Parameter reduction: each block takes 16 of the 2C partial columns and splits the G partial
// rows into 512 / 16 = 32 slices (H200, C=768, G=264: 96 blocks of 512 threads, ~9 rows per
// thread, where one thread per column summing all G rows serially took 21 us).
constexpr int kLnReduceCols = 16;
constexpr int kLnReduceThreads = 512;
}

// ---- CUDA kernels ---------------------------------------------------------------------------

// One warp per row; each lane owns packs lane, lane+32, ... of the row. !AFFINE: w, b unused.
template <class T, bool AFFINE>
__global__ void layernorm_forward_kernel(T* out, float* mean, float* rstd, const T* inp,
                                         const T* w, const T* b, int64_t N, int64_t C) {
  constexpr int P = Pack<T>::N;
  int lane = threadIdx.x % 32;
  int64_t row = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  if (row >= N) return;
  const T* x = inp + row * C;
  float sum = 0.f;
  for (int64_t c = lane * P; c < C; c += 32 * P) {
    Pack<T> v = load16(x + c);
#pragma unroll
    for (int k = 0; k < P; ++k) sum += v.f(k);
  }
  float m = warp_sum(sum) / C;
  float var = 0.f;
  for (int64_t c = lane * P; c < C; c += 32 * P) {
    Pack<T> v = load16(x + c);
#pragma unroll
    for (int k = 0; k < P; ++k) {
      float d = v.f(k) - m;
      var += d * d;
    }
  }
  float s = rsqrtf(warp_sum(var) / C + 1e-5f);
  T* o = out + row * C;
  for (int64_t c = lane * P; c < C; c += 32 * P) {
    Pack<T> v = load16(x + c), r;
    if constexpr (AFFINE) {
      Pack<T> wv = load16(w + c), bv = load16(b + c);
#pragma unroll
      for (int k = 0; k < P; ++k) r.set(k, (v.f(k) - m) * s * wv.f(k) + bv.f(k));
    } else {
#pragma unroll
      for (int k = 0; k < P; ++k) r.set(k, (v.f(k) - m) * s);
    }
    store16(o + c, r);
  }
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
}

// Block = nw warps; warp w of block g handles rows g*nw+w, +G*nw, ... Each warp keeps its own
// fp32 dw/db rows in shared memory (lanes own disjoint channels: no atomics), and the block
// writes their sum (fixed order) to partial[g][0..C) (dw) and [C..2C) (db).
//
// Shared by both backward kernels: sh = [nw][2][C] floats (per-warp dw, db rows in channel
// order). A lane adds its pack's P channels as float4s: P/4 shared accesses instead of P, and
// no per-channel index arithmetic held in registers.
__device__ __forceinline__ void ln_zero_warp_params(float* dw_sh, int64_t C, int lane) {
  for (int64_t c = lane; c < 2 * C; c += 32) dw_sh[c] = 0.f;
}
// sh[c + k] += a[k], k < P; c a multiple of P (16-byte aligned: C % P == 0 keeps rows aligned)
template <int P>
__device__ __forceinline__ void ln_add_pack(float* sh, const float (&a)[P]) {
#pragma unroll
  for (int q = 0; q < P / 4; ++q) {
    float4* p = reinterpret_cast<float4*>(sh) + q;
    float4 v = *p;
    v.x += a[4 * q];
    v.y += a[4 * q + 1];
    v.z += a[4 * q + 2];
    v.w += a[4 * q + 3];
    *p = v;
  }
}
// partial[block][c] = sum over the block's warps (in warp order) of their dw/db rows
__device__ __forceinline__ void ln_write_block_params(float* partial, const float* sh, int nw,
                                                      int64_t C) {
  float* out = partial + (int64_t)blockIdx.x * 2 * C;
  for (int64_t c = threadIdx.x; c < 2 * C; c += blockDim.x) {
    float acc = 0.f;
    for (int k = 0; k < nw; ++k) acc += sh[(int64_t)k * 2 * C + c];
    out[c] = acc;
  }
}


// Rows of up to 32 * K packs: lane owns packs lane + 32 i (i < K) of every row it sees, so its
// row's inp, dout and dinp packs are loaded ONCE into registers, all issued before the first
// use (one memory round trip per row, not one per loop pass and phase), and reused by the
// second pass; w is staged once per block in shared memory (after the dw/db rows) instead of
// being re-read from global for every row and pass. Same arithmetic and order as the loop
// kernel below. K <= 3 (bf16 C <= 768) is held to 64 registers so that two 512-thread
// blocks fit an SM.
template <class T, int K>
__global__ void __launch_bounds__(512, K <= 3 ? 2 : 1)
    layernorm_backward_reg_kernel(T* dinp, float* partial, const T* dout, const T* inp,
                                  const T* w, const float* mean, const float* rstd, int64_t N,
                                  int64_t C) {
  constexpr int P = Pack<T>::N;
  extern __shared__ float sh[];  // [nw][2][C] floats, then w: C of T
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
  const int64_t CP = C / P;
  float* dw_sh = sh + (int64_t)warp * 2 * C;
  float* db_sh = dw_sh + C;
  T* w_sh = reinterpret_cast<T*>(sh + (int64_t)nw * 2 * C);  // 16-byte aligned: C % P == 0
  for (int64_t j = threadIdx.x; j < CP; j += blockDim.x) store16(w_sh + j * P, load16(w + j * P));
  ln_zero_warp_params(dw_sh, C, lane);
  __syncthreads();
  for (int64_t row = (int64_t)blockIdx.x * nw + warp; row < N; row += (int64_t)gridDim.x * nw) {
    const T* x = inp + row * C;
    const T* dy = dout + row * C;
    T* dx = dinp + row * C;
    Pack<T> xv[K], dv[K], gv[K];
#pragma unroll
    for (int i = 0; i < K; ++i) {
      const int64_t j = lane + 32 * i;
      if (j < CP) {  // inp and dout are read once here: stream them past L2
        xv[i] = load16_cs(x + j * P);
        dv[i] = load16_cs(dy + j * P);
        gv[i] = load16(dx + j * P);
      }
    }
    const float m = mean[row], s = rstd[row];
    float sum_d = 0.f, sum_dx = 0.f;
#pragma unroll
    for (int i = 0; i < K; ++i) {
      const int64_t j = lane + 32 * i;
      if (j < CP) {
        Pack<T> wv = load16(w_sh + j * P);
#pragma unroll
        for (int k = 0; k < P; ++k) {
          float xh = (xv[i].f(k) - m) * s;
          float dn = dv[i].f(k) * wv.f(k);
          sum_d += dn;
          sum_dx += dn * xh;
        }
      }
    }
    sum_d = warp_sum(sum_d) / C;
    sum_dx = warp_sum(sum_dx) / C;
#pragma unroll
    for (int i = 0; i < K; ++i) {
      pack_opaque(xv[i]);
      pack_opaque(dv[i]);
    }
#pragma unroll
    for (int i = 0; i < K; ++i) {
      const int64_t j = lane + 32 * i;
      if (j < CP) {
        Pack<T> wv = load16(w_sh + j * P);
        float dwv[P], dbv[P];
#pragma unroll
        for (int k = 0; k < P; ++k) {
          float xh = (xv[i].f(k) - m) * s;
          float dn = dv[i].f(k) * wv.f(k);
          gv[i].set(k, gv[i].f(k) + (dn - sum_d - xh * sum_dx) * s);
          dwv[k] = dv[i].f(k) * xh;
          dbv[k] = dv[i].f(k);
        }
        store16(dx + j * P, gv[i]);
        ln_add_pack<P>(dw_sh + j * P, dwv);
        ln_add_pack<P>(db_sh + j * P, dbv);
      }
    }
  }
  __syncthreads();
  ln_write_block_params(partial, sh, nw, C);
}

// Any C (rows too wide for the register kernel): each pass loops over the row, re-loading.
template <class T>
__global__ void layernorm_backward_kernel(T* dinp, float* partial, const T* dout, const T* inp,
                                          const T* w, const float* mean, const float* rstd,
                                          int64_t N, int64_t C) {
  constexpr int P = Pack<T>::N;
  extern __shared__ float sh[];  // [nw][2][C]
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  float* dw_sh = sh + (int64_t)warp * 2 * C;
  float* db_sh = dw_sh + C;
  ln_zero_warp_params(dw_sh, C, lane);
  __syncwarp();
  const int nw = blockDim.x / 32;
  for (int64_t row = (int64_t)blockIdx.x * nw + warp; row < N; row += (int64_t)gridDim.x * nw) {
    const T* x = inp + row * C;
    const T* dy = dout + row * C;
    float m = mean[row], s = rstd[row];
    float sum_d = 0.f, sum_dx = 0.f;
    for (int64_t c = lane * P; c < C; c += 32 * P) {
      Pack<T> xv = load16(x + c), dv = load16(dy + c), wv = load16(w + c);
#pragma unroll
      for (int k = 0; k < P; ++k) {
        float xh = (xv.f(k) - m) * s;
        float dn = dv.f(k) * wv.f(k);
        sum_d += dn;
        sum_dx += dn * xh;
      }
    }
    sum_d = warp_sum(sum_d) / C;
    sum_dx = warp_sum(sum_dx) / C;
    T* dx = dinp + row * C;
    for (int64_t c = lane * P; c < C; c += 32 * P) {
      Pack<T> xv = load16(x + c), dv = load16(dy + c), wv = load16(w + c), gv = load16(dx + c);
      float dwv[P], dbv[P];
#pragma unroll
      for (int k = 0; k < P; ++k) {
        float xh = (xv.f(k) - m) * s;
        float dn = dv.f(k) * wv.f(k);
        gv.set(k, gv.f(k) + (dn - sum_d - xh * sum_dx) * s);
        dwv[k] = dv.f(k) * xh;
        dbv[k] = dv.f(k);
      }
      store16(dx + c, gv);
      ln_add_pack<P>(dw_sh + c, dwv);
      ln_add_pack<P>(db_sh + c, dbv);
    }
  }
  __syncthreads();
  ln_write_block_params(partial, sh, nw, C);
}

// No affine: one warp a row, dinp += (d - mean(d) - xhat * mean(d * xhat)) * rstd, the
// affine kernels' arithmetic with w = 1; no parameter sums, no scratch.
template <class T>
__global__ void layernorm_backward_noaffine_kernel(T* dinp, const T* dout, const T* inp,
                                                   const float* mean, const float* rstd, int64_t N,
                                                   int64_t C) {
  constexpr int P = Pack<T>::N;
  const int lane = threadIdx.x % 32;
  const int64_t row = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  if (row >= N) return;
  const T* x = inp + row * C;
  const T* dy = dout + row * C;
  T* dx = dinp + row * C;
  const float m = mean[row], s = rstd[row];
  float sum_d = 0.f, sum_dx = 0.f;
  for (int64_t c = lane * P; c < C; c += 32 * P) {
    Pack<T> xv = load16(x + c), dv = load16(dy + c);
#pragma unroll
    for (int k = 0; k < P; ++k) {
      sum_d += dv.f(k);
      sum_dx += dv.f(k) * ((xv.f(k) - m) * s);
    }
  }
  sum_d = warp_sum(sum_d) / C;
  sum_dx = warp_sum(sum_dx) / C;
  for (int64_t c = lane * P; c < C; c += 32 * P) {
    Pack<T> xv = load16(x + c), dv = load16(dy + c), gv = load16(dx + c);
#pragma unroll
    for (int k = 0; k < P; ++k) {
      const float xh = (xv.f(k) - m) * s;
      gv.set(k, gv.f(k) + (dv.f(k) - sum_d - xh * sum_dx) * s);
    }
    store16(dx + c, gv);
  }
}

// dw[c] += sum_g partial[g][c], db[c] += sum_g partial[g][C+c]. Block b owns columns
// [16b, 16b+16) of the 2C; thread t takes column t % 16 and slice s = t / 16 of the rows
// (g = s, s+32, ...), summed in row order; then the 32 slices are summed in slice order. The
// order is fixed by the launch shape alone, so results are bitwise the same run to run.
template <class T>
__global__ void __launch_bounds__(kLnReduceThreads)
    layernorm_param_reduce_kernel(T* dw, T* db, const float* partial, int G, int64_t C) {
  constexpr int S = kLnReduceThreads / kLnReduceCols;
  __shared__ float sh[S][kLnReduceCols];
  const int cl = threadIdx.x % kLnReduceCols, slice = threadIdx.x / kLnReduceCols;
  const int64_t col = (int64_t)blockIdx.x * kLnReduceCols + cl;
  float acc = 0.f;
  if (col < 2 * C) {
    // unrolled so that several rows' loads are in flight; the adds stay in row order
#pragma unroll 4
    for (int g = slice; g < G; g += S) acc += partial[(int64_t)g * 2 * C + col];
  }
  sh[slice][cl] = acc;
  __syncthreads();
  if (slice == 0 && col < 2 * C) {
    float s = 0.f;
    for (int k = 0; k < S; ++k) s += sh[k][cl];
    T* p = col < C ? dw + col : db + (col - C);
    *p = from_f32<T>(to_f32(*p) + s);
  }
}

// ---- kernel launchers -----------------------------------------------------------------------

void layernorm_forward(const Ctx& c, DType t, void* out, float* mean, float* rstd,
                       const void* inp, const void* w, const void* b, int64_t N, int64_t C) {
  dispatch_float(t, [&](auto tag) {
    using E = decltype(tag);
    FT_CHECK(C % Pack<E>::N == 0, "layernorm: C=", C, " must be a multiple of ", Pack<E>::N);
    const int threads = 256;
    auto kernel = w ? layernorm_forward_kernel<E, true> : layernorm_forward_kernel<E, false>;
    kernel<<<ceil_div(N * 32, threads), threads, 0, c.stream>>>(
        static_cast<E*>(out), mean, rstd, static_cast<const E*>(inp), static_cast<const E*>(w),
        static_cast<const E*>(b), N, C);
    CUDA_CHECK_LAUNCH();
  });
}

// Warps per backward block: 16 (more rows in flight; H200, N=8192 C=768 bf16: 0.050 ms with
// 4) while two blocks' shared memory (the dw/db rows, ~100 KB at C=768, plus the register
// kernel's copy of w) fit an SM, else kLnWarps.
static int layernorm_warps(int64_t C) { return 16 * 8 * C <= 100 * 1024 ? 16 : kLnWarps; }

static int layernorm_grid(int64_t N, int64_t C, int num_sms) {
  return (int)std::max<int64_t>(1, std::min<int64_t>(ceil_div(N, layernorm_warps(C)), 2 * num_sms));
}

size_t layernorm_backward_scratch(int64_t N, int64_t C, int num_sms) {
  return (size_t)layernorm_grid(N, C, num_sms) * 2 * C * sizeof(float);
}

// Packs per lane of the register kernel: the fewest of {1, 2, 3, 4, 6, 8} that hold a row
// of C / P packs over 32 lanes (unused ones are predicated off), 0 where none does (bf16 C >
// 2048, fp32 C > 1024): those rows take the loop kernel.
static int layernorm_packs_per_lane(int64_t C, int P) {
  const int64_t need = ceil_div(C / P, 32);
  for (int k : {1, 2, 3, 4, 6, 8})
    if (need <= k) return k;
  return 0;
}

template <class E, class... A>
static void layernorm_backward_launch(const Ctx& c, int G, int nw, size_t smem, int K,
                                      A... args) {
  void (*kernel)(E*, float*, const E*, const E*, const E*, const float*, const float*, int64_t,
                 int64_t) = layernorm_backward_kernel<E>;
  switch (K) {
    case 1: kernel = layernorm_backward_reg_kernel<E, 1>; break;
    case 2: kernel = layernorm_backward_reg_kernel<E, 2>; break;
    case 3: kernel = layernorm_backward_reg_kernel<E, 3>; break;
    case 4: kernel = layernorm_backward_reg_kernel<E, 4>; break;
    case 6: kernel = layernorm_backward_reg_kernel<E, 6>; break;
    case 8: kernel = layernorm_backward_reg_kernel<E, 8>; break;
    default: break;  // the loop kernel
  }
  if (smem > 48 * 1024)
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)smem));
  kernel<<<G, nw * 32, smem, c.stream>>>(args...);
  CUDA_CHECK_LAUNCH();
}

void layernorm_backward(const Ctx& c, DType t, void* dinp, void* dw, void* db, const void* dout,
                        const void* inp, const void* w, const float* mean, const float* rstd,
                        int64_t N, int64_t C) {
  if (!w) {  // no affine: dinp only
    dispatch_float(t, [&](auto tag) {
      using E = decltype(tag);
      FT_CHECK(C % Pack<E>::N == 0, "layernorm: C=", C, " must be a multiple of ", Pack<E>::N);
      FT_CHECK(aligned16(dinp) && aligned16(dout) && aligned16(inp),
               "layernorm: pointers must be 16-byte aligned");
      const int threads = 256;
      layernorm_backward_noaffine_kernel<E><<<ceil_div(N * 32, threads), threads, 0, c.stream>>>(
          static_cast<E*>(dinp), static_cast<const E*>(dout), static_cast<const E*>(inp), mean,
          rstd, N, C);
      CUDA_CHECK_LAUNCH();
    });
    return;
  }
  int G = layernorm_grid(N, C, c.num_sms);
  const int nw = layernorm_warps(C);
  FT_CHECK(layernorm_backward_scratch(N, C, c.num_sms) <= c.scratch_bytes,
           "layernorm: workspace too small");
  float* partial = static_cast<float*>(c.scratch);
  dispatch_float(t, [&](auto tag) {
    using E = decltype(tag);
    FT_CHECK(C % Pack<E>::N == 0, "layernorm: C=", C, " must be a multiple of ", Pack<E>::N);
    FT_CHECK(aligned16(dinp) && aligned16(dout) && aligned16(inp) && aligned16(w),
             "layernorm: pointers must be 16-byte aligned");
    const int K = layernorm_packs_per_lane(C, Pack<E>::N);
    // the register kernel also stages w (C of E) after the warps' dw/db rows
    const size_t smem = (size_t)nw * 2 * C * sizeof(float) + (K ? C * sizeof(E) : 0);
    FT_CHECK(smem <= c.max_smem_optin, "layernorm: C=", C, " too large for shared memory");
    layernorm_backward_launch<E>(c, G, nw, smem, K, static_cast<E*>(dinp), partial,
                                 static_cast<const E*>(dout), static_cast<const E*>(inp),
                                 static_cast<const E*>(w), mean, rstd, N, C);
    layernorm_param_reduce_kernel<E><<<(unsigned)ceil_div(2 * C, kLnReduceCols),
                                       kLnReduceThreads, 0, c.stream>>>(
        static_cast<E*>(dw), static_cast<E*>(db), partial, G, C);
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace ft::cuda
