// The patch embedding as one pass (Backend::patch_embed_forward/backward; CPU reference in
// backend/cpu/patch_embed.*). CDEIT's input layer is a product with K = 4 + 4 inputs a row
// (2x2 patches of the noisy image and of the condition map) into 512 columns, plus its bias
// and the position table. cuBLASLt runs such a narrow product on a generic tile and the
// residual add as a second kernel over the output (0.17 + 0.38 ms at batch 32, session 12's
// profile), and the table is a third pass. Here each thread keeps one 16-byte pack of output
// columns, the block's column tile of weights sits in shared memory, and out is written once.
// On an H100 it ran 0.185-0.189 ms at CDEIT's batch-32 shape (0.74 TB/s: not bound by that
// write, which alone would take about 0.05 ms; docs/PERFORMANCE.md, session 14): each row's
// inputs were loaded one after another inside the loop over them, so a thread waited for
// memory once an input. Up to kNarrowK inputs (CDEIT's 4 + 4) now take a second kernel that
// keeps the weights in registers and has the block stage many rows' inputs in shared memory.
//
// The backward reads dout once: a block of 32 x kRows threads takes a column tile and a group
// of rows; each thread sums, for its pack of columns, dout times each of up to kChunk inputs and
// dout itself (the bias), then the kRows row slices are added through shared memory into
// per-group partials (column_partials.cuh) and a second kernel adds the groups in order. So the
// sums depend only on the launch shape (deterministic). More than kChunk inputs take one such
// pass per chunk of kChunk. The inputs of kStageRows rows at a time are first copied to shared
// memory by the whole block (coalesced), so a thread's loads are its dout packs only, kUnroll
// rows of them in flight: with each thread loading its rows' inputs itself as well, it took
// 0.197 ms at CDEIT's batch-32 shape on an H200 (session 26 trace), four times its read.
#include "backend/cuda/column_partials.cuh"
#include "backend/cuda/cuda_ops.cuh"

namespace ft::cuda {

namespace {

constexpr int kRows = 8;                                  // row slices a block (32 x kRows threads)
constexpr int kMaxK = 32;  // inputs a forward launch keeps in shared memory (more: one launch per chunk)
constexpr int kChunk = 8;                                 // inputs summed by one backward pass
constexpr int kUnroll = 4;                                // dout rows a thread loads before summing
constexpr int kStageRows = kRows * kUnroll * 8;           // rows whose inputs a block stages at once
constexpr int kNarrowK = 8;        // at most this many inputs: the forward's register kernel
constexpr int kNarrowUnroll = 2;   // table rows a thread of that kernel loads before summing

// The input value k of row n of [x | c].
template <class E>
__device__ __forceinline__ float input_at(const E* x, const E* c, int64_t n, int k, int Kx, int Kc) {
  return k < Kx ? to_f32(x[n * Kx + k]) : to_f32(c[n * Kc + (k - Kx)]);
}

// in_s[r][k] = input k0 + k of row s0 + r of [x | c], for r < rows and k < kn; 0 elsewhere in
// the [kStageRows][KS] slab (those rows and inputs then add nothing). The whole block copies it,
// coalesced; the caller synchronises before and after.
template <int KS, class E>
__device__ __forceinline__ void stage_inputs(float (&in_s)[kStageRows][KS], const E* x, const E* c, int64_t s0,
                                             int rows, int k0, int kn, int Kx, int Kc) {
  for (int i = threadIdx.x; i < kStageRows * KS; i += blockDim.x) {
    const int r = i / KS, k = i % KS;
    in_s[r][k] = r < rows && k < kn ? input_at(x, c, s0 + r, k0 + k, Kx, Kc) : 0.f;
  }
}

template <class E, int P>
__device__ __forceinline__ void load_cols(float (&v)[P], const E* p, int64_t col, int64_t O) {
  if constexpr (P > 1) {
    const Pack<E> q = load16(p);
#pragma unroll
    for (int i = 0; i < P; ++i) v[i] = q.f(i);
  } else {
    v[0] = col < O ? to_f32(p[0]) : 0.f;
  }
}

}  // namespace

// ---- CUDA kernels ---------------------------------------------------------------------------

// grid (column tiles of 32*P, row groups); rows n = blockIdx.y * kRows + ty, stride gridDim.y * kRows.
// (Four rows in flight a thread, their inputs loaded before any product, measured slower on an
// H100: 0.238 against 0.189 ms at CDEIT's batch-32 shape, at 115 registers against 48.)
// One launch takes inputs [k0, k0 + kn) of [x | c] (kn <= kMaxK, their weights in shared
// memory); accumulate: out += that part (later chunks of more than kMaxK inputs), else
// out = bias + table + that part.
template <class E, int P>
__global__ void __launch_bounds__(32 * kRows) patch_embed_forward_kernel(E* out, const E* x, const E* wx, const E* c,
                                                                          const E* wc, const E* bias, const E* table,
                                                                          int64_t N, int64_t O, int Kx, int Kc,
                                                                          int64_t T, int k0, int kn, bool accumulate) {
  __shared__ __align__(16) float w_s[kMaxK][32 * P];
  __shared__ __align__(16) float b_s[32 * P];
  const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
  const int64_t col0 = (int64_t)blockIdx.x * 32 * P;
  for (int i = threadIdx.x; i < kn * 32 * P; i += blockDim.x) {
    const int k = k0 + i / (32 * P), j = i % (32 * P);
    const int64_t o = col0 + j;
    w_s[k - k0][j] = o >= O ? 0.f : k < Kx ? to_f32(wx[o * Kx + k]) : to_f32(wc[o * Kc + (k - Kx)]);
  }
  for (int j = threadIdx.x; j < 32 * P; j += blockDim.x) b_s[j] = bias && col0 + j < O ? to_f32(bias[col0 + j]) : 0.f;
  __syncthreads();
  const int64_t col = col0 + tx * P;
  if (col >= O) return;
  for (int64_t n = (int64_t)blockIdx.y * kRows + ty; n < N; n += (int64_t)gridDim.y * kRows) {
    float acc[P];
    if (accumulate) {
      load_cols<E, P>(acc, out + n * O + col, col, O);
    } else {
#pragma unroll
      for (int p = 0; p < P; ++p) acc[p] = b_s[tx * P + p];
    }
    if (table) {
      float t[P];
      load_cols<E, P>(t, table + (n % T) * O + col, col, O);
#pragma unroll
      for (int p = 0; p < P; ++p) acc[p] += t[p];
    }
    for (int k = 0; k < kn; ++k) {
      const float v = input_at(x, c, n, k0 + k, Kx, Kc);
#pragma unroll
      for (int p = 0; p < P; ++p) acc[p] += v * w_s[k][tx * P + p];
    }
    if constexpr (P > 1) {
      Pack<E> q;
#pragma unroll
      for (int p = 0; p < P; ++p) q.set(p, acc[p]);
      store16(out + n * O + col, q);
    } else {
      out[n * O + col] = from_f32<E>(acc[0]);
    }
  }
}

// The forward for K = Kx + Kc <= kNarrowK inputs and whole 16-byte packs of columns, in one
// launch: block (x, y) takes column tile x (32 packs of P) and the rows of group y (as the
// backward's groups: column_tile); thread (tx, ty) keeps its pack's weights and bias in
// registers. The inputs of kStageRows rows at a time are staged in shared memory by the whole
// block (coalesced), so a thread's only loads are its table packs (L2-resident), kNarrowUnroll
// rows of them before any sum. out = bias + table + sum_k in[k] * w[k]: the generic kernel's order, so the same bits.
template <class E>
__global__ void __launch_bounds__(32 * kRows, 2)
    patch_embed_narrow_forward_kernel(E* out, const E* x, const E* wx, const E* c, const E* wc, const E* bias,
                                      const E* table, int64_t N, int64_t O, int Kx, int Kc, int64_t T,
                                      int64_t rows_per_group) {
  wait_for_prior_kernel();
  constexpr int P = Pack<E>::N;
  __shared__ __align__(16) float in_s[kStageRows][kNarrowK];  // inputs past the rows or K: 0
  const ColumnTile t = column_tile<P>(N, rows_per_group);
  const bool live = t.col < O;  // O is whole packs: a pack is all in or all out
  const int K = Kx + Kc;
  float w[kNarrowK][P], b[P];
#pragma unroll
  for (int k = 0; k < kNarrowK; ++k)
#pragma unroll
    for (int p = 0; p < P; ++p)
      w[k][p] = !live ? 0.f
                : k < Kx ? to_f32(wx[(t.col + p) * Kx + k])
                : k < K  ? to_f32(wc[(t.col + p) * Kc + (k - Kx)])
                         : 0.f;
#pragma unroll
  for (int p = 0; p < P; ++p) b[p] = bias && live ? to_f32(bias[t.col + p]) : 0.f;
  for (int64_t s0 = t.start; s0 < t.end; s0 += kStageRows) {
    const int rows = (int)(t.end - s0 < kStageRows ? t.end - s0 : kStageRows);
    __syncthreads();  // the last chunk's inputs are no longer read
    stage_inputs(in_s, x, c, s0, rows, 0, K, Kx, Kc);
    __syncthreads();
    if (!live) continue;
    for (int r0 = t.ty; r0 < rows; r0 += kRows * kNarrowUnroll) {
      Pack<E> tb[kNarrowUnroll];
#pragma unroll
      for (int u = 0; u < kNarrowUnroll; ++u) {
        const int r = r0 + u * kRows;
        if (table && r < rows) tb[u] = load16(table + ((s0 + r) % T) * O + t.col);
      }
#pragma unroll
      for (int u = 0; u < kNarrowUnroll; ++u) {
        const int r = r0 + u * kRows;
        if (r >= rows) break;
        float acc[P];
#pragma unroll
        for (int p = 0; p < P; ++p) acc[p] = b[p];
        if (table) {
#pragma unroll
          for (int p = 0; p < P; ++p) acc[p] += tb[u].f(p);
        }
        const float* v = in_s[r];
#pragma unroll
        for (int k = 0; k < kNarrowK; ++k) {
          if (k >= K) break;
#pragma unroll
          for (int p = 0; p < P; ++p) acc[p] += v[k] * w[k][p];
        }
        Pack<E> q;
#pragma unroll
        for (int p = 0; p < P; ++p) q.set(p, acc[p]);
        store16(out + (s0 + r) * O + t.col, q);
      }
    }
  }
}

// Partials of inputs [k0, k0 + kn) (kn <= kChunk) and, with_bias, of dout itself (slot kn):
// partial[slot][g][col] for row group g = blockIdx.y.
template <class E, int P>
__global__ void __launch_bounds__(32 * kRows, 2) patch_embed_partials_kernel(float* partial, const E* dout, const E* x,
                                                                           const E* c, int64_t N, int64_t O, int Kx,
                                                                           int Kc, int k0, int kn, bool with_bias,
                                                                           int64_t rows_per_group) {
  wait_for_prior_kernel();
  __shared__ float sh[kRows][32 * P];
  __shared__ __align__(16) float in_s[kStageRows][kChunk];  // inputs past the rows or kn: 0
  const ColumnTile t = column_tile<P>(N, rows_per_group);
  const bool live = t.col < O;
  float acc[kChunk + 1][P] = {};
  for (int64_t s0 = t.start; s0 < t.end; s0 += kStageRows) {
    const int rows = (int)(t.end - s0 < kStageRows ? t.end - s0 : kStageRows);
    __syncthreads();  // the last chunk's inputs are no longer read
    stage_inputs(in_s, x, c, s0, rows, k0, kn, Kx, Kc);
    __syncthreads();
    if (!live) continue;
    // rows r0 + u * kRows stay below kStageRows (a multiple of kRows * kUnroll); those past
    // `rows` add nothing (their dout is 0 here and their inputs 0 above). Each thread adds its
    // rows in increasing order, as the launch shape alone decides.
    for (int r0 = t.ty; r0 < rows; r0 += kRows * kUnroll) {
      float g[kUnroll][P];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int r = r0 + u * kRows;
#pragma unroll
        for (int p = 0; p < P; ++p) g[u][p] = 0.f;
        if (r < rows) load_cols<E, P>(g[u], dout + (s0 + r) * O + t.col, t.col, O);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const float* v = in_s[r0 + u * kRows];
#pragma unroll
        for (int kk = 0; kk < kChunk; ++kk)
#pragma unroll
          for (int p = 0; p < P; ++p) acc[kk][p] += g[u][p] * v[kk];
#pragma unroll
        for (int p = 0; p < P; ++p) acc[kChunk][p] += g[u][p];
      }
    }
  }
  const int64_t G = gridDim.y;
  // unrolled, so acc stays in registers (kn is the same for the whole block)
#pragma unroll
  for (int kk = 0; kk < kChunk; ++kk) {
    if (kk >= kn) break;
    store_column_partials<P, kRows>(sh, acc[kk], partial + (int64_t)kk * G * O, blockIdx.y, t.col0, O);
    __syncthreads();
  }
  if (with_bias) store_column_partials<P, kRows>(sh, acc[kChunk], partial + (int64_t)kn * G * O, blockIdx.y, t.col0, O);
}

// One thread per (slot, column): the groups' partials added in order, then into the gradient.
template <class E>
__global__ void patch_embed_finish_kernel(E* dwx, E* dwc, E* dbias, const float* partial, int G, int64_t O, int Kx,
                                          int Kc, int k0, int kn, bool with_bias, float beta) {
  wait_for_prior_kernel();
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const int slots = kn + (with_bias ? 1 : 0);
  if (i >= (int64_t)slots * O) return;
  const int slot = (int)(i / O);
  const int64_t o = i % O;
  float s = 0.f;
  for (int g = 0; g < G; ++g) s += partial[((int64_t)slot * G + g) * O + o];
  E* dst;
  if (slot == kn) dst = dbias + o;
  else if (k0 + slot < Kx) dst = dwx + o * Kx + (k0 + slot);
  else dst = dwc + o * Kc + (k0 + slot - Kx);
  // overwrite never reads the old value (it may hold anything, NaN included)
  *dst = from_f32<E>(beta != 0.f ? beta * to_f32(*dst) + s : s);
}

// ---- kernel launchers -----------------------------------------------------------------------

namespace {

// Row groups of the backward: about two blocks an SM over the column tiles, at most what the
// scratch holds for kChunk + 1 slots.
RowGroups patch_embed_groups(const Ctx& c, int64_t N, int64_t O, int P) {
  const int64_t tiles = ceil_div(O, 32 * P);
  const int64_t want = std::max<int64_t>(1, 2 * c.num_sms / tiles);
  return split_rows(N, want, (int64_t)(c.scratch_bytes / ((kChunk + 1) * O * sizeof(float))));
}

}  // namespace

size_t patch_embed_backward_scratch(int64_t O, int num_sms) {
  // the most groups (bf16 packs give the fewest column tiles), each kChunk + 1 slots of O
  const int64_t tiles = ceil_div(O, 32 * 8);
  const int64_t G = std::max<int64_t>(1, 2 * num_sms / tiles);
  return (size_t)G * (kChunk + 1) * O * sizeof(float);
}

void patch_embed_forward(const Ctx& c, DType t, void* out, const void* x, const void* wx, const void* cin,
                         const void* wc, const void* bias, const void* table, int64_t N, int64_t O, int64_t Kx,
                         int64_t Kc, int64_t T) {
  if (N == 0) return;
  dispatch_float(t, [&](auto tag) {
    using E = decltype(tag);
    constexpr int PK = Pack<E>::N;
    const bool packed = O % PK == 0 && aligned16(out) && (!table || aligned16(table));
    auto launch = [&](auto pc) {
      constexpr int P = decltype(pc)::value;
      const int64_t tiles = ceil_div(O, 32 * P);
      const int64_t rows = std::min<int64_t>(ceil_div(N, kRows), std::max<int64_t>(1, 8 * c.num_sms / tiles));
      // More than kMaxK inputs: one launch per chunk of kMaxK, the first writing bias + table + its
      // part, the others adding theirs to out (one rounding to the storage type per chunk)
      const int64_t K = Kx + Kc;
      for (int64_t k0 = 0; k0 < K || k0 == 0; k0 += kMaxK) {
        const bool first = k0 == 0;
        patch_embed_forward_kernel<E, P><<<dim3((unsigned)tiles, (unsigned)rows), 32 * kRows, 0, c.stream>>>(
            static_cast<E*>(out), static_cast<const E*>(x), static_cast<const E*>(wx), static_cast<const E*>(cin),
            static_cast<const E*>(wc), first ? static_cast<const E*>(bias) : nullptr,
            first ? static_cast<const E*>(table) : nullptr, N, O, (int)Kx, (int)Kc, T > 0 ? T : 1, (int)k0,
            (int)std::min<int64_t>(kMaxK, K - k0), !first);
        CUDA_CHECK_LAUNCH();
      }
    };
    if (packed && Kx + Kc <= kNarrowK) {
      const int64_t tiles = ceil_div(O, 32 * PK);
      // one wave: two blocks an SM (the weights in registers leave room for no more)
      const RowGroups g = split_rows(N, std::max<int64_t>(1, 2 * c.num_sms / tiles), N);
      ::ft::cuda::launch(c, patch_embed_narrow_forward_kernel<E>, dim3((unsigned)tiles, (unsigned)g.G),
                         dim3(32 * kRows), 0, static_cast<E*>(out), static_cast<const E*>(x),
                         static_cast<const E*>(wx), static_cast<const E*>(cin), static_cast<const E*>(wc),
                         static_cast<const E*>(bias), static_cast<const E*>(table), N, O, (int)Kx, (int)Kc,
                         T > 0 ? T : int64_t{1}, g.rows);
    } else if (packed) {
      launch(std::integral_constant<int, PK>{});
    } else {
      launch(std::integral_constant<int, 1>{});
    }
  });
}

void patch_embed_backward(const Ctx& c, DType t, void* dwx, void* dwc, void* dbias, const void* dout, const void* x,
                          const void* cin, int64_t N, int64_t O, int64_t Kx, int64_t Kc, float beta) {
  const int64_t K = Kx + (dwc ? Kc : 0);
  dispatch_float(t, [&](auto tag) {
    using E = decltype(tag);
    constexpr int PK = Pack<E>::N;
    const bool packed = O % PK == 0 && aligned16(dout);
    auto launch = [&](auto pc) {
      constexpr int P = decltype(pc)::value;
      const RowGroups rg = patch_embed_groups(c, N, O, P);
      FT_CHECK(rg.G >= 1 || N == 0, "patch_embed_backward: op scratch of ", c.scratch_bytes,
               " bytes holds no row group; size the workspace with OpShape::patch_embed");
      for (int64_t k0 = 0; k0 < K || (k0 == 0 && dbias); k0 += kChunk) {
        const int kn = (int)std::min<int64_t>(kChunk, K - k0);
        const bool with_bias = dbias && k0 == 0;
        if (N > 0) {
          const dim3 grid((unsigned)ceil_div(O, 32 * P), (unsigned)rg.G);
          ::ft::cuda::launch(c, patch_embed_partials_kernel<E, P>, grid, dim3(32 * kRows), 0,
                             static_cast<float*>(c.scratch), static_cast<const E*>(dout), static_cast<const E*>(x),
                             static_cast<const E*>(cin), N, O, (int)Kx, (int)Kc, (int)k0, kn, with_bias, rg.rows);
        } else {
          CUDA_CHECK(cudaMemsetAsync(c.scratch, 0, (size_t)(kn + 1) * O * sizeof(float), c.stream));
        }
        const int64_t n = (int64_t)(kn + (with_bias ? 1 : 0)) * O;
        ::ft::cuda::launch(c, patch_embed_finish_kernel<E>, dim3((unsigned)ceil_div(n, 256)), dim3(256), 0,
                           static_cast<E*>(dwx), static_cast<E*>(dwc), static_cast<E*>(dbias),
                           static_cast<const float*>(c.scratch), N > 0 ? rg.G : 1, O, (int)Kx, (int)Kc, (int)k0, kn,
                           with_bias, beta);
      }
    };
    if (packed) launch(std::integral_constant<int, PK>{});
    else launch(std::integral_constant<int, 1>{});
  });
}

}  // namespace ft::cuda
