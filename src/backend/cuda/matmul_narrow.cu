// Products with one side of at most kNarrowMax columns: the diffusion models' patch
// embeddings (K = channels x patch^2 = 4 or 16) and output heads (4 or 16 columns). They are
// pure streams over the wide operand (131072 x 512 at CDEIT B=32), but cuBLASLt runs them on
// generic tensor-core tiles that waste the inner dimension: 0.08-0.17 ms each, and a separate
// 0.38 ms epilogue kernel for the residual add, where the stream takes ~0.05 ms (Nsight
// Compute, H100, docs/PERFORMANCE.md session 12). Here each is one pass over the wide side:
//   narrow inner (K <= 16):  out[n][j] = sum_i a[n][i] B(i, j) (+ bias[j]) (+ res[n][j])
//   narrow out (J <= 16):    the same with few outputs a row and a wide inner dimension
//   narrow weight gradient:  G[k][w] = sum_n nr[n][k] wd[n][w] over row groups, then summed
// Off by default (FT_NARROW_PRODUCTS, switches.h): the first version was slower end to end.
// B is the weight read with strides (B(i, j) = b[i * si + j * sj]), so one kernel serves the
// forward (B = w^T) and the input gradient (B = w). Every sum is in a fixed order (no atomics):
// results depend only on the shapes, the device's SM count and the op scratch's size (which
// bounds the weight gradient's row groups), so a run repeats bitwise.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backend/cuda/cuda_ops.cuh"

namespace ft::cuda {

namespace {
constexpr int kNarrowThreads = 256;
constexpr int kNarrowBlocksPerSm = 4;
// weight gradient: a block is 8 warps, one row slice each; about two blocks an SM
constexpr int kWgradSlices = 8, kWgradBlocksPerSm = 2;
constexpr int kWgradMinRows = 64;  // no row group under this (small N: few groups)
// The narrow width rounded up to the kernels' compile-time widths (4, 8 or 16).
constexpr int narrow_width(int64_t n) { return n <= 4 ? 4 : n <= 8 ? 8 : 16; }
// weight gradient: a lane's wide columns (its accumulators are KN x that = 32 floats) and a
// block's column tile
constexpr int wgrad_cols(int KN) { return 32 / KN; }
constexpr int wgrad_tile(int KN) { return 32 * wgrad_cols(KN); }
}  // namespace

// COLS consecutive elements in one access (COLS * sizeof(T) bytes, naturally aligned).
template <class T, int COLS>
struct alignas(sizeof(T) * COLS) Elems {
  T v[COLS];
};

// ---- CUDA kernels ---------------------------------------------------------------------------

// Stages B(r, c) = b[r * s_row + c * s_col] ([rows, cols]) into shared memory as floats in
// pack-interleaved order, Bs[r][k][cp] = B(r, cp * P + k), so lanes reading consecutive packs
// cp of a row read consecutive words; then waits for the whole block.
template <int P, class T>
__device__ __forceinline__ void stage_interleaved(float* Bs, const T* b, int64_t rows, int64_t cols, int64_t s_row,
                                                  int64_t s_col) {
  const int64_t CP = cols / P;
  for (int64_t e = threadIdx.x; e < rows * cols; e += blockDim.x) {
    const int64_t r = e / cols, c = e % cols;
    Bs[(r * P + c % P) * CP + c / P] = to_f32(b[r * s_row + c * s_col]);
  }
  __syncthreads();
}

// Narrow inner dimension, K <= KN. Shared memory holds B staged as Bs[i][k][jp] = B(i, jp * P +
// k). Thread: one pack of P outputs of a row, two rows' items at a time (their a rows, K
// values each, loaded before either is used). Sum order: bias, then i = 0..K-1, then the
// residual.
template <class T, int KN, bool kBias, bool kRes>
__global__ void __launch_bounds__(kNarrowThreads)
    narrow_inner_kernel(T* out, const T* a, const T* b, const T* bias, const T* res, int64_t N, int K, int64_t J,
                        int64_t si, int64_t sj) {
  constexpr int P = Pack<T>::N;
  extern __shared__ float Bs[];
  const int64_t JP = J / P;
  stage_interleaved<P>(Bs, b, K, J, si, sj);
  const int64_t total = N * JP, stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t idx0 = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx0 < total; idx0 += 2 * stride) {
    float av[2][KN];
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      const int64_t idx = idx0 + u * stride;
      const T* an = a + (idx < total ? idx / JP : 0) * K;
#pragma unroll
      for (int i = 0; i < KN; ++i) av[u][i] = i < K ? to_f32(an[i]) : 0.f;
    }
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      const int64_t idx = idx0 + u * stride;
      if (idx >= total) break;
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
#pragma unroll
      for (int i = 0; i < KN; ++i) {
        if (i < K) {
          const float* bi = Bs + (int64_t)i * P * JP + jp;
#pragma unroll
          for (int k = 0; k < P; ++k) acc[k] += av[u][i] * bi[k * JP];
        }
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
}

// Narrow output (J <= JN), wide inner dimension K (whole packs). Eight lanes a row (four rows
// a warp): lane s of a row takes packs s, s + 8, ... of the a row (several loads in flight) and
// keeps J partial sums; three butterfly steps within the eight lanes (fixed order, the same
// result in each) complete them, and lane s writes outputs s and s + 8.
// Bs[j][k][kp] = B(kp * P + k, j): the eight lanes read eight consecutive words.
template <class T, int JN>
__global__ void __launch_bounds__(kNarrowThreads)
    narrow_out_kernel(T* out, const T* a, const T* b, const T* bias, const T* res, int64_t N, int64_t K, int J,
                      int64_t si, int64_t sj) {
  constexpr int P = Pack<T>::N, kLanes = 8, kRowsPerWarp = 32 / kLanes;
  extern __shared__ float Bs[];
  const int64_t KP = K / P;
  stage_interleaved<P>(Bs, b, J, K, sj, si);  // B transposed: rows j, columns i
  const int lane = threadIdx.x % 32, s = lane % kLanes;
  const int64_t warp = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int64_t stride = (int64_t)gridDim.x * (blockDim.x / 32) * kRowsPerWarp;
  // the loop bound is the warp's first row, so all 32 lanes run every step (the shuffles)
  for (int64_t n0 = warp * kRowsPerWarp; n0 < N; n0 += stride) {
    const int64_t n = n0 + lane / kLanes;
    const bool active = n < N;
    float acc[JN];
#pragma unroll
    for (int j = 0; j < JN; ++j) acc[j] = 0.f;
#pragma unroll 4
    for (int64_t kp = s; kp < KP; kp += kLanes) {
      if (!active) break;
      const Pack<T> x = load16_cs(a + n * K + kp * P);  // read once: stream past L2
#pragma unroll
      for (int j = 0; j < JN; ++j) {
        if (j < J) {
          const float* bj = Bs + (int64_t)j * P * KP + kp;
#pragma unroll
          for (int k = 0; k < P; ++k) acc[j] += x.f(k) * bj[k * KP];
        }
      }
    }
#pragma unroll
    for (int j = 0; j < JN; ++j)
#pragma unroll
      for (int o = kLanes / 2; o > 0; o >>= 1) acc[j] += __shfl_xor_sync(0xffffffffu, acc[j], o);
    if (!active) continue;
#pragma unroll
    for (int j0 = 0; j0 < JN; j0 += kLanes) {
      const int j = j0 + s;
      if (j >= J) continue;
      float v = 0.f;  // a select chain keeps acc in registers
#pragma unroll
      for (int jj = 0; jj < JN; ++jj)
        if (jj == j) v = acc[jj];
      if (bias) v += to_f32(bias[j]);
      if (res) v += to_f32(res[n * J + j]);
      out[n * J + j] = from_f32<T>(v);
    }
  }
}

// Weight gradient with a narrow side: partial[g][k][w] = sum over the rows n of group g of
// nr[n][k] * wd[n][w] (nr: [N, Kn], Kn <= KN; wd: [N, Wn]). Warp ty of a block takes rows
// start + ty, + 8, ...; its lane takes COLS consecutive wide columns of the block's tile (one
// access where kVec), so a lane holds KN x COLS = 32 sums. U rows' values are loaded before any
// is used; rows are added in order, and the 8 warps' sums then in warp order.
template <class T, int KN, bool kVec>
__global__ void __launch_bounds__(kNarrowThreads)
    narrow_wgrad_partial_kernel(float* partial, const T* nr, const T* wd, int64_t N, int Kn, int64_t Wn,
                                int64_t rows_per_group) {
  constexpr int COLS = wgrad_cols(KN), CW = wgrad_tile(KN), U = KN <= 8 ? 4 : 2;
  __shared__ float sh[kWgradSlices][KN * CW];
  const int lane = threadIdx.x % 32, ty = threadIdx.x / 32;
  const int64_t w0 = (int64_t)blockIdx.x * CW + lane * COLS;
  const int64_t start = (int64_t)blockIdx.y * rows_per_group;
  const int64_t end = start + rows_per_group < N ? start + rows_per_group : N;
  float acc[KN][COLS];
#pragma unroll
  for (int k = 0; k < KN; ++k)
#pragma unroll
    for (int c = 0; c < COLS; ++c) acc[k][c] = 0.f;
  for (int64_t n = start + ty; n < end; n += kWgradSlices * U) {
    float x[U][COLS], v[U][KN];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t r = n + (int64_t)u * kWgradSlices;
      const bool row = r < end;
      const T* wr = wd + r * Wn + w0;
      if (kVec && row && w0 < Wn) {
        const Elems<T, COLS> e = *reinterpret_cast<const Elems<T, COLS>*>(wr);
#pragma unroll
        for (int c = 0; c < COLS; ++c) x[u][c] = to_f32(e.v[c]);
      } else {
#pragma unroll
        for (int c = 0; c < COLS; ++c) x[u][c] = row && w0 + c < Wn ? to_f32(wr[c]) : 0.f;
      }
      const T* nrow = nr + r * Kn;
#pragma unroll
      for (int k = 0; k < KN; ++k) v[u][k] = row && k < Kn ? to_f32(nrow[k]) : 0.f;
    }
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int k = 0; k < KN; ++k)
#pragma unroll
        for (int c = 0; c < COLS; ++c) acc[k][c] += v[u][k] * x[u][c];
  }
#pragma unroll
  for (int k = 0; k < KN; ++k)
#pragma unroll
    for (int c = 0; c < COLS; ++c) sh[ty][k * CW + lane * COLS + c] = acc[k][c];
  __syncthreads();
  for (int e = threadIdx.x; e < Kn * CW; e += blockDim.x) {
    const int k = e / CW, c = e % CW;
    const int64_t w = (int64_t)blockIdx.x * CW + c;
    if (w >= Wn) continue;
    float t = 0.f;
#pragma unroll
    for (int y = 0; y < kWgradSlices; ++y) t += sh[y][e];
    partial[((int64_t)blockIdx.y * Kn + k) * Wn + w] = t;
  }
}

// dw = beta * dw + sum_g partial[g] (groups in order; eight loads in flight). narrow_is_out:
// dw[k][w] ([OC = Kn, C = Wn]); else dw[w][k] ([OC = Wn, C = Kn]). beta = 0 never reads dw (it
// may hold NaN).
template <class T>
__global__ void narrow_wgrad_reduce_kernel(T* dw, const float* partial, int G, int Kn, int64_t Wn,
                                           bool narrow_is_out, float beta) {
  const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= Kn * Wn) return;
  float s = 0.f;
#pragma unroll 8
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

// Calls f(std::integral_constant<int, KN>) for the compile-time width that holds n (<= 16).
template <class F>
void with_narrow_width(int64_t n, F&& f) {
  switch (narrow_width(n)) {
    case 4: f(std::integral_constant<int, 4>{}); break;
    case 8: f(std::integral_constant<int, 8>{}); break;
    default: f(std::integral_constant<int, 16>{}); break;
  }
}

// Row groups of the weight gradient: about kWgradBlocksPerSm blocks an SM over the column
// tiles, none under kWgradMinRows rows (the caller bounds them by the scratch).
int wgrad_groups(int64_t N, int64_t Kn, int64_t Wn, int num_sms) {
  const int64_t tiles = ceil_div(Wn, wgrad_tile(narrow_width(Kn)));
  const int64_t by_sms = std::max<int64_t>(1, kWgradBlocksPerSm * num_sms / tiles);
  return (int)std::clamp<int64_t>(ceil_div(N, kWgradMinRows), 1, by_sms);
}

}  // namespace

bool narrow_product(const Ctx& c, const NarrowKinds& kinds, DType t, void* out, const void* a, const void* b,
                    int64_t si, int64_t sj, const void* bias, const void* res, int64_t N, int64_t K, int64_t J) {
  if (!(kinds.inner && K <= kNarrowMax) && !(kinds.out && J <= kNarrowMax)) return false;
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
    if (kinds.inner && K <= kNarrowMax && J % P == 0 && aligned16(out) && (!bias || aligned16(bias)) && (!res || aligned16(res))) {
      with_narrow_width(K, [&](auto kn) {
        constexpr int KN = decltype(kn)::value;
        auto go = [&](auto kernel) {
          if (!smem_for(c, kernel, smem)) return;
          kernel<<<narrow_grid(c, N * (J / P)), kNarrowThreads, smem, c.stream>>>(o, av, bv, bi, rv, N, (int)K, J,
                                                                                  si, sj);
          CUDA_CHECK_LAUNCH();
          ran = true;
        };
        if (bias && res) go(narrow_inner_kernel<E, KN, true, true>);
        else if (bias) go(narrow_inner_kernel<E, KN, true, false>);
        else if (res) go(narrow_inner_kernel<E, KN, false, true>);
        else go(narrow_inner_kernel<E, KN, false, false>);
      });
    } else if (kinds.out && J <= kNarrowMax && K % P == 0 && aligned16(a)) {
      with_narrow_width(J, [&](auto jn) {
        constexpr int JN = decltype(jn)::value;
        if (!smem_for(c, narrow_out_kernel<E, JN>, smem)) return;
        // eight lanes a row
        narrow_out_kernel<E, JN><<<narrow_grid(c, N * 8), kNarrowThreads, smem, c.stream>>>(o, av, bv, bi, rv, N, K,
                                                                                          (int)J, si, sj);
        CUDA_CHECK_LAUNCH();
        ran = true;
      });
    }
  });
  return ran;
}

size_t narrow_wgrad_scratch(int64_t C, int64_t OC, int num_sms) {
  const int64_t Kn = std::min(C, OC), Wn = std::max(C, OC);
  if (Kn > kNarrowMax || Kn < 1) return 0;
  return (size_t)wgrad_groups(int64_t{1} << 40, Kn, Wn, num_sms) * Kn * Wn * sizeof(float);
}

bool narrow_weight_grad(const Ctx& c, DType t, void* dw, const void* dout, const void* inp, int64_t N, int64_t C,
                        int64_t OC, float beta) {
  const bool narrow_is_out = OC <= kNarrowMax && OC <= C;
  const int64_t Kn = narrow_is_out ? OC : C, Wn = narrow_is_out ? C : OC;
  if (Kn > kNarrowMax || Kn < 1 || N == 0) return false;
  const RowGroups g = split_rows(N, wgrad_groups(N, Kn, Wn, c.num_sms),
                                 (int64_t)(c.scratch_bytes / ((size_t)Kn * Wn * sizeof(float))));
  if (g.G < 1) return false;
  float* partial = static_cast<float*>(c.scratch);
  dispatch_float(t, [&](auto tag) {
    using E = decltype(tag);
    const E* nr = static_cast<const E*>(narrow_is_out ? dout : inp);
    const E* wd = static_cast<const E*>(narrow_is_out ? inp : dout);
    with_narrow_width(Kn, [&](auto kn) {
      constexpr int KN = decltype(kn)::value, COLS = wgrad_cols(KN);
      const dim3 grid((unsigned)ceil_div(Wn, wgrad_tile(KN)), (unsigned)g.G);
      // one access a lane's columns where every row's run is aligned to it
      if (Wn % COLS == 0 && reinterpret_cast<uintptr_t>(wd) % (sizeof(E) * COLS) == 0)
        narrow_wgrad_partial_kernel<E, KN, true>
            <<<grid, kNarrowThreads, 0, c.stream>>>(partial, nr, wd, N, (int)Kn, Wn, g.rows);
      else
        narrow_wgrad_partial_kernel<E, KN, false>
            <<<grid, kNarrowThreads, 0, c.stream>>>(partial, nr, wd, N, (int)Kn, Wn, g.rows);
      CUDA_CHECK_LAUNCH();
    });
    narrow_wgrad_reduce_kernel<E><<<(unsigned)ceil_div(Kn * Wn, 256), 256, 0, c.stream>>>(
        static_cast<E*>(dw), partial, g.G, (int)Kn, Wn, narrow_is_out, beta);
    CUDA_CHECK_LAUNCH();
  });
  return true;
}

}  // namespace ft::cuda
