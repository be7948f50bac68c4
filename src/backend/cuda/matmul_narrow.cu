// Products with one side of at most kNarrowMax columns: the diffusion models' patch
// embeddings (K = channels x patch^2 = 4 or 16) and output heads (4 or 16 columns). They are
// pure streams over the wide operand (131072 x 512 at CDEIT B=32), but cuBLASLt runs them on
// generic tensor-core tiles that waste the inner dimension: 0.08-0.17 ms each, and a separate
// 0.38 ms epilogue kernel for the residual add, where the stream takes ~0.05 ms (Nsight
// Compute, H100, docs/PERFORMANCE.md session 12). Here each is one pass over the wide side:
//   narrow inner (K <= 16):  out[n][j] = sum_i a[n][i] B(i, j) (+ bias[j]) (+ res[n][j])
//   narrow out (J <= 16):    the same with few outputs a row and a wide inner dimension
//   narrow weight gradient:  G[k][w] = sum_n nr[n][k] wd[n][w] over row groups, then summed
// B is the weight read with strides (B(i, j) = b[i * si + j * sj]), so one kernel serves the
// forward (B = w^T) and the input gradient (B = w). Every sum is in a fixed order (no atomics):
// results depend only on the shapes and the device's SM count.
#include <algorithm>

#include "backend/cuda/cuda_ops.cuh"

namespace ft::cuda {

namespace {
constexpr int kNarrowThreads = 256;
constexpr int kNarrowBlocksPerSm = 4;
// weight gradient: a block is 32 column pairs (64 wide columns) x 8 row slices
constexpr int kWgradCols = 64, kWgradSlices = 8, kWgradUnroll = 4;
constexpr int kWgradMinRows = 64;  // no row group under this (small N: few groups)
}  // namespace

// ---- CUDA kernels ---------------------------------------------------------------------------

// Narrow inner dimension. Shared memory holds B as floats in pack-interleaved order,
// Bs[i][k][jp] = B(i, jp * P + k), so a warp's lanes (consecutive packs jp) read consecutive
// words. Thread: one pack of P outputs of one row; the a row (K values) is the same for the
// lanes of a row (a broadcast). Sum order: bias, then i = 0..K-1, then the residual.
template <class T, bool kBias, bool kRes>
__global__ void __launch_bounds__(kNarrowThreads)
    narrow_inner_kernel(T* out, const T* a, const T* b, const T* bias, const T* res, int64_t N, int K, int64_t J,
                        int64_t si, int64_t sj) {
  constexpr int P = Pack<T>::N;
  extern __shared__ float Bs[];
  const int64_t JP = J / P;
  for (int64_t e = threadIdx.x; e < K * J; e += blockDim.x) {
    const int64_t i = e / J, j = e % J;
    Bs[(i * P + j % P) * JP + j / P] = to_f32(b[i * si + j * sj]);
  }
  __syncthreads();
  const int64_t total = N * JP;
  for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
       idx += (int64_t)gridDim.x * blockDim.x) {
    const int64_t n = idx / JP, jp = idx % JP;
    float acc[P];
    if constexpr (kBias) {
      const Pack<T> bv = load16(bias + jp * P);
#pragma unroll
      for (int k = 0; k < P; ++k) acc[k] = bv.f(k);
    } else {
#pragma unroll
      for (int k = 0; k < P; ++k) acc[k] = 0.f;
    }
    const T* an = a + n * K;
    for (int i = 0; i < K; ++i) {
      const float av = to_f32(an[i]);
      const float* bi = Bs + (int64_t)i * P * JP + jp;
#pragma unroll
      for (int k = 0; k < P; ++k) acc[k] += av * bi[k * JP];
    }
    Pack<T> o;
    if constexpr (kRes) {
      const Pack<T> r = load16(res + n * J + jp * P);
#pragma unroll
      for (int k = 0; k < P; ++k) o.set(k, acc[k] + r.f(k));
    } else {
#pragma unroll
      for (int k = 0; k < P; ++k) o.set(k, acc[k]);
    }
    store16(out + n * J + jp * P, o);
  }
}

// Narrow output (J <= kNarrowMax), wide inner dimension K (whole packs). A warp a row: lane l
// takes packs l, l + 32, ... of the a row and keeps J partial sums; a butterfly over the lanes
// (fixed order, the same result in every lane) completes them, and lane j writes output j.
// Bs[j][k][kp] = B(kp * P + k, j): consecutive lanes read consecutive words.
template <class T>
__global__ void __launch_bounds__(kNarrowThreads)
    narrow_out_kernel(T* out, const T* a, const T* b, const T* bias, const T* res, int64_t N, int64_t K, int J,
                      int64_t si, int64_t sj) {
  constexpr int P = Pack<T>::N;
  extern __shared__ float Bs[];
  const int64_t KP = K / P;
  for (int64_t e = threadIdx.x; e < K * J; e += blockDim.x) {
    const int64_t j = e / K, i = e % K;
    Bs[(j * P + i % P) * KP + i / P] = to_f32(b[i * si + j * sj]);
  }
  __syncthreads();
  const int lane = threadIdx.x % 32;
  const int64_t warps = (int64_t)gridDim.x * (blockDim.x / 32);
  for (int64_t n = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; n < N; n += warps) {
    float acc[kNarrowMax];
#pragma unroll
    for (int j = 0; j < kNarrowMax; ++j) acc[j] = 0.f;
    for (int64_t kp = lane; kp < KP; kp += 32) {
      const Pack<T> x = load16_cs(a + n * K + kp * P);  // read once: stream past L2
#pragma unroll
      for (int j = 0; j < kNarrowMax; ++j) {
        if (j < J) {
          const float* bj = Bs + (int64_t)j * P * KP + kp;
#pragma unroll
          for (int k = 0; k < P; ++k) acc[j] += x.f(k) * bj[k * KP];
        }
      }
    }
#pragma unroll
    for (int j = 0; j < kNarrowMax; ++j)
      if (j < J) acc[j] = warp_sum(acc[j]);
    float mine = 0.f;  // lane j's output: a select chain keeps acc in registers
#pragma unroll
    for (int j = 0; j < kNarrowMax; ++j)
      if (j == lane) mine = acc[j];
    if (lane < J) {
      if (bias) mine += to_f32(bias[lane]);
      if (res) mine += to_f32(res[n * J + lane]);
      out[n * J + lane] = from_f32<T>(mine);
    }
  }
}

// Weight gradient with a narrow side: partial[g][k][w] = sum over the rows n of group g of
// nr[n][k] * wd[n][w] (nr: [N, Kn], Kn <= kNarrowMax; wd: [N, Wn]). Thread (tx, ty): wide
// columns w0 = 64 bx + 2 tx and w0 + 1, rows start + ty, + 8, ...; the 8 row slices are then
// added in slice order.
template <class T>
__global__ void __launch_bounds__(kNarrowThreads)
    narrow_wgrad_partial_kernel(float* partial, const T* nr, const T* wd, int64_t N, int Kn, int64_t Wn,
                                int64_t rows_per_group) {
  __shared__ float sh[kWgradSlices][kNarrowMax][kWgradCols];
  const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
  const int64_t w0 = (int64_t)blockIdx.x * kWgradCols + 2 * tx;
  const int64_t start = (int64_t)blockIdx.y * rows_per_group;
  const int64_t end = start + rows_per_group < N ? start + rows_per_group : N;
  const bool c0 = w0 < Wn, c1 = w0 + 1 < Wn;
  float acc[kNarrowMax][2];
#pragma unroll
  for (int k = 0; k < kNarrowMax; ++k) acc[k][0] = acc[k][1] = 0.f;
  // kWgradUnroll rows' wide values are loaded before any is used, so that many loads are in
  // flight (the narrow rows are a few bytes each, mostly L1 hits); rows are added in order
  for (int64_t n = start + ty; n < end; n += kWgradSlices * kWgradUnroll) {
    float x[kWgradUnroll][2];
#pragma unroll
    for (int u = 0; u < kWgradUnroll; ++u) {
      const int64_t r = n + (int64_t)u * kWgradSlices;
      const T* wr = wd + r * Wn;
      x[u][0] = c0 && r < end ? to_f32(wr[w0]) : 0.f;
      x[u][1] = c1 && r < end ? to_f32(wr[w0 + 1]) : 0.f;
    }
#pragma unroll
    for (int u = 0; u < kWgradUnroll; ++u) {
      const int64_t r = n + (int64_t)u * kWgradSlices;
      if (r >= end) break;
      const T* nrow = nr + r * Kn;
#pragma unroll
      for (int k = 0; k < kNarrowMax; ++k) {
        if (k < Kn) {
          const float v = to_f32(nrow[k]);
          acc[k][0] += v * x[u][0];
          acc[k][1] += v * x[u][1];
        }
      }
    }
  }
#pragma unroll
  for (int k = 0; k < kNarrowMax; ++k) {
    if (k < Kn) {
      sh[ty][k][2 * tx] = acc[k][0];
      sh[ty][k][2 * tx + 1] = acc[k][1];
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < Kn * kWgradCols; e += blockDim.x) {
    const int k = e / kWgradCols, c = e % kWgradCols;
    const int64_t w = (int64_t)blockIdx.x * kWgradCols + c;
    if (w >= Wn) continue;
    float s = 0.f;
#pragma unroll
    for (int y = 0; y < kWgradSlices; ++y) s += sh[y][k][c];
    partial[((int64_t)blockIdx.y * Kn + k) * Wn + w] = s;
  }
}

// dw = beta * dw + sum_g partial[g] (groups in order). narrow_is_out: dw[k][w] ([OC = Kn, C =
// Wn]); else dw[w][k] ([OC = Wn, C = Kn]). beta = 0 never reads dw (it may hold NaN).
template <class T>
__global__ void narrow_wgrad_reduce_kernel(T* dw, const float* partial, int G, int Kn, int64_t Wn,
                                           bool narrow_is_out, float beta) {
  const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= Kn * Wn) return;
  float s = 0.f;
  for (int g = 0; g < G; ++g) s += partial[(int64_t)g * Kn * Wn + e];
  const int64_t k = e / Wn, w = e % Wn;
  const int64_t o = narrow_is_out ? k * Wn + w : w * Kn + k;
  dw[o] = from_f32<T>(beta != 0.f ? beta * to_f32(dw[o]) + s : s);
}

// ---- launchers --------------------------------------------------------------------------------

namespace {

// Dynamic shared memory of `bytes` for kernel, within the device's opt-in limit; false if over.
template <class K>
bool smem_for(const Ctx& c, K kernel, size_t bytes) {
  if (bytes > c.max_smem_optin) return false;
  if (bytes > 48 * 1024)
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
  return true;
}

unsigned narrow_grid(const Ctx& c, int64_t work_items) {
  return (unsigned)std::clamp<int64_t>(ceil_div(work_items, kNarrowThreads), 1, (int64_t)kNarrowBlocksPerSm * c.num_sms);
}

// Row groups of the weight gradient: about kNarrowBlocksPerSm blocks an SM over the column
// tiles, none under kWgradMinRows rows, within the scratch (`room` groups).
int wgrad_groups(int64_t N, int64_t Wn, int num_sms) {
  const int64_t tiles = ceil_div(Wn, kWgradCols);
  const int64_t by_sms = std::max<int64_t>(1, kNarrowBlocksPerSm * num_sms / tiles);
  return (int)std::clamp<int64_t>(ceil_div(N, kWgradMinRows), 1, by_sms);
}

}  // namespace

bool narrow_product(const Ctx& c, DType t, void* out, const void* a, const void* b, int64_t si, int64_t sj,
                    const void* bias, const void* res, int64_t N, int64_t K, int64_t J) {
  if (N == 0) return true;
  bool ran = false;
  dispatch_float(t, [&](auto tag) {
    using E = decltype(tag);
    constexpr int P = Pack<E>::N;
    const size_t smem = (size_t)K * J * sizeof(float);
    auto* o = static_cast<E*>(out);
    auto* av = static_cast<const E*>(a);
    auto* bv = static_cast<const E*>(b);
    auto* bi = static_cast<const E*>(bias);
    auto* rv = static_cast<const E*>(res);
    if (K <= kNarrowMax && J % P == 0 && aligned16(out) && (!bias || aligned16(bias)) && (!res || aligned16(res))) {
      auto go = [&](auto kernel) {
        if (!smem_for(c, kernel, smem)) return;
        kernel<<<narrow_grid(c, N * (J / P)), kNarrowThreads, smem, c.stream>>>(o, av, bv, bi, rv, N, (int)K, J, si,
                                                                                sj);
        CUDA_CHECK_LAUNCH();
        ran = true;
      };
      if (bias && res) go(narrow_inner_kernel<E, true, true>);
      else if (bias) go(narrow_inner_kernel<E, true, false>);
      else if (res) go(narrow_inner_kernel<E, false, true>);
      else go(narrow_inner_kernel<E, false, false>);
    } else if (J <= kNarrowMax && K % P == 0 && aligned16(a)) {
      if (!smem_for(c, narrow_out_kernel<E>, smem)) return;
      narrow_out_kernel<E><<<narrow_grid(c, N * 32), kNarrowThreads, smem, c.stream>>>(o, av, bv, bi, rv, N, K,
                                                                                       (int)J, si, sj);
      CUDA_CHECK_LAUNCH();
      ran = true;
    }
  });
  return ran;
}

size_t narrow_wgrad_scratch(int64_t C, int64_t OC, int num_sms) {
  const int64_t Kn = std::min(C, OC), Wn = std::max(C, OC);
  if (Kn > kNarrowMax || Kn < 1) return 0;
  return (size_t)wgrad_groups(int64_t{1} << 40, Wn, num_sms) * Kn * Wn * sizeof(float);
}

bool narrow_weight_grad(const Ctx& c, DType t, void* dw, const void* dout, const void* inp, int64_t N, int64_t C,
                        int64_t OC, float beta) {
  const bool narrow_is_out = OC <= kNarrowMax && OC <= C;
  const int64_t Kn = narrow_is_out ? OC : C, Wn = narrow_is_out ? C : OC;
  if (Kn > kNarrowMax || N == 0) return false;
  const RowGroups g =
      split_rows(N, wgrad_groups(N, Wn, c.num_sms), (int64_t)(c.scratch_bytes / ((size_t)Kn * Wn * sizeof(float))));
  if (g.G < 1) return false;
  float* partial = static_cast<float*>(c.scratch);
  dispatch_float(t, [&](auto tag) {
    using E = decltype(tag);
    const E* nr = static_cast<const E*>(narrow_is_out ? dout : inp);
    const E* wd = static_cast<const E*>(narrow_is_out ? inp : dout);
    narrow_wgrad_partial_kernel<E><<<dim3((unsigned)ceil_div(Wn, kWgradCols), (unsigned)g.G), kNarrowThreads, 0,
                                     c.stream>>>(partial, nr, wd, N, (int)Kn, Wn, g.rows);
    CUDA_CHECK_LAUNCH();
    narrow_wgrad_reduce_kernel<E><<<(unsigned)ceil_div(Kn * Wn, 256), 256, 0, c.stream>>>(
        static_cast<E*>(dw), partial, g.G, (int)Kn, Wn, narrow_is_out, beta);
    CUDA_CHECK_LAUNCH();
  });
  return true;
}

}  // namespace ft::cuda
