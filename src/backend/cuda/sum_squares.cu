// Sum of squares of a flat fp32/bf16/f16 buffer (gradient-norm clipping): fp32 per thread, double
// across threads and blocks, fixed grid and order (deterministic); result copied to the host, or
// left in device memory for the update to read (sum_squares_to).
// Any inf/NaN element makes the result inf/NaN (plain adds of squares, nothing clamps or skips
// them): fp16's loss scaler detects overflowed steps by exactly that.
#include "backend/cuda/cuda_ops.cuh"

namespace ft::cuda {

// ---- CUDA kernels ---------------------------------------------------------------------------

namespace {
constexpr int kSsThreads = 512;
}

__device__ __forceinline__ double block_sum_double(double v, double* sh) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  double r = 0.0;
  if (threadIdx.x == 0)
    for (int w = 0; w < (int)(blockDim.x / 32); ++w) r += sh[w];
  return r;  // valid in thread 0
}

template <class T>
__global__ void __launch_bounds__(kSsThreads)
    sum_squares_partial_kernel(double* partial, const T* x, int64_t n, int64_t runs, int64_t stride) {
  constexpr int P = Pack<T>::N;
  __shared__ double sh[kSsThreads / 32];
  float acc = 0.f;
  const int64_t packs = n / P;
  for (int64_t r = 0; r < runs; ++r) {
    const T* xr = x + r * stride;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < packs;
         i += (int64_t)gridDim.x * blockDim.x) {
      Pack<T> v = load16_cs(xr + i * P);
#pragma unroll
      for (int k = 0; k < P; ++k) acc += v.f(k) * v.f(k);
    }
  }
  if (blockIdx.x == 0 && threadIdx.x == 0)
    for (int64_t j = packs * P; j < n; ++j) acc += to_f32(x[j]) * to_f32(x[j]);
  double r = block_sum_double((double)acc, sh);
  if (threadIdx.x == 0) partial[blockIdx.x] = r;
}

__global__ void sum_partials_kernel(double* result, const double* partial, int G) {
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    double s = 0.0;
    for (int g = 0; g < G; ++g) s += partial[g];
    *result = s;
  }
}

// ---- kernel launchers -----------------------------------------------------------------------

static int ss_grid(int num_sms) { return 2 * num_sms; }

size_t sum_squares_scratch(int num_sms) { return (ss_grid(num_sms) + 1) * sizeof(double); }

void sum_squares_to(const Ctx& c, DType t, const void* x, int64_t n, double* out, int64_t runs, int64_t stride) {
  if (n == 0) {
    CUDA_CHECK(cudaMemsetAsync(out, 0, sizeof(double), c.stream));
    return;
  }
  FT_CHECK(sum_squares_scratch(c.num_sms) <= c.scratch_bytes, "sum_squares: workspace too small");
  FT_CHECK(aligned16(x), "sum_squares: buffer must be 16-byte aligned");
  double* partial = static_cast<double*>(c.scratch);
  const int G = ss_grid(c.num_sms);
  dispatch_float(t, [&](auto tag) {
    using E = decltype(tag);
    // The tail past the last whole pack is summed for one run only: several runs must be whole packs.
    FT_CHECK(runs == 1 || (n % Pack<E>::N == 0 && stride % Pack<E>::N == 0), "sum_squares: runs of ", n,
             " elements ", stride, " apart are not whole 16-byte packs");
    sum_squares_partial_kernel<E>
        <<<G, kSsThreads, 0, c.stream>>>(partial, static_cast<const E*>(x), n, runs, runs == 1 ? 0 : stride);
    CUDA_CHECK_LAUNCH();
  });
  sum_partials_kernel<<<1, 32, 0, c.stream>>>(out, partial, G);
  CUDA_CHECK_LAUNCH();
}

double sum_squares(const Ctx& c, DType t, const void* x, int64_t n) {
  double* result = static_cast<double*>(c.scratch) + ss_grid(c.num_sms);
  sum_squares_to(c, t, x, n, result);
  double r = 0.0;
  CUDA_CHECK(cudaMemcpyAsync(&r, result, sizeof(double), cudaMemcpyDeviceToHost, c.stream));
  CUDA_CHECK(cudaStreamSynchronize(c.stream));
  return r;
}

}  // namespace ft::cuda
