// Fused multi-slice AdamW. With bf16/f16 params: fp32 master weights, m, v are updated and the
// 16-bit params re-rounded from the master (round to nearest). With f16 the trainer passes
// grad_scale = 1/loss-scale (times any clip factor) and never calls this on a step whose
// gradients overflowed. With fp32 params there is no
// master and the params are updated in place. Weight decay is decoupled (AdamW) and applied
// only to slices with decay=true; gradients are multiplied by grad_scale first.
// Also the EMA of the weights (ema_update): f32 source, output f32 or the parameter dtype, and
// the update's control (update_control): its gradient scale and verdict from the step's sums in
// device memory, so that the update is queued before the host knows them.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "backend/cuda/cuda_ops.cuh"

namespace ft::cuda {

// ---- CUDA kernels ---------------------------------------------------------------------------

namespace {
constexpr int kMaxSlices = 64;  // slices per launch (kernel-parameter table)
constexpr int kAdamThreads = 256;
}

struct SliceTable {
  int64_t offset[kMaxSlices];
  int64_t count[kMaxSlices];
  float decay[kMaxSlices];  // weight_decay or 0
};

struct AdamArgs {
  float lr, beta1, beta2, eps, grad_scale, bc1, bc2;
  const float* control;  // AdamWStep::control (null: grad_scale, always applied)
};

// blockIdx.y = slice of this launch; blocks grid-stride within their slice.
template <class T>
__global__ void adamw_kernel(T* params, float* master, const T* grads, float* m, float* v,
                             const __grid_constant__ SliceTable tab, AdamArgs a) {
  float grad_scale = a.grad_scale;
  if (a.control) {  // the step's verdict and clip factor, decided on the device (update_control)
    if (__ldg(a.control + 1) == 0.f) return;
    grad_scale = __ldg(a.control);
  }
  const int sidx = blockIdx.y;
  const int64_t off = tab.offset[sidx], cnt = tab.count[sidx];
  const float wd = tab.decay[sidx];
  for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < cnt;
       j += (int64_t)gridDim.x * blockDim.x) {
    const int64_t i = off + j;
    float g = to_f32(grads[i]) * grad_scale;
    float mi = a.beta1 * m[i] + (1.f - a.beta1) * g;
    float vi = a.beta2 * v[i] + (1.f - a.beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    float p = master ? master[i] : to_f32(params[i]);
    float mhat = mi / a.bc1, vhat = vi / a.bc2;
    p -= a.lr * (mhat / (sqrtf(vhat) + a.eps) + wd * p);
    if (master) master[i] = p;
    params[i] = from_f32<T>(p);
  }
}

// ---- kernel launchers -----------------------------------------------------------------------

void adamw_update(const Ctx& c, DType t, void* params, float* master, const void* grads,
                  float* m, float* v, std::span<const ParamSlice> slices, const AdamWStep& s) {
  AdamArgs a{s.lr, s.beta1, s.beta2, s.eps, s.grad_scale,
             (float)(1.0 - std::pow((double)s.beta1, (double)s.t)),
             (float)(1.0 - std::pow((double)s.beta2, (double)s.t)),
             s.control.empty() ? nullptr : static_cast<const float*>(s.control.data)};
  dispatch_float(t, [&](auto tag) {
    using E = decltype(tag);
    FT_CHECK(t == DType::f32 || master != nullptr, "adamw: bf16/f16 params need fp32 master weights");
    for (size_t first = 0; first < slices.size(); first += kMaxSlices) {
      size_t n = std::min<size_t>(kMaxSlices, slices.size() - first);
      SliceTable tab{};
      int64_t maxcount = 0;
      for (size_t k = 0; k < n; ++k) {
        const ParamSlice& p = slices[first + k];
        tab.offset[k] = p.offset;
        tab.count[k] = p.count;
        tab.decay[k] = p.decay ? s.weight_decay : 0.f;
        maxcount = std::max(maxcount, p.count);
      }
      if (maxcount == 0) continue;
      int64_t gx = std::min<int64_t>(ceil_div(maxcount, kAdamThreads), 4 * c.num_sms);
      dim3 grid((unsigned)gx, (unsigned)n);
      cudaStream_t stream = s.stream.native ? static_cast<cudaStream_t>(s.stream.native) : c.stream;
      adamw_kernel<E><<<grid, kAdamThreads, 0, stream>>>(
          static_cast<E*>(params), master, static_cast<const E*>(grads), m, v, tab, a);
      CUDA_CHECK_LAUNCH();
    }
  });
}

// ---- the update's control, on the device (backend/update_rule.h) ----

struct Scalars {
  double v[8];
};

__global__ void set_scalars_kernel(double* dst, Scalars s, int n) {
  if (threadIdx.x < n) dst[threadIdx.x] = s.v[threadIdx.x];
}

void set_scalars(const Ctx& c, double* dst, std::span<const double> values) {
  FT_CHECK(values.size() <= 8, "set_scalars: ", values.size(), " values (at most 8)");
  if (values.empty()) return;
  Scalars s{};
  std::copy(values.begin(), values.end(), s.v);
  set_scalars_kernel<<<1, 32, 0, c.stream>>>(dst, s, (int)values.size());
  CUDA_CHECK_LAUNCH();
}

// The host's rule itself (backend/update_rule.h), compiled as device code.
__global__ void update_control_kernel(const double* loss, const double* sum_squares, float* control, UpdateRule r) {
  if (threadIdx.x == 0) update_control_host(*loss, *sum_squares, r, control);
}

void update_control(const Ctx& c, const double* loss, const double* sum_squares, float* control,
                    const UpdateRule& r) {
  update_control_kernel<<<1, 32, 0, c.stream>>>(loss, sum_squares, control, r);
  CUDA_CHECK_LAUNCH();
}

// The EMA of one element: o - (o - s) w, or s where the decay is 0 (copy).
__device__ __forceinline__ float ema_value(float o, float s, float w, bool copy) {
  return copy ? s : o - (o - s) * w;
}

// out = out - (out - src) w, or out = src (copy: out is never read, it may hold anything).
// kVec: four elements a thread a step (src 16-byte aligned, out aligned to four elements);
// otherwise one (a ZeRO-1 shard's piece may start anywhere). Session 26's trace timed the
// scalar form, 4 blocks an SM, at 0.73 ms for CDEIT's 72.6M weights (1.2 TB/s, every 10th
// step) against AdamW's 2.8 TB/s over the same arrays; this one ran 4.07 TB/s (H200, session
// 28, fittrain_ops ema_update).
template <class T, bool kVec>
__global__ void ema_update_kernel(T* out, const float* src, int64_t n, float w, bool copy) {
  using Out4 = std::conditional_t<sizeof(T) == 4, float4, uint2>;  // four T in one access
  static_assert(sizeof(Out4) == 4 * sizeof(T));
  const int64_t stride = (int64_t)gridDim.x * blockDim.x, n4 = kVec ? n / 4 : 0;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {
    const float4 s = reinterpret_cast<const float4*>(src)[i];
    const float sv[4] = {s.x, s.y, s.z, s.w};
    T o[4];
    if (!copy) {
      const Out4 v = reinterpret_cast<const Out4*>(out)[i];
      memcpy(o, &v, sizeof(v));
    }
#pragma unroll
    for (int k = 0; k < 4; ++k) o[k] = from_f32<T>(ema_value(copy ? 0.f : to_f32(o[k]), sv[k], w, copy));
    Out4 v;
    memcpy(&v, o, sizeof(v));
    reinterpret_cast<Out4*>(out)[i] = v;
  }
  for (int64_t i = 4 * n4 + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = from_f32<T>(ema_value(copy ? 0.f : to_f32(out[i]), src[i], w, copy));  // the last n % 4
}

void ema_update(const Ctx& c, DType t, void* out, const float* src, int64_t n, float decay) {
  if (n == 0) return;
  const bool vec = aligned16(src) && reinterpret_cast<uintptr_t>(out) % (4 * dtype_size(t)) == 0;
  dispatch_float(t, [&](auto tag) {
    using E = decltype(tag);
    const int64_t gx = std::min<int64_t>(ceil_div(vec ? ceil_div(n, 4) : n, kAdamThreads), 16 * c.num_sms);
    auto kernel = vec ? ema_update_kernel<E, true> : ema_update_kernel<E, false>;
    kernel<<<(unsigned)gx, kAdamThreads, 0, c.stream>>>(static_cast<E*>(out), src, n, 1.f - decay, decay == 0.f);
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace ft::cuda
