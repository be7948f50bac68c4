// LayerNorm: forward saves fp32 mean/rstd; backward is deterministic (per-block partial
// dw/db in fp32, then a fixed-order reduction over blocks) and accumulates dinp, dw, db.
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

// One warp per row; each lane owns packs lane, lane+32, ... of the row.
template <class T>
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
    Pack<T> v = load16(x + c), wv = load16(w + c), bv = load16(b + c), r;
#pragma unroll
    for (int k = 0; k < P; ++k) r.set(k, (v.f(k) - m) * s * wv.f(k) + bv.f(k));
    store16(o + c, r);
  }
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
}

// Block = kLnWarps warps; warp w of block g handles rows g*W+w, +G*W, ... Each warp keeps its
// own fp32 dw/db rows in shared memory (lanes own disjoint channels: no atomics), and the block
// writes their sum (fixed order) to partial[g][0..C) (dw) and [C..2C) (db).
template <class T>
__global__ void layernorm_backward_kernel(T* dinp, float* partial, const T* dout, const T* inp,
                                          const T* w, const float* mean, const float* rstd,
                                          int64_t N, int64_t C) {
  constexpr int P = Pack<T>::N;
  extern __shared__ float sh[];  // [kLnWarps][2][C]
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  float* dw_sh = sh + (int64_t)warp * 2 * C;
  float* db_sh = dw_sh + C;
  for (int64_t c = lane; c < C; c += 32) dw_sh[c] = db_sh[c] = 0.f;
  __syncwarp();
  const int nw = blockDim.x / 32;
  const int64_t CP = C / P;  // shared rows hold channel c + k at k * CP + c / P
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
#pragma unroll
      for (int k = 0; k < P; ++k) {
        float xh = (xv.f(k) - m) * s;
        float dn = dv.f(k) * wv.f(k);
        gv.set(k, gv.f(k) + (dn - sum_d - xh * sum_dx) * s);
        dw_sh[k * CP + c / P] += dv.f(k) * xh;  // lane-consecutive words: no bank conflicts
        db_sh[k * CP + c / P] += dv.f(k);
      }
      store16(dx + c, gv);
    }
  }
  __syncthreads();
  float* out = partial + (int64_t)blockIdx.x * 2 * C;
  for (int64_t c = threadIdx.x; c < 2 * C; c += blockDim.x) {
    float acc = 0.f;
    const int64_t ch = c % C, idx = c - ch + (ch % P) * CP + ch / P;
    for (int k = 0; k < nw; ++k) acc += sh[(int64_t)k * 2 * C + idx];
    out[c] = acc;
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
    layernorm_forward_kernel<E><<<ceil_div(N * 32, threads), threads, 0, c.stream>>>(
        static_cast<E*>(out), mean, rstd, static_cast<const E*>(inp), static_cast<const E*>(w),
        static_cast<const E*>(b), N, C);
    CUDA_CHECK_LAUNCH();
  });
}

// Warps per backward block: 16 (more rows in flight; H200, N=8192 C=768 bf16: 0.050 ms with
// 4) while two blocks' shared memory fit in ~100 KB each, else kLnWarps.
static int layernorm_warps(int64_t C) { return 16 * 8 * C <= 100 * 1024 ? 16 : kLnWarps; }

static int layernorm_grid(int64_t N, int64_t C, int num_sms) {
  return (int)std::max<int64_t>(1, std::min<int64_t>(ceil_div(N, layernorm_warps(C)), 2 * num_sms));
}

size_t layernorm_backward_scratch(int64_t N, int64_t C, int num_sms) {
  return (size_t)layernorm_grid(N, C, num_sms) * 2 * C * sizeof(float);
}

void layernorm_backward(const Ctx& c, DType t, void* dinp, void* dw, void* db, const void* dout,
                        const void* inp, const void* w, const float* mean, const float* rstd,
                        int64_t N, int64_t C) {
  int G = layernorm_grid(N, C, c.num_sms);
  const int nw = layernorm_warps(C);
  FT_CHECK(layernorm_backward_scratch(N, C, c.num_sms) <= c.scratch_bytes,
           "layernorm: workspace too small");
  float* partial = static_cast<float*>(c.scratch);
  size_t smem = (size_t)nw * 2 * C * sizeof(float);
  FT_CHECK(smem <= c.max_smem_optin, "layernorm: C=", C, " too large for shared memory");
  dispatch_float(t, [&](auto tag) {
    using E = decltype(tag);
    FT_CHECK(C % Pack<E>::N == 0, "layernorm: C=", C, " must be a multiple of ", Pack<E>::N);
    if (smem > 48 * 1024)
      CUDA_CHECK(cudaFuncSetAttribute(layernorm_backward_kernel<E>,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    layernorm_backward_kernel<E><<<G, nw * 32, smem, c.stream>>>(
        static_cast<E*>(dinp), partial, static_cast<const E*>(dout), static_cast<const E*>(inp),
        static_cast<const E*>(w), mean, rstd, N, C);
    CUDA_CHECK_LAUNCH();
    layernorm_param_reduce_kernel<E><<<(unsigned)ceil_div(2 * C, kLnReduceCols),
                                       kLnReduceThreads, 0, c.stream>>>(
        static_cast<E*>(dw), static_cast<E*>(db), partial, G, C);
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace ft::cuda
