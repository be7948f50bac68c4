// Matrix products through cuBLASLt: bf16/f16 in/out with fp32 accumulation (or pure fp32 for
// --precision fp32), bias fused as an epilogue in forward.
//
// Bias gradient: the dW product sums dout's columns in its BGRADB epilogue (meant to save a
// second read of dout; on H200 cuBLASLt runs it as a separate kernel over dout all the same).
// The epilogue OVERWRITES its output while the backend's dbias accumulates, so it writes a
// scratch vector (fp32 where cuBLASLt takes a fp32 bias type, else the storage type) and a
// tiny kernel adds that into dbias. Where cuBLASLt has no BGRADB algorithm for the product (or
// with FT_NO_BGRAD_EPILOGUE=1), fittrain's deterministic two-stage column reduction over dout
// runs instead (FT_NO_BGRAD_EPILOGUE=0 forces the epilogue; unset: the backend's default).
//
// matmul_gelu_forward / matmul_backward_gelu fuse the MLP's GELU into the products' epilogues
// (GELU_AUX_BIAS forward, DGELU backward): the 4C-wide activation is not re-read and
// re-written by a separate elementwise kernel.
//
// fittrain's tensors are row-major; cuBLASLt is column-major. A row-major [R,K] matrix is a
// column-major [K,R] one, so every product below is written on the transposes.
#include <algorithm>
#include <cstdio>
#include <span>
#include <vector>

#include "backend/cuda/candidate_timing.cuh"
#include "backend/cuda/column_partials.cuh"
#include "backend/cuda/cuda_ops.cuh"

namespace ft::cuda {

// ---- CUDA kernels ---------------------------------------------------------------------------

namespace {
// Bias reduction (fittrain's kernels): a block is 32 column packs x kBiasRows rows; each
// thread keeps kBiasUnroll independent 16-byte loads in flight. About kBiasBlocksPerSm blocks
// per SM (one wave), so ~64 KB of loads are outstanding per SM: enough to stream HBM (H200,
// [16384, 768] bf16 with 8 rows x 1 load per thread and 192 blocks: ~2 TB/s).
constexpr int kBiasRows = 16;
constexpr int kBiasUnroll = 4;
constexpr int kBiasBlocksPerSm = 2;
constexpr int kBiasThreads = 32 * kBiasRows;
// Final sum over the row groups: 32 columns x 32 slices of the groups per block. With 8 slices
// its 83 launches a CDEIT step averaged 2.3 us each (session 26 trace, H200): a [G, 512] sum is
// only 16 blocks, whose threads each waited on G / 8 loads (G up to 2 an SM).
constexpr int kBiasReduceSlices = 32;
}

// partial[g][oc] = sum of dout[n][oc] over the rows n of group g: [g*R, min(N, (g+1)*R)),
// R = rows_per_group, row n at dout + n * ld. Thread (tx, ty) owns one 16-byte pack of columns
// and rows start + ty, +kBiasRows, ...; it loads kBiasUnroll rows before adding any (so the
// loads overlap), then adds them in row order. The kBiasRows rows of a block are summed in
// fixed order: the result depends only on the launch shape, never on timing.
template <class T>
__global__ void __launch_bounds__(kBiasThreads)
    bias_partial_kernel(float* partial, const T* dout, int64_t N, int64_t OC, int64_t ld,
                        int64_t rows_per_group) {
  wait_for_prior_kernel();
  constexpr int P = Pack<T>::N;
  __shared__ float sh[kBiasRows][32 * P];
  const auto [ty, col0, col, start, end] = column_tile<P>(N, rows_per_group);
  float acc[P];
#pragma unroll
  for (int k = 0; k < P; ++k) acc[k] = 0.f;
  if (col < OC) {
    for (int64_t n = start + ty; n < end; n += kBiasRows * kBiasUnroll) {
      Pack<T> v[kBiasUnroll];
#pragma unroll
      for (int u = 0; u < kBiasUnroll; ++u) {
        const int64_t r = n + (int64_t)u * kBiasRows;
        if (r < end) v[u] = load16_cs(dout + r * ld + col);  // read once: don't keep in L2
      }
#pragma unroll
      for (int u = 0; u < kBiasUnroll; ++u) {
        if (n + (int64_t)u * kBiasRows < end) {
#pragma unroll
          for (int k = 0; k < P; ++k) acc[k] += v[u].f(k);
        }
      }
    }
  }
  store_column_partials<P, kBiasRows>(sh, acc, partial, blockIdx.y, col0, OC);
}

// dbias[c] = beta * dbias[c] + sum_g partial[g][c]. Thread (tx, ty) of block b takes column
// 32b + tx and groups g = ty, ty + kBiasReduceSlices, ... (in order); the slices are then summed
// in slice order: fixed for a given G. Many threads per column keep this short (G is up to
// kBiasBlocksPerSm * num_sms, and one thread per column summing all of them serially was a
// chain of G dependent adds over L2 loads).
template <class T>
__global__ void __launch_bounds__(32 * kBiasReduceSlices)
    bias_reduce_kernel(T* dbias, const float* partial, int G, int64_t OC, float beta) {
  wait_for_prior_kernel();
  __shared__ float sh[kBiasReduceSlices][32];
  const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
  const int64_t c = (int64_t)blockIdx.x * 32 + tx;
  float s = 0.f;
  if (c < OC) {
#pragma unroll 4
    for (int g = ty; g < G; g += kBiasReduceSlices) s += partial[(int64_t)g * OC + c];
  }
  sh[ty][tx] = s;
  __syncthreads();
  if (ty == 0 && c < OC) {
    float t = 0.f;
#pragma unroll
    for (int k = 0; k < kBiasReduceSlices; ++k) t += sh[k][tx];
    dbias[c] = from_f32<T>((beta != 0.f ? to_f32(dbias[c]) : 0.f) + t);
  }
}

// dbias[oc] = beta * dbias[oc] + g[oc]: the BGRADB epilogue's column sums (S = float or the
// storage type T); beta is 1 (accumulate) or 0 (overwrite).
template <class T, class S>
__global__ void bias_add_kernel(T* dbias, const S* g, int64_t OC, float beta) {
  int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (c < OC) dbias[c] = from_f32<T>((beta != 0.f ? to_f32(dbias[c]) : 0.f) + to_f32(g[c]));
}

// Column sums for widths that are not whole 16-byte packs (a DiT/CDEIT output projection of
// p*p*C = 4 values a token in bf16): block x = column, its threads stride over the rows and
// reduce in a fixed tree, so the sum is deterministic. Narrow OC only: one block per column.
template <class T>
__global__ void bias_columns_kernel(T* dbias, const T* dout, int64_t N, int64_t OC, float beta) {
  __shared__ float part[256];
  const int64_t c = blockIdx.x;
  float s = 0.f;
  for (int64_t n = threadIdx.x; n < N; n += blockDim.x) s += to_f32(dout[n * OC + c]);
  part[threadIdx.x] = s;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    if ((int)threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) dbias[c] = from_f32<T>((beta != 0.f ? to_f32(dbias[c]) : 0.f) + part[0]);
}

// The same for OC <= 256 (DiT/CDEIT's output projections of 4 or 16 values a token), over
// many blocks: block g sums rows [g*R, min(N, (g+1)*R)) of all OC columns, reading them as one
// contiguous run; its (256 / OC) * OC threads each keep the column t % OC (the stride is a
// multiple of OC), and the threads of a column are then added in thread order into
// partial[g][c] (deterministic). One block per column over all N rows ran 0.18 ms for CDEIT's
// [131072, 4] on an H100; this spreads those rows over every SM.
template <class T>
__global__ void __launch_bounds__(256)
    bias_narrow_partial_kernel(float* partial, const T* dout, int64_t N, int64_t OC, int64_t rows_per_group) {
  __shared__ float sh[256];
  const int threads = (int)(256 / OC * OC);
  const int t = threadIdx.x;
  const int64_t begin = (int64_t)blockIdx.y * rows_per_group * OC;
  const int64_t end = std::min<int64_t>(N, ((int64_t)blockIdx.y + 1) * rows_per_group) * OC;
  float s = 0.f;
  if (t < threads)
    for (int64_t e = begin + t; e < end; e += threads) s += to_f32(dout[e]);
  sh[t] = s;
  __syncthreads();
  if (t < OC) {
    float r = 0.f;
    for (int k = t; k < threads; k += (int)OC) r += sh[k];
    partial[(int64_t)blockIdx.y * OC + t] = r;
  }
}

// ---- kernel launchers -----------------------------------------------------------------------

// Row groups of the bias reduction: blocks for about kBiasBlocksPerSm per SM over the column
// blocks, but no group under kBiasRows * kBiasUnroll rows (one full unrolled step per thread),
// so small N does not spread a few rows over hundreds of near-empty blocks.
static int bias_groups(int64_t N, int64_t OC, int num_sms, int P) {
  const int64_t gx = ceil_div(OC, 32 * P);
  const int64_t by_sms = std::max<int64_t>(1, kBiasBlocksPerSm * num_sms / gx);
  return (int)std::clamp<int64_t>(ceil_div(N, kBiasRows * kBiasUnroll), 1, by_sms);
}

size_t bias_backward_scratch(int64_t OC, int num_sms) {
  // The most row groups any N gives (N large); bf16 packs (P=8) give fewer column blocks and
  // so more row groups than fp32 (P=4): about kBiasBlocksPerSm * num_sms * 32 * P floats in
  // all, ~270 KB on 132 SMs whatever OC. G >= 1, so this also covers the BGRADB epilogue's
  // OC-float output (the larger of its two types).
  const int64_t big = int64_t{1} << 40;
  int G = std::max(bias_groups(big, OC, num_sms, 4), bias_groups(big, OC, num_sms, 8));
  return (size_t)G * OC * sizeof(float);
}

RowGroups bias_row_groups(const Ctx& c, int64_t N, int64_t OC, int P) {
  // fewer groups if the scratch is short (still deterministic for a given workspace)
  return split_rows(N, bias_groups(N, OC, c.num_sms, P), (int64_t)(c.scratch_bytes / (OC * sizeof(float))));
}

void bias_reduce(const Ctx& c, DType t, void* dbias, const float* partial, int G, int64_t OC, float beta) {
  dispatch_float(t, [&](auto tag) {
    using E = decltype(tag);
    launch(c, bias_reduce_kernel<E>, dim3((unsigned)ceil_div(OC, 32)), dim3(32 * kBiasReduceSlices), 0,
           static_cast<E*>(dbias), partial, G, OC, beta);
  });
}

void bias_backward(const Ctx& c, DType t, void* dbias, const void* dout, int64_t N, int64_t OC, float beta,
                   int64_t ld) {
  dispatch_float(t, [&](auto tag) {
    using E = decltype(tag);
    constexpr int P = Pack<E>::N;
    if (ld == 0) ld = OC;
    FT_CHECK(ld == OC || (OC % P == 0 && ld % P == 0 && aligned16(dout)), "bias_backward: ", OC,
             " columns in rows of ", ld, " need whole aligned 16-byte packs");
    if ((OC % P != 0 || !aligned16(dout)) && OC <= 256) {
      // rows of about 16 KB a group, two groups an SM at most, within the scratch
      const RowGroups g = split_rows(N, std::clamp<int64_t>(ceil_div(N * OC, 8192), 1, 2LL * c.num_sms),
                                     (int64_t)(c.scratch_bytes / (OC * sizeof(float))));
      if (g.G >= 1) {
        float* partial = static_cast<float*>(c.scratch);
        bias_narrow_partial_kernel<E><<<dim3(1, (unsigned)g.G), 256, 0, c.stream>>>(
            partial, static_cast<const E*>(dout), N, OC, g.rows);
        CUDA_CHECK_LAUNCH();
        bias_reduce(c, t, dbias, partial, g.G, OC, beta);
        return;
      }
    }
    if (OC % P != 0 || !aligned16(dout)) {
      FT_CHECK(OC <= 4096, "matmul: bias gradient of OC=", OC, " (not whole 16-byte packs) is for narrow outputs");
      bias_columns_kernel<E><<<(unsigned)OC, 256, 0, c.stream>>>(static_cast<E*>(dbias), static_cast<const E*>(dout),
                                                                 N, OC, beta);
      CUDA_CHECK_LAUNCH();
      return;
    }
    const RowGroups g = bias_row_groups(c, N, OC, P);
    FT_CHECK(g.G >= 1, "matmul: workspace too small for the bias gradient of OC=", OC);
    float* partial = static_cast<float*>(c.scratch);
    dim3 grid((unsigned)ceil_div(OC, 32 * P), (unsigned)g.G);
    launch(c, bias_partial_kernel<E>, grid, dim3(kBiasThreads), 0, partial, static_cast<const E*>(dout), N, OC, ld,
           g.rows);
    bias_reduce(c, t, dbias, partial, g.G, OC, beta);
  });
}

// How many of cuBLASLt's ranked algorithms autotuning times (MatmulState::autotune).
constexpr int kTuneCandidates = 8;

// One integer attribute of an algorithm's configuration (0 where cuBLASLt reports none).
static uint32_t algo_config(const cublasLtMatmulAlgo_t& a, cublasLtMatmulAlgoConfigAttributes_t attr) {
  uint32_t v = 0;  // ID is int32, the others uint32 (SPLITK_NUM, TILE_ID, REDUCTION_SCHEME, STAGES_ID)
  size_t written = 0;
  if (cublasLtMatmulAlgoConfigGetAttribute(&a, attr, &v, sizeof(v), &written) != CUBLAS_STATUS_SUCCESS) return 0;
  return v;
}

// Storage type of A, B, C/D and bias; the compute type is always fp32 (CUBLAS_COMPUTE_32F).
static cudaDataType_t lt_type(DType t) {
  return t == DType::bf16 ? CUDA_R_16BF : t == DType::f16 ? CUDA_R_16F : CUDA_R_32F;
}

// A GELU epilogue of a product whose D is [M,Nn] col-major: forward writes D = gelu(AB + bias)
// and aux = AB + bias (GELU_AUX[_BIAS]); backward writes D = AB * gelu'(aux) (DGELU). aux has
// D's shape, ld = M. cuBLASLt's GELU is the tanh approximation (GPT-2's); the GPU tests check
// the fused results against the tanh formula in fp32.
struct GeluEpilogue {
  bool backward = false;
  const void* aux = nullptr;
};

// A BGRADB epilogue: out[j] = sum over k of op(B)[k][j] for the Nn columns of D, stored as
// `type`. It is written, never accumulated: beta applies to D only (alpha is always 1 here).
struct BiasGradEpilogue {
  void* out = nullptr;
  cudaDataType_t type = CUDA_R_32F;
};

// The descriptors of one cuBLASLt call, destroyed however lt_matmul returns (destroy
// failures are ignored: a destructor must not throw, and they only leak host memory).
struct LtDescriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
  LtDescriptors() = default;
  LtDescriptors(const LtDescriptors&) = delete;
  LtDescriptors& operator=(const LtDescriptors&) = delete;
  ~LtDescriptors() {
    for (cublasLtMatrixLayout_t l : {la, lb, ld})
      if (l) cublasLtMatrixLayoutDestroy(l);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

// D[M,Nn] (col-major, ld = M) = op(A)[M,K] @ op(B)[K,Nn] + beta*C (+ bias[M] as epilogue),
// C = c_in if given (same layout as D, not aliasing it), else D itself.
// With a GELU or bias-gradient epilogue an unsupported combination returns false before
// anything runs, so the caller can fall back; without one it throws.
static bool lt_matmul(MatmulState& ms, const Ctx& c, DType t, void* D, const void* A,
                      const void* B, const void* bias, bool transA, bool transB, int64_t M,
                      int64_t Nn, int64_t K, int64_t lda, int64_t ldb, float beta,
                      const GeluEpilogue* gelu = nullptr,
                      const BiasGradEpilogue* bgrad = nullptr, const void* c_in = nullptr) {
  FT_CHECK(t == DType::bf16 || t == DType::f16 || t == DType::f32, "matmul: dtype ", dtype_name(t));
  const cudaDataType_t dt = lt_type(t);
  FT_CHECK(aligned16(A) && aligned16(B) && aligned16(D) && (!bias || aligned16(bias)) &&
               (!bgrad || aligned16(bgrad->out)) && (!c_in || aligned16(c_in)),
           "matmul: pointers must be 16-byte aligned");
  FT_CHECK(!(bgrad && (bias || (gelu && !gelu->backward))),
           "matmul: a bias-gradient epilogue takes no bias or forward GELU");
  const bool may_decline = gelu || bgrad;  // the caller has a fallback
  FT_CHECK(c_in != D, "matmul: a separate C must not alias D");
  const void* Cm = c_in ? c_in : D;
  LtDescriptors descs;  // released on every return
  cublasLtMatmulDesc_t& op = descs.op;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t ta = transA ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t tb = transB ? CUBLAS_OP_T : CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  cublasLtEpilogue_t epi = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  if (gelu) {
    FT_CHECK(!(gelu->backward && bias), "matmul: DGELU epilogue takes no bias");
    epi = gelu->backward ? CUBLASLT_EPILOGUE_DGELU
                         : bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
  }
  // with DGELU: the bias gradient of D itself (colsum of the GELU-backward output)
  if (bgrad) epi = gelu ? CUBLASLT_EPILOGUE_DGELU_BGRAD : CUBLASLT_EPILOGUE_BGRADB;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
  if (gelu) {
    const int64_t aux_ld = M;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                &gelu->aux, sizeof(gelu->aux)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld,
                                                sizeof(aux_ld)));
  }
  if (bias) {
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                sizeof(bias)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &dt,
                                                sizeof(dt)));
  }
  if (bgrad) {
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                &bgrad->out, sizeof(bgrad->out)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                &bgrad->type, sizeof(bgrad->type)));
  }
  cublasLtMatrixLayout_t &la = descs.la, &lb = descs.lb, &ld = descs.ld;
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, dt, transA ? K : M, transA ? M : K, lda));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, dt, transB ? Nn : K, transB ? K : Nn, ldb));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ld, dt, M, Nn, M));

  // The heuristic assumes 256-byte aligned matrices unless told otherwise, and an algorithm
  // chosen for aligned pointers may not run on others: each pointer's alignment (16..256) is
  // both a preference and part of the cache key.
  auto alignment = [](const void* p) {
    uint32_t a = 256;
    while (a > 16 && reinterpret_cast<uintptr_t>(p) % a != 0) a /= 2;
    return a;
  };
  const uint32_t align[4] = {alignment(A), alignment(B), alignment(Cm), alignment(D)};
  uint64_t key = 1469598103934665603ull;
  for (uint64_t v : {(uint64_t)dt, (uint64_t)transA, (uint64_t)transB, (uint64_t)M, (uint64_t)Nn,
                     (uint64_t)K, (uint64_t)lda, (uint64_t)ldb, (uint64_t)(bias != nullptr),
                     (uint64_t)(beta != 0.f), (uint64_t)epi,
                     (uint64_t)(bgrad ? bgrad->type + 1 : 0), (uint64_t)(c_in != nullptr),
                     (uint64_t)align[0] | (uint64_t)align[1] << 16 | (uint64_t)align[2] << 32 | (uint64_t)align[3] << 48})
    key = (key ^ v) * 1099511628211ull;
  auto it = ms.algos.find(key);
  if (may_decline && it == ms.algos.end() && ms.unsupported.count(key)) {
    return false;
  }
  if (it == ms.algos.end()) {
    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ms.workspace_bytes,
        sizeof(ms.workspace_bytes)));
    const cublasLtMatmulPreferenceAttributes_t align_attr[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4; ++i)
      CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, align_attr[i], &align[i], sizeof(align[i])));
    if (ms.fp32_reduction) {  // no split-K partials summed in place or in the 16-bit output type
      const uint32_t mask = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
      CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &mask,
                                                        sizeof(mask)));
    }
    // Autotuning times the heuristic's top candidates on this call's own operands, which is
    // only harmless when the product overwrites D without reading it (beta = 0, or C a
    // separate matrix); products accumulating into D take the heuristic's first choice.
    const bool tune = ms.autotune && (beta == 0.f || c_in);
    cublasLtMatmulHeuristicResult_t res[kTuneCandidates]{};
    int found = 0;
    // Unsplit algorithms first where K is not a multiple of 8: on an H200, cuBLASLt's first pick
    // for a weight gradient over K = 8193 rows (split-K 2, partials reduced in fp32) came out
    // 1.2e-2 off in bf16 and fp16 alike, as if about one row of K were lost, where the unsplit
    // algorithm is 2.3e-3 (rounding) off (session 21, GPU_OpTable.matmul_bwd_weights). Only
    // ragged row counts have such K here; where no unsplit algorithm ranks, cuBLASLt's order stays.
    const bool prefer_unsplit = ms.split_k == MatmulState::SplitK::none ||
                                (ms.split_k == MatmulState::SplitK::automatic && K % 8 != 0);
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(ms.handle, op, la, lb, ld, ld, pref,
                                                       tune || prefer_unsplit ? kTuneCandidates : 1, res, &found);
    CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    if (st == CUBLAS_STATUS_SUCCESS && prefer_unsplit) {  // the unsplit ones, in rank order
      int kept = 0;
      for (int i = 0; i < found; ++i)
        if (algo_config(res[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM) <= 1) res[kept++] = res[i];
      if (kept > 0) found = tune ? kept : 1;
      else found = tune ? found : std::min(found, 1);
    }
    if (may_decline && (st != CUBLAS_STATUS_SUCCESS || found == 0)) {
      // this epilogue is not available here: remember, and let the caller fall back
      ms.unsupported.insert(key);
      return false;
    }
    CUBLAS_CHECK(st);
    FT_CHECK(found > 0, "cuBLASLt found no algorithm for M=", M, " N=", Nn, " K=", K);
    int best = 0;
    if (tune && found > 1) {
      // Timed and picked as every tuning is (candidate_timing.cuh). tune_quiet: the timings
      // see the device alone, and the heuristic's first stays unless another is kTuneMargin
      // faster. A process with several streams (data
      // parallelism: NCCL's reductions, ZeRO-1's update) tunes its first step's products while
      // those run beside them, and a 2-GPU GPT-2 process chose a kernel for the LM head's
      // input gradient that took 3.28 ms a step against the 1-GPU process's 2.94 (session 17's
      // traces). Draining waits only for work already queued, which every rank queues in the
      // same order, so no collective can be left waiting on a rank that drains.
      if (ms.tune_quiet) CUDA_CHECK(cudaDeviceSynchronize());
      const float alpha = 1.f;
      auto run = [&](size_t i) {
        return cublasLtMatmul(ms.handle, op, &alpha, A, la, B, lb, &beta, Cm, ld, D, ld, &res[i].algo,
                              ms.workspace, ms.workspace_bytes, c.stream);
      };
      std::vector<bool> ok(static_cast<size_t>(found));
      for (size_t i = 0; i < ok.size(); ++i)  // + warm-up
        ok[i] = res[i].state == CUBLAS_STATUS_SUCCESS && run(i) == CUBLAS_STATUS_SUCCESS;
      const std::vector<float> t = time_candidates(c.stream, ok, [&](size_t i) { CUBLAS_CHECK(run(i)); });
      best = static_cast<int>(pick_fastest(t, ms.tune_quiet ? kTuneMargin : 0.f));
      if (ms.tune_log) {
        std::fprintf(stderr, "[matmul tune] M=%lld N=%lld K=%lld %c%c epi=%d beta=%g:", (long long)M, (long long)Nn,
                     (long long)K, transA ? 'T' : 'N', transB ? 'T' : 'N', (int)epi, beta);
        for (size_t i = 0; i < t.size(); ++i) std::fprintf(stderr, " %.4f", ok[i] ? t[i] : -1.f);
        std::fprintf(stderr, " ms -> %d\n", best);
      }
    }
    if (ms.tune_log) {  // the algorithm kept, tuned or not
      const cublasLtMatmulAlgo_t& a = res[best].algo;
      std::fprintf(stderr, "[matmul pick] M=%lld N=%lld K=%lld %c%c epi=%d beta=%g: id %u tile %u split-k %u "
                   "reduction %u stages %u workspace %zu (%s)\n", (long long)M, (long long)Nn, (long long)K,
                   transA ? 'T' : 'N', transB ? 'T' : 'N', (int)epi, beta, algo_config(a, CUBLASLT_ALGO_CONFIG_ID),
                   algo_config(a, CUBLASLT_ALGO_CONFIG_TILE_ID), algo_config(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
                   algo_config(a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME), algo_config(a, CUBLASLT_ALGO_CONFIG_STAGES_ID),
                   res[best].workspaceSize, tune && found > 1 ? "tuned" : "heuristic's first");
    }
    it = ms.algos.emplace(key, res[best].algo).first;
  }
  const float alpha = 1.f;
  CUBLAS_CHECK(cublasLtMatmul(ms.handle, op, &alpha, A, la, B, lb, &beta, Cm, ld, D, ld,
                              &it->second, ms.workspace, ms.workspace_bytes, c.stream));
  return true;
}

void matmul_forward(MatmulState& m, const Ctx& c, DType t, void* out, const void* inp,
                    const void* w, const void* bias, int64_t N, int64_t C, int64_t OC) {
  // out^T[OC,N] = (w^T)^T ... : A = w as col-major [C,OC] transposed, B = inp as [C,N].
  lt_matmul(m, c, t, out, w, inp, bias, /*transA=*/true, /*transB=*/false, OC, N, C, C, C, 0.f);
}

void matmul_residual_forward(MatmulState& m, const Ctx& c, DType t, void* out, const void* inp,
                             const void* w, const void* bias, const void* residual, int64_t N,
                             int64_t C, int64_t OC) {
  // as matmul_forward, plus beta = 1 on C = residual: the add rides in the epilogue
  lt_matmul(m, c, t, out, w, inp, bias, true, false, OC, N, C, C, C, 1.f, nullptr, nullptr,
            residual);
}

// dbias = beta * dbias + the bias-gradient epilogue's sums, which it left in c.scratch as
// `type` (fp32 or the storage type)
static void add_epilogue_bias(const Ctx& c, DType t, void* dbias, cudaDataType_t type,
                              int64_t OC, float beta) {
  dispatch_float(t, [&](auto tag) {
    using E = decltype(tag);
    const unsigned blocks = (unsigned)ceil_div(OC, 256);
    if (type == CUDA_R_32F)
      bias_add_kernel<E, float><<<blocks, 256, 0, c.stream>>>(
          static_cast<E*>(dbias), static_cast<const float*>(c.scratch), OC, beta);
    else
      bias_add_kernel<E, E><<<blocks, 256, 0, c.stream>>>(
          static_cast<E*>(dbias), static_cast<const E*>(c.scratch), OC, beta);
    CUDA_CHECK_LAUNCH();
  });
}

// The epilogue's output types to try, best first: fp32 sums (dbias then rounds once, as on
// the two-kernel path), then the storage type where cuBLASLt takes only that (the documented
// default: the bias type is D's type).
static std::span<const cudaDataType_t> bias_grad_types(DType t) {
  static const cudaDataType_t f32[] = {CUDA_R_32F}, bf[] = {CUDA_R_32F, CUDA_R_16BF},
                              hf[] = {CUDA_R_32F, CUDA_R_16F};
  return t == DType::bf16 ? std::span<const cudaDataType_t>(bf)
         : t == DType::f16 ? std::span<const cudaDataType_t>(hf)
                           : std::span<const cudaDataType_t>(f32);
}

// dw^T[C,OC] += inp^T[C,N] @ dout[N,OC]: A = inp as [C,N], B = dout as [OC,N] transposed, so
// op(B) = dout [K=N, OC] and BGRADB's column sums over K are dbias's colsum(dout). Then, if
// dbias, dbias += colsum(dout): through the epilogue where cuBLASLt has it, else separately.
static void weight_bias_backward(MatmulState& m, const Ctx& c, DType t, void* dw, void* dbias,
                                 const void* dout, const void* inp, int64_t N, int64_t C,
                                 int64_t OC, bool accumulate) {
  const float beta = accumulate ? 1.f : 0.f;
  if (dbias && m.bgrad_epilogue) {
    FT_CHECK(c.scratch_bytes >= (size_t)OC * sizeof(float),
             "matmul: workspace too small for the bias gradient of OC=", OC);
    for (cudaDataType_t type : bias_grad_types(t)) {
      BiasGradEpilogue bg{c.scratch, type};
      // declined (no algorithm): nothing ran, try the next type or the fallback below
      if (!lt_matmul(m, c, t, dw, inp, dout, nullptr, false, true, C, OC, N, C, OC, beta,
                     nullptr, &bg))
        continue;
      add_epilogue_bias(c, t, dbias, type, OC, beta);
      return;
    }
    FT_CHECK(!m.bgrad_strict, "matmul: no cuBLASLt BGRADB epilogue for ", dtype_name(t),
             " N=", N, " C=", C, " OC=", OC);
  }
  lt_matmul(m, c, t, dw, inp, dout, nullptr, false, true, C, OC, N, C, OC, beta);
  if (dbias) bias_backward(c, t, dbias, dout, N, OC, beta);
}

void matmul_backward(MatmulState& m, const Ctx& c, DType t, void* dinp, void* dw, void* dbias,
                     const void* dout, const void* inp, const void* w, int64_t N, int64_t C,
                     int64_t OC, bool accumulate) {
  // dinp^T[C,N] = w^T[C,OC] @ dout^T[OC,N]: A = w as col-major [C,OC], B = dout as [OC,N].
  if (dinp) lt_matmul(m, c, t, dinp, w, dout, nullptr, false, false, C, N, OC, C, OC, 0.f);
  if (dw) weight_bias_backward(m, c, t, dw, dbias, dout, inp, N, C, OC, accumulate);
}

// The aux matrix (pre) is [N, ld] row-major = [ld, N] col-major with ld = M of the product;
// cuBLASLt wants its ld a multiple of 8 and the pointer 16-byte aligned.
static bool gelu_aux_ok(const void* aux, int64_t ld) { return aligned16(aux) && ld % 8 == 0; }

bool matmul_gelu_forward(MatmulState& m, const Ctx& c, DType t, void* pre, void* out,
                         const void* inp, const void* w, const void* bias, int64_t N, int64_t C,
                         int64_t OC) {
  if (!gelu_aux_ok(pre, OC)) return false;
  GeluEpilogue g{false, pre};
  // as matmul_forward: out^T[OC,N] = gelu(w @ inp^T + bias), pre^T the pre-activation
  return lt_matmul(m, c, t, out, w, inp, bias, true, false, OC, N, C, C, C, 0.f, &g);
}

bool matmul_backward_gelu(MatmulState& m, const Ctx& c, DType t, void* dpre, void* dw,
                          void* dbias, const void* dout, const void* inp, const void* w,
                          const void* pre, int64_t N, int64_t C, int64_t OC, bool accumulate,
                          void* dpre_bias, bool* dpre_bias_written) {
  if (dpre_bias_written) *dpre_bias_written = false;  // also when nothing runs
  if (!gelu_aux_ok(pre, C)) return false;
  GeluEpilogue g{true, pre};
  // as matmul_backward's dinp, with gelu'(pre) applied in the epilogue; nothing has run if
  // the epilogue is unsupported, so the caller's fallback starts clean. With dpre_bias, the
  // DGELU_BGRAD epilogue also sums dpre's columns (pre's bias gradient) as it writes dpre,
  // sparing the next product's separate pass over the 4C-wide dpre.
  bool bias_done = false;
  if (dpre_bias && m.dgelu_bgrad && c.scratch_bytes >= (size_t)C * sizeof(float)) {
    for (cudaDataType_t type : bias_grad_types(t)) {
      BiasGradEpilogue bg{c.scratch, type};
      if (lt_matmul(m, c, t, dpre, w, dout, nullptr, false, false, C, N, OC, C, OC, 0.f, &g, &bg)) {
        add_epilogue_bias(c, t, dpre_bias, type, C, accumulate ? 1.f : 0.f);
        bias_done = true;
        break;
      }
    }
  }
  if (!bias_done &&
      !lt_matmul(m, c, t, dpre, w, dout, nullptr, false, false, C, N, OC, C, OC, 0.f, &g))
    return false;
  if (dpre_bias_written) *dpre_bias_written = bias_done;
  weight_bias_backward(m, c, t, dw, dbias, dout, inp, N, C, OC, accumulate);
  return true;
}

}  // namespace ft::cuda
