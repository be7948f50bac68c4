// Token + position embedding: forward gather, deterministic backward scatter.
#include <cub/device/device_radix_sort.cuh>

#include "backend/cuda/cuda_ops.cuh"

namespace ft::cuda {

// ---- CUDA kernels ---------------------------------------------------------------------------

// One thread per 16-byte pack of one output row.
template <class T>
__global__ void embedding_forward_kernel(T* out, const int* tokens, const T* wte, const T* wpe,
                                         const int* positions, int64_t BT, int64_t T_, int64_t C) {
  constexpr int N = Pack<T>::N;
  int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  int64_t packs_per_row = C / N;
  if (idx >= BT * packs_per_row) return;
  int64_t bt = idx / packs_per_row;
  int64_t c = (idx % packs_per_row) * N;
  int64_t t = positions ? positions[bt] : bt % T_;
  int tok = tokens[bt];
  Pack<T> a = load16(wte + (int64_t)tok * C + c);
  if (!wpe) {  // no position table: a plain row gather
    store16(out + bt * C + c, a);
    return;
  }
  Pack<T> b = load16(wpe + t * C + c);
  Pack<T> o;
#pragma unroll
  for (int i = 0; i < N; ++i) o.set(i, a.f(i) + b.f(i));
  store16(out + bt * C + c, o);
}

__global__ void iota_kernel(int* v, int64_t n) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) v[i] = static_cast<int>(i);
}

// Block x = entry i in key-sorted order (keys: tokens for dwte, positions for a packed dwpe);
// only the first entry of each run of equal keys works: it sums the run's dout rows (in row
// order: the sort is stable) in fp32 and adds the sum to dst's row `key` once.
// blockIdx.y/threadIdx.x cover the channels in packs.
template <class T>
__global__ void embedding_rows_backward_kernel(T* dwte, const T* dout, const int* keys,
                                               const int* pos, int64_t n, int64_t C) {
  constexpr int N = Pack<T>::N;
  int64_t i = blockIdx.x;
  int tok = keys[i];
  if (i > 0 && keys[i - 1] == tok) return;
  int64_t c = ((int64_t)blockIdx.y * blockDim.x + threadIdx.x) * N;
  if (c >= C) return;
  float acc[N];
#pragma unroll
  for (int k = 0; k < N; ++k) acc[k] = 0.f;
  for (int64_t j = i; j < n && keys[j] == tok; ++j) {
    Pack<T> d = load16(dout + (int64_t)pos[j] * C + c);
#pragma unroll
    for (int k = 0; k < N; ++k) acc[k] += d.f(k);
  }
  T* dst = dwte + (int64_t)tok * C + c;
  Pack<T> w = load16(dst);
#pragma unroll
  for (int k = 0; k < N; ++k) w.set(k, w.f(k) + acc[k]);
  store16(dst, w);
}

// dwpe[t,c] += sum_b dout[b,t,c]; one thread per pack of (t, c).
template <class T>
__global__ void embedding_wpe_backward_kernel(T* dwpe, const T* dout, int64_t B, int64_t T_,
                                              int64_t C) {
  constexpr int N = Pack<T>::N;
  int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= T_ * C / N) return;
  int64_t t = idx / (C / N);
  int64_t c = (idx % (C / N)) * N;
  float acc[N];
#pragma unroll
  for (int k = 0; k < N; ++k) acc[k] = 0.f;
  for (int64_t b = 0; b < B; ++b) {
    Pack<T> d = load16(dout + (b * T_ + t) * C + c);
#pragma unroll
    for (int k = 0; k < N; ++k) acc[k] += d.f(k);
  }
  Pack<T> w = load16(dwpe + t * C + c);
#pragma unroll
  for (int k = 0; k < N; ++k) w.set(k, w.f(k) + acc[k]);
  store16(dwpe + t * C + c, w);
}

// ---- kernel launchers -----------------------------------------------------------------------

void embedding_forward(const Ctx& c, DType t, void* out, const int* tokens, const void* wte,
                       const void* wpe, int64_t B, int64_t T, int64_t C, const int* positions) {
  dispatch_float(t, [&](auto tag) {
    using E = decltype(tag);
    FT_CHECK(C % Pack<E>::N == 0, "embedding: C=", C, " must be a multiple of ", Pack<E>::N);
    int64_t n = B * T * (C / Pack<E>::N);
    const int threads = 256;
    embedding_forward_kernel<E><<<ceil_div(n, threads), threads, 0, c.stream>>>(
        static_cast<E*>(out), tokens, static_cast<const E*>(wte), static_cast<const E*>(wpe),
        positions, B * T, T, C);
    CUDA_CHECK_LAUNCH();
  });
}

// Scratch layout: keys_out[n] | vals_in[n] | vals_out[n] | cub temp.
size_t embedding_backward_scratch(int64_t N) {
  size_t temp = 0;
  CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp, (const int*)nullptr, (int*)nullptr,
                                             (const int*)nullptr, (int*)nullptr, (int)N, 0, 32));
  return 3 * align_up(N * sizeof(int), 256) + align_up(temp, 256);
}

void embedding_backward(const Ctx& c, DType t, void* dwte, void* dwpe, const void* dout,
                        const int* tokens, int64_t B, int64_t T, int64_t C, int64_t Vp,
                        const int* positions, int64_t maxT) {
  const int64_t n = B * T;
  FT_CHECK(embedding_backward_scratch(n) <= c.scratch_bytes, "embedding: workspace too small");
  char* s = static_cast<char*>(c.scratch);
  int* keys_out = reinterpret_cast<int*>(s);
  s += align_up(n * sizeof(int), 256);
  int* vals_in = reinterpret_cast<int*>(s);
  s += align_up(n * sizeof(int), 256);
  int* vals_out = reinterpret_cast<int*>(s);
  s += align_up(n * sizeof(int), 256);
  size_t temp = c.scratch_bytes - (s - static_cast<char*>(c.scratch));
  auto bits_for = [](int64_t rows) {
    int end_bit = 1;
    while (end_bit < 32 && (int64_t(1) << end_bit) < rows) ++end_bit;
    return end_bit;
  };

  iota_kernel<<<ceil_div(n, 256), 256, 0, c.stream>>>(vals_in, n);
  CUDA_CHECK_LAUNCH();
  dispatch_float(t, [&](auto tag) {
    using E = decltype(tag);
    constexpr int N = Pack<E>::N;
    FT_CHECK(C % N == 0, "embedding: C=", C, " must be a multiple of ", N);
    int threads = (int)std::min<int64_t>(128, C / N);
    dim3 grid((unsigned)n, (unsigned)ceil_div(C / N, threads));
    // Rows of `dst` chosen by `keys`: sort (stable) then sum each run. The scratch is reused
    // by the second sort: the stream orders it after the first kernel.
    auto scatter_rows = [&](void* dst, const int* keys, int64_t rows) {
      CUDA_CHECK(cub::DeviceRadixSort::SortPairs(s, temp, keys, keys_out, vals_in, vals_out, (int)n, 0,
                                                 bits_for(rows), c.stream));
      embedding_rows_backward_kernel<E><<<grid, threads, 0, c.stream>>>(
          static_cast<E*>(dst), static_cast<const E*>(dout), keys_out, vals_out, n, C);
      CUDA_CHECK_LAUNCH();
    };
    scatter_rows(dwte, tokens, Vp);
    if (!dwpe) return;  // no position table: a plain row scatter-add
    if (positions) {
      scatter_rows(dwpe, positions, maxT);
      return;
    }
    int64_t m = T * C / N;
    embedding_wpe_backward_kernel<E><<<ceil_div(m, 256), 256, 0, c.stream>>>(
        static_cast<E*>(dwpe), static_cast<const E*>(dout), B, T, C);
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace ft::cuda
