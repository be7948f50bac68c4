// SiLU (swish) x * sigmoid(x), forward and backward, 16-byte vectorised like gelu.cu.
#include <algorithm>
#include <type_traits>

#include "backend/cuda/attention_tc.cuh"  // cp.async wrappers
#include "backend/cuda/column_partials.cuh"
#include "backend/cuda/cuda_ops.cuh"

namespace ft::cuda {

// ---- CUDA kernels ---------------------------------------------------------------------------

__device__ __forceinline__ float sigmoid_f(float x) { return 1.f / (1.f + __expf(-x)); }
__device__ __forceinline__ float silu_f(float x) { return x * sigmoid_f(x); }
__device__ __forceinline__ float silu_grad_f(float x) {
  const float s = sigmoid_f(x);
  return s * (1.f + x * (1.f - s));
}
// One pack of the bias-summing backward: y = d(inp), s = silu(inp) (kOut: the caller stores
// it; without, s is left alone), acc += the stored y.
template <bool kOut, class T>
__device__ __forceinline__ void silu_bwd_pack(const Pack<T>& x, const Pack<T>& d, Pack<T>& y, Pack<T>& s,
                                              float (&acc)[Pack<T>::N]) {
#pragma unroll
  for (int k = 0; k < Pack<T>::N; ++k) {
    y.set(k, silu_grad_f(x.f(k)) * d.f(k));
    if constexpr (kOut) s.set(k, silu_f(x.f(k)));
    acc[k] += y.f(k);
  }
}

// Thread i handles pack i; packs past the last full one are done element by element.
template <class T>
__global__ void silu_forward_kernel(T* out, const T* inp, int64_t n) {
  wait_for_prior_kernel();
  constexpr int P = Pack<T>::N;
  const int64_t i = pack_begin<T>();
  if (i + P <= n) {
    Pack<T> x = load16(inp + i), y;
#pragma unroll
    for (int k = 0; k < P; ++k) y.set(k, silu_f(x.f(k)));
    store16(out + i, y);
  } else {
    for (int64_t j = i; j < n; ++j) out[j] = from_f32<T>(silu_f(to_f32(inp[j])));
  }
}

// kRecompute: also out = silu(inp), written after the pack (or element) is read, so out may
// alias inp and dinp may alias dout. No __restrict__ for the same reason.
template <class T, bool kRecompute>
__global__ void silu_backward_kernel(T* dinp, const T* inp, const T* dout, T* out, int64_t n) {
  wait_for_prior_kernel();
  constexpr int P = Pack<T>::N;
  const int64_t i = pack_begin<T>();
  if (i + P <= n) {
    Pack<T> x = load16(inp + i), d = load16(dout + i), y, s;
#pragma unroll
    for (int k = 0; k < P; ++k) {
      y.set(k, silu_grad_f(x.f(k)) * d.f(k));
      if constexpr (kRecompute) s.set(k, silu_f(x.f(k)));
    }
    store16(dinp + i, y);
    if constexpr (kRecompute) store16(out + i, s);
  } else {
    for (int64_t j = i; j < n; ++j) {
      const float x = to_f32(inp[j]), d = to_f32(dout[j]);
      dinp[j] = from_f32<T>(silu_grad_f(x) * d);
      if constexpr (kRecompute) out[j] = from_f32<T>(silu_f(x));
    }
  }
}

// silu_backward_kernel<T, kOut> over [N, H] that also sums dinp's columns (the bias gradient of
// the product that wrote inp) into per-row-group partials, which bias_reduce (matmul.cu) then
// sums over the groups in order: deterministic, no atomics. The sums are of the stored
// (rounded) dinp, as a reduction over dinp would read them. kOut false: out (nullptr) is not
// written, for a model that kept silu(inp) from its forward; a compile-time choice, so the
// inner loops carry no branch. Three kernels, the first two over whole rows:
//
// Rows (H a multiple of the pack, H/P <= 256 J): block g of kSiluRowThreads threads takes rows
// [g R, (g+1) R) whole, thread i owning packs i, i + 256, .. (J of them) of every row, U rows
// loaded before any is used. A block streams whole rows (4 KB at CDEIT's H = 2048, bf16), as
// the plain element-wise kernel does, and its column sums stay in the owning thread's
// registers until it writes partial[g][col]. H100, [131072, 2048] bf16: 0.856 ms, the same as
// the column tiles below with as many rows in flight (docs/PERFORMANCE.md, session 13).
constexpr int kSiluRowThreads = 256, kSiluRowBlocksPerSm = 2;  // 112 registers (bf16): two fit an SM

template <class T, int J, int U, bool kOut>
__global__ void __launch_bounds__(kSiluRowThreads)
    silu_backward_bias_rows_kernel(T* dinp, T* out, const T* inp, const T* dout, float* partial, int64_t N,
                                   int64_t H, int64_t rows_per_group) {
  wait_for_prior_kernel();
  constexpr int P = Pack<T>::N;
  const int64_t HP = H / P, start = (int64_t)blockIdx.x * rows_per_group;
  const int64_t end = start + rows_per_group < N ? start + rows_per_group : N;
  float acc[J][P];
#pragma unroll
  for (int j = 0; j < J; ++j)
#pragma unroll
    for (int k = 0; k < P; ++k) acc[j][k] = 0.f;
  for (int64_t r0 = start; r0 < end; r0 += U) {
    Pack<T> x[U][J], d[U][J];
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int j = 0; j < J; ++j) {
        const int64_t pk = threadIdx.x + (int64_t)j * kSiluRowThreads;
        if (r0 + u < end && pk < HP) {
          x[u][j] = load16(inp + (r0 + u) * H + pk * P);
          d[u][j] = load16(dout + (r0 + u) * H + pk * P);
        }
      }
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int j = 0; j < J; ++j) {
        const int64_t pk = threadIdx.x + (int64_t)j * kSiluRowThreads;
        if (r0 + u >= end || pk >= HP) continue;
        Pack<T> y, sv;  // written after every row was read (out / dinp may alias inp / dout)
        silu_bwd_pack<kOut>(x[u][j], d[u][j], y, sv, acc[j]);
        store16(dinp + (r0 + u) * H + pk * P, y);
        if constexpr (kOut) store16(out + (r0 + u) * H + pk * P, sv);
      }
  }
#pragma unroll
  for (int j = 0; j < J; ++j) {
    const int64_t pk = threadIdx.x + (int64_t)j * kSiluRowThreads;
    if (pk >= HP) continue;
    float* dst = partial + (int64_t)blockIdx.x * H + pk * P;
#pragma unroll
    for (int k = 0; k < P; ++k) dst[k] = acc[j][k];
  }
}

// Rows staged through shared memory (the default where H/P <= 256, FT_SILU_BIAS=async): the
// kernel above is bound by the bytes an SM has in flight, which its registers hold (two 16-byte
// packs a row, four rows a thread: 64 KB an SM at 112 registers; with two rows it is 22%
// slower, with rows or column tiles alike the same). Here each thread's
// packs of the next S rows are copied by cp.async into the block's shared memory (S x 8 KB),
// so S rows a block are in flight at a few registers a thread. Each thread reads back only
// the slots it filled itself, so no barrier is needed; a row's results are stored after that
// row was read, and prefetched rows are other rows, so dinp / out may alias dout / inp.
// H100, [131072, 2048] bf16: 0.797 ms (2.69 TB/s) against 0.858.
template <class T, int S, bool kOut>
__global__ void __launch_bounds__(kSiluRowThreads)
    silu_backward_bias_async_kernel(T* dinp, T* out, const T* inp, const T* dout, float* partial, int64_t N,
                                    int64_t H, int64_t rows_per_group) {
  wait_for_prior_kernel();
  constexpr int P = Pack<T>::N;
  extern __shared__ __align__(16) unsigned char silu_smem[];
  Pack<T>* sx = reinterpret_cast<Pack<T>*>(silu_smem);  // [S][kSiluRowThreads]
  Pack<T>* sd = sx + S * kSiluRowThreads;               // [S][kSiluRowThreads]
  const int64_t HP = H / P, start = (int64_t)blockIdx.x * rows_per_group;
  const int64_t end = start + rows_per_group < N ? start + rows_per_group : N;
  const int t = threadIdx.x;
  const bool mine = t < HP;
  float acc[P];
#pragma unroll
  for (int k = 0; k < P; ++k) acc[k] = 0.f;
  auto issue = [&](int64_t r) {  // row r into slot (r - start) % S; past the end: an empty group
    const int slot = (int)((r - start) % S);
    const bool ok = mine && r < end;
    tc::cp16(&sx[slot * kSiluRowThreads + t], ok ? inp + r * H + (int64_t)t * P : inp, ok);
    tc::cp16(&sd[slot * kSiluRowThreads + t], ok ? dout + r * H + (int64_t)t * P : dout, ok);
    tc::cp_commit();
  };
  for (int s = 0; s < S; ++s) issue(start + s);
  for (int64_t r = start; r < end; ++r) {
    tc::cp_wait<S - 1>();  // groups complete in order: row r's is done
    const int slot = (int)((r - start) % S);
    if (mine) {
      const Pack<T> x = sx[slot * kSiluRowThreads + t], d = sd[slot * kSiluRowThreads + t];
      Pack<T> y, sv;
      silu_bwd_pack<kOut>(x, d, y, sv, acc);
      store16(dinp + r * H + (int64_t)t * P, y);
      if constexpr (kOut) store16(out + r * H + (int64_t)t * P, sv);
    }
    // the slot just read is refilled: keep the compiler from moving its shared-memory reads
    // past the copy (cp16's asm names no memory), whose data lands hundreds of cycles later
    asm volatile("" ::: "memory");
    issue(r + S);
  }
  tc::cp_wait<0>();
  if (mine) {
    float* dst = partial + (int64_t)blockIdx.x * H + (int64_t)t * P;
#pragma unroll
    for (int k = 0; k < P; ++k) dst[k] = acc[k];
  }
}
constexpr int kSiluAsyncRows = 8;
constexpr int kSiluAsyncSmem = 2 * kSiluAsyncRows * kSiluRowThreads * 16;  // x and dout, 64 KB

// Tiles (the other widths): block (column block of 32 packs, row group g); thread (tx, ty)
// owns one pack of columns and rows start + ty, + kSiluTileRows, ...; the row slices of a
// block are added in a fixed order into partial[g][col] (store_column_partials), four rows
// loaded at once (0.859 ms at [131072, 2048] on an H100 against 0.917 with two).
constexpr int kSiluTileRows = 16, kSiluTileUnroll = 4;

template <class T, bool kOut>
__global__ void __launch_bounds__(32 * kSiluTileRows)
    silu_backward_bias_kernel(T* dinp, T* out, const T* inp, const T* dout, float* partial, int64_t N, int64_t H,
                              int64_t rows_per_group) {
  constexpr int P = Pack<T>::N;
  __shared__ float sh[kSiluTileRows][32 * P];
  const auto [ty, col0, col, start, end] = column_tile<P>(N, rows_per_group);
  float acc[P];
#pragma unroll
  for (int k = 0; k < P; ++k) acc[k] = 0.f;
  if (col < H) {
    for (int64_t n = start + ty; n < end; n += kSiluTileRows * kSiluTileUnroll) {
      Pack<T> x[kSiluTileUnroll], d[kSiluTileUnroll];
#pragma unroll
      for (int u = 0; u < kSiluTileUnroll; ++u) {
        const int64_t r = n + (int64_t)u * kSiluTileRows;
        if (r < end) {
          x[u] = load16(inp + r * H + col);
          d[u] = load16(dout + r * H + col);
        }
      }
#pragma unroll
      for (int u = 0; u < kSiluTileUnroll; ++u) {
        const int64_t r = n + (int64_t)u * kSiluTileRows;
        if (r >= end) continue;
        Pack<T> y, s;  // written after every row was read (out / dinp may alias inp / dout)
        silu_bwd_pack<kOut>(x[u], d[u], y, s, acc);
        store16(dinp + r * H + col, y);
        if constexpr (kOut) store16(out + r * H + col, s);
      }
    }
  }
  store_column_partials<P, kSiluTileRows>(sh, acc, partial, blockIdx.y, col0, H);
}

// Row groups of the rows layouts: per_sm blocks an SM, each at least U rows. The staged kernel
// runs three (44-47 registers, 64 KB of shared memory a block): on an H200, [131072, 2048] bf16
// took 0.647 ms against 0.759 with two, and twelve rows in flight a block instead of eight,
// two blocks an SM, 0.797 (session 21). So a block's rows, one after another, bound it more
// than the bytes it has in flight.
constexpr int kSiluAsyncBlocksPerSm = 3;
// the most any layout launches: the scratch is sized for it
constexpr int kSiluMaxBlocksPerSm = std::max(kSiluAsyncBlocksPerSm, kSiluRowBlocksPerSm);
int64_t silu_row_groups(int64_t N, int num_sms, int per_sm = kSiluRowBlocksPerSm) {
  return std::clamp<int64_t>(ceil_div(N, 4), 1, int64_t{per_sm} * std::max(1, num_sms));
}

// ---- kernel launchers -----------------------------------------------------------------------

void silu_forward(const Ctx& c, DType t, void* out, const void* inp, int64_t n) {
  FT_CHECK(aligned16(out) && aligned16(inp), "silu: pointers must be 16-byte aligned");
  if (n == 0) return;
  dispatch_float(t, [&](auto tag) {
    using E = decltype(tag);
    launch(c, silu_forward_kernel<E>, dim3(pack_grid<E>(n)), dim3(kPackBlock), 0, static_cast<E*>(out),
           static_cast<const E*>(inp), n);
  });
}

void silu_backward(const Ctx& c, DType t, void* dinp, const void* inp, const void* dout,
                   int64_t n, void* out) {
  FT_CHECK(aligned16(dinp) && aligned16(inp) && aligned16(dout) && (!out || aligned16(out)),
           "silu: pointers must be 16-byte aligned");
  if (n == 0) return;
  dispatch_float(t, [&](auto tag) {
    using E = decltype(tag);
    if (out)
      launch(c, silu_backward_kernel<E, true>, dim3(pack_grid<E>(n)), dim3(kPackBlock), 0, static_cast<E*>(dinp),
             static_cast<const E*>(inp), static_cast<const E*>(dout), static_cast<E*>(out), n);
    else
      launch(c, silu_backward_kernel<E, false>, dim3(pack_grid<E>(n)), dim3(kPackBlock), 0, static_cast<E*>(dinp),
             static_cast<const E*>(inp), static_cast<const E*>(dout), static_cast<E*>(nullptr), n);
  });
}

// silu_backward_recompute_bias at one element type, with (kOut) or without the store of out
template <class E, bool kOut>
void silu_bias_launch(const Ctx& c, DType t, E* dinp, E* out, const E* inp, const E* dout, void* dbias, int64_t N,
                      int64_t H, float beta, SiluBiasLayout layout) {
  constexpr int P = Pack<E>::N;
  const bool packs = H % P == 0 && aligned16(dinp) && (!kOut || aligned16(out)) && aligned16(inp) && aligned16(dout);
  const int64_t HP = H / P, room = (int64_t)(c.scratch_bytes / (H * sizeof(float)));
  float* partial = static_cast<float*>(c.scratch);
  const bool async = layout == SiluBiasLayout::async && HP <= kSiluRowThreads;
  const int64_t groups = silu_row_groups(N, c.num_sms, async ? kSiluAsyncBlocksPerSm : kSiluRowBlocksPerSm);
  // a rows kernel over row groups of whole rows, then the groups' partials summed
  auto rows = [&](auto kernel, int smem) {
    if (smem > 48 * 1024) CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    const RowGroups g = split_rows(N, groups, room);
    launch(c, kernel, dim3((unsigned)g.G), dim3(kSiluRowThreads), (size_t)smem, dinp, out, inp, dout, partial, N, H,
           g.rows);
    bias_reduce(c, t, dbias, partial, g.G, H, beta);
  };
  // the rows layout wherever the scratch holds a group an SM, or every group of a short N (the
  // planner declares silu_bias_scratch: three an SM, the most a layout launches)
  const bool room_for_rows = room >= std::min<int64_t>(c.num_sms, groups);
  if (packs && HP <= 2 * kSiluRowThreads && room_for_rows && layout != SiluBiasLayout::tiles) {
    if (async) rows(silu_backward_bias_async_kernel<E, kSiluAsyncRows, kOut>, kSiluAsyncSmem);
    else if (HP > kSiluRowThreads) rows(silu_backward_bias_rows_kernel<E, 2, 2, kOut>, 0);
    else rows(silu_backward_bias_rows_kernel<E, 1, 4, kOut>, 0);
    return;
  }
  const RowGroups g = packs ? bias_row_groups(c, N, H, P) : RowGroups{};
  if (g.G < 1) {  // not whole packs, or no scratch: the element-wise kernel, then the column sums
    silu_backward(c, t, dinp, inp, dout, N * H, out);  // out nullptr: its kRecompute false
    bias_backward(c, t, dbias, dinp, N, H, beta);
    return;
  }
  dim3 grid((unsigned)ceil_div(H, 32 * P), (unsigned)g.G);
  silu_backward_bias_kernel<E, kOut><<<grid, 32 * kSiluTileRows, 0, c.stream>>>(dinp, out, inp, dout, partial, N,
                                                                                  H, g.rows);
  CUDA_CHECK_LAUNCH();
  bias_reduce(c, t, dbias, partial, g.G, H, beta);
}

// out nullptr: no store of silu(inp) (the kernels' kOut false), and no alignment asked of it
void silu_backward_recompute_bias(const Ctx& c, DType t, void* dinp, void* out, const void* inp, const void* dout,
                                  void* dbias, int64_t N, int64_t H, float beta, SiluBiasLayout layout) {
  if (N * H == 0) return;
  dispatch_float(t, [&](auto tag) {
    using E = decltype(tag);
    auto launch = [&](auto k_out) {
      silu_bias_launch<E, decltype(k_out)::value>(c, t, static_cast<E*>(dinp), static_cast<E*>(out),
                                                  static_cast<const E*>(inp), static_cast<const E*>(dout), dbias, N,
                                                  H, beta, layout);
    };
    if (out) launch(std::true_type{});
    else launch(std::false_type{});
  });
}

size_t silu_bias_scratch(int64_t N, int64_t H, int num_sms) {
  if (N <= 0 || H <= 0) return 0;
  return (size_t)(silu_row_groups(N, num_sms, kSiluMaxBlocksPerSm) * H) * sizeof(float);
}

}  // namespace ft::cuda
