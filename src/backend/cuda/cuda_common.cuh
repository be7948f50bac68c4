// Shared helpers of the CUDA backend: error checks that name file and line, bf16/fp32
// conversion, 16-byte vector loads/stores, warp reductions, and the launch context every op
// family receives (stream, scratch memory, multiprocessor count).
//
// Every kernel is templated on its storage type T (float, __nv_bfloat16 or __half) and
// computes in fp32; launchers dispatch on the Tensor's dtype.
#pragma once
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <source_location>
#include <string>
#include <utility>

#include "core/error.h"
#include "core/tensor.h"

namespace ft::cuda {
// An allocation that fails inside a call (cudaMalloc, a library's own workspace, a kernel's
// launch resources) throws ft::OutOfMemoryError, which the trainer answers by saving and
// re-planning with the memory that is free now; every other failure is an InternalError. The
// message names the file and line of the call and the call itself.
[[noreturn]] inline void throw_cuda_error(cudaError_t err, const char* file, int line, const char* call) {
  const std::string what = ::ft::detail::concat(file, ":", line, ": CUDA error ", cudaGetErrorName(err), " (",
                                                cudaGetErrorString(err), ") in ", call);
  if (err == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();  // not sticky: clear it so the process can go on
    throw ::ft::OutOfMemoryError(what);
  }
  throw ::ft::InternalError(what);
}

// A release (cudaFree, cudaFreeHost, an event or stream destroyed) that fails is said once on
// stderr and never thrown: releases run in destructors, often while an earlier error unwinds,
// and a throw there ends the process in std::terminate before that error is reported. A sticky
// error still surfaces at the next checked call.
inline void report_release_error(cudaError_t err, const char* file, int line, const char* call) {
  static bool said = false;
  if (said) return;
  said = true;
  std::fprintf(stderr, "fittrain: warning: %s:%d: CUDA error %s (%s) in %s (a release; carrying on)\n", file, line,
               cudaGetErrorName(err), cudaGetErrorString(err), call);
}
}  // namespace ft::cuda

#define CUDA_CHECK(call)                                                                 \
  do {                                                                                   \
    cudaError_t err_ = (call);                                                           \
    if (err_ != cudaSuccess) ::ft::cuda::throw_cuda_error(err_, __FILE__, __LINE__, #call); \
  } while (0)

#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

#define CUDA_CHECK_RELEASE(call)                                                                  \
  do {                                                                                            \
    cudaError_t err_ = (call);                                                                    \
    if (err_ != cudaSuccess) ::ft::cuda::report_release_error(err_, __FILE__, __LINE__, #call);  \
  } while (0)

#define CUBLAS_CHECK(call)                                                                 \
  do {                                                                                     \
    cublasStatus_t st_ = (call);                                                           \
    if (st_ == CUBLAS_STATUS_ALLOC_FAILED)                                                 \
      throw ::ft::OutOfMemoryError(::ft::detail::concat(__FILE__, ":", __LINE__,           \
                                                        ": cuBLAS could not allocate in ", #call)); \
    if (st_ != CUBLAS_STATUS_SUCCESS)                                                      \
      throw ::ft::InternalError(::ft::detail::concat(__FILE__, ":", __LINE__,              \
                                                     ": cuBLAS error ", static_cast<int>(st_), \
                                                     " in ", #call));                        \
  } while (0)

#ifdef FITTRAIN_HAVE_CUDNN
#include <cudnn.h>
#define CUDNN_CHECK(call)                                                                  \
  do {                                                                                     \
    cudnnStatus_t st_ = (call);                                                            \
    if (st_ == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED ||                     \
        st_ == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED)                         \
      throw ::ft::OutOfMemoryError(::ft::detail::concat(__FILE__, ":", __LINE__,           \
                                                        ": cuDNN could not allocate (",     \
                                                        cudnnGetErrorString(st_), ") in ", #call)); \
    if (st_ != CUDNN_STATUS_SUCCESS)                                                       \
      throw ::ft::InternalError(::ft::detail::concat(__FILE__, ":", __LINE__,              \
                                                     ": cuDNN error ", cudnnGetErrorString(st_), \
                                                     " in ", #call));                        \
  } while (0)
#endif

namespace ft::cuda {

using bf16 = __nv_bfloat16;
using f16 = __half;

// ---- conversions ----------------------------------------------------------------------------
__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f32(f16 x) { return __half2float(x); }
template <class T> __device__ __forceinline__ T from_f32(float x);
template <> __device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ bf16 from_f32<bf16>(float x) { return __float2bfloat16_rn(x); }
// Values past fp16's range become +-inf (round to nearest): an overflow must show up as a
// non-finite gradient norm so that the loss scaler skips the step.
template <> __device__ __forceinline__ f16 from_f32<f16>(float x) { return __float2half_rn(x); }

// ---- 16-byte vectors ------------------------------------------------------------------------
// Pack<T> holds 16 bytes of T: 8 bf16/f16 or 4 floats. Loads/stores are single 128-bit accesses,
// so the address must be 16-byte aligned (launchers check `aligned16`).
template <class T>
struct alignas(16) Pack {
  static constexpr int N = 16 / sizeof(T);
  T v[N];
  __device__ __forceinline__ float f(int i) const { return to_f32(v[i]); }
  __device__ __forceinline__ void set(int i, float x) { v[i] = from_f32<T>(x); }
};

template <class T> __device__ __forceinline__ Pack<T> load16(const T* p) {
  Pack<T> r;
  *reinterpret_cast<int4*>(&r) = *reinterpret_cast<const int4*>(p);
  return r;
}
// Streaming load through the read-only path, for data read exactly once.
template <class T> __device__ __forceinline__ Pack<T> load16_cs(const T* p) {
  Pack<T> r;
  *reinterpret_cast<int4*>(&r) = __ldcs(reinterpret_cast<const int4*>(p));
  return r;
}
template <class T> __device__ __forceinline__ void store16(T* p, const Pack<T>& x) {
  *reinterpret_cast<int4*>(p) = *reinterpret_cast<const int4*>(&x);
}

// An empty asm that "changes" a pack's registers: the compiler must redo the f32 conversions
// after it instead of keeping earlier ones live (the norms' backward kernels, whose second pass
// would otherwise hold 8 more floats a pack and spill).
template <class T> __device__ __forceinline__ void pack_opaque(Pack<T>& p) {
  int4& u = *reinterpret_cast<int4*>(&p);
  asm volatile("" : "+r"(u.x), "+r"(u.y), "+r"(u.z), "+r"(u.w));
}

// Calls f(c, value) for the elements of row x this lane of a warp owns (PACK: whole 16-byte
// packs lane, lane + 32, ...; else elements lane, lane + 32, ...): the row loops of the norms.
template <class T, bool PACK, class F>
__device__ __forceinline__ void row_for_lane(const T* x, int64_t C, int lane, F&& f) {
  if constexpr (PACK) {
    constexpr int P = Pack<T>::N;
    for (int64_t c = (int64_t)lane * P; c < C; c += 32 * P) {
      const Pack<T> v = load16(x + c);
#pragma unroll
      for (int k = 0; k < P; ++k) f(c + k, v.f(k));
    }
  } else {
    for (int64_t c = lane; c < C; c += 32) f(c, to_f32(x[c]));
  }
}

// ---- reductions -----------------------------------------------------------------------------
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }
inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

// ---- element-wise kernels (gelu.cu, residual.cu) --------------------------------------------
// Thread i handles pack i of the n elements, kPackBlock threads a block; a last partial pack is
// done element by element by the kernel. Launchers size the grid and kernels find their pack
// with these two, so that the grid always covers what the threads index.
constexpr int kPackBlock = 256;
template <class T> inline unsigned pack_grid(int64_t n) {
  return static_cast<unsigned>(ceil_div(ceil_div(n, Pack<T>::N), kPackBlock));
}
template <class T> __device__ __forceinline__ int64_t pack_begin() {  // first element of the pack
  return ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * Pack<T>::N;
}

// What every launcher gets: the backend's stream, the op scratch (shared by all ops, since
// they run one after another on one stream) and the device's shape.
struct Ctx {
  cudaStream_t stream = nullptr;
  void* scratch = nullptr;
  size_t scratch_bytes = 0;
  int num_sms = 132;
  int cc_major = 9;  // compute capability of the device
  size_t max_smem_optin = 227 * 1024;
  // Launches through `launch` may start behind the kernel before them (programmatic dependent
  // launch): FT_DEPENDENT_LAUNCH on a card that has it (sm_90 on), decided by the backend.
  bool dependent_launch = false;
};

// The first statement of every kernel started by `launch`: waits until the kernel before it in
// the stream has finished and its writes are visible (PTX griddepcontrol.wait). Without a
// programmatic dependency, as in a plain <<<>>> launch, it returns at once.
__device__ __forceinline__ void wait_for_prior_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// The context of a launch() and where in the source it was called: made from the Ctx at the
// call, so a failed launch names the op's file and line, not this header's.
struct LaunchSite {
  const Ctx& c;
  std::source_location at;
  LaunchSite(const Ctx& ctx, std::source_location loc = std::source_location::current()) : c(ctx), at(loc) {}
};

// A kernel launch on c.stream. With c.dependent_launch, the launch carries CUDA's
// programmatic stream serialization: the device may prepare it while the kernel before it is
// still running, instead of after that kernel has drained, which shortens the gap of about 1.4
// us that a CDEIT step otherwise pays before each of its ~700 kernels (session 25 trace). The
// kernel must begin with wait_for_prior_kernel(): its reads and writes come after that.
template <class... Params, class... Args>
void launch(LaunchSite site, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = site.c.stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = site.c.dependent_launch ? 1 : 0;
  const cudaError_t err = cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
  if (err != cudaSuccess)
    throw_cuda_error(err, site.at.file_name(), static_cast<int>(site.at.line()),
                     ::ft::detail::concat("a kernel launch in ", site.at.function_name()).c_str());
}

// N rows split into G groups of `rows` rows each, none empty: at most `want` and `room` groups
// (G = 0 when room < 1: the caller's scratch holds not even one group's partials).
struct RowGroups {
  int G = 0;
  int64_t rows = 0;
};
inline RowGroups split_rows(int64_t N, int64_t want, int64_t room) {
  const int64_t g = std::min(want, room);
  if (g < 1 || N < 1) return {};
  const int64_t rows = ceil_div(N, g);
  return {static_cast<int>(ceil_div(N, rows)), rows};
}

// Dispatch a dtype to a kernel's storage type.
template <class F> void dispatch_float(DType t, F&& f) {
  if (t == DType::f32) f(float{});
  else if (t == DType::bf16) f(bf16{});
  else if (t == DType::f16) f(f16{});
  else FT_CHECK(false, "CUDA backend: dtype ", dtype_name(t), " not supported here (f32, bf16, f16)");
}

}  // namespace ft::cuda
