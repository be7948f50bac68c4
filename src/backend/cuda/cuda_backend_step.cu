// CudaBackendBase's optimizer-step ops (cuda_backend_impl.h): the gradients' sum of squares,
// AdamW, the weights' EMA (adamw.cu, sum_squares.cu), and the step's control on the device
// (sum_squares_to, set_scalars, update_control: the update decided without the host).
#include "backend/cuda/backend_checks.h"
#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_ops.cuh"

namespace ft::cuda {

double CudaBackendBase::sum_squares(Tensor x) {
  check_float(x, "sum_squares");
  if (x.numel() == 0) return 0.0;
  return cuda::sum_squares(ctx_, x.dtype, x.data, x.numel());
}

void CudaBackendBase::sum_squares_runs_to(Tensor x, int64_t runs, int64_t stride, Tensor out) {
  check_scalars(out, 1, "sum_squares_to");
  if (!x.empty()) check_float(x, "sum_squares_to");
  FT_CHECK(runs >= 1 && (runs == 1 || stride >= x.numel()), "sum_squares_runs_to: ", runs, " runs of ", x.numel(),
           " elements ", stride, " apart");
  cuda::sum_squares_to(ctx_, x.empty() ? DType::f32 : x.dtype, x.data, x.numel(), static_cast<double*>(out.data),
                       runs, stride);
}

void CudaBackendBase::set_scalars(Tensor dst, std::span<const double> values) {
  check_scalars(dst, values.size(), "set_scalars");
  cuda::set_scalars(ctx_, static_cast<double*>(dst.data), values);
}

void CudaBackendBase::update_control(Tensor loss, Tensor sum_squares, Tensor control, const UpdateRule& r) {
  check_update_control(loss, sum_squares, control);
  cuda::update_control(ctx_, static_cast<const double*>(loss.data), static_cast<const double*>(sum_squares.data),
                       static_cast<float*>(control.data), r);
}

void CudaBackendBase::adamw_update(Tensor params, Tensor master, Tensor grads, Tensor m, Tensor v,
                                   std::span<const ParamSlice> slices, const AdamWStep& s) {
  FT_CHECK(s.control.empty() || (s.control.dtype == DType::f32 && s.control.numel() >= 2),
           "adamw_update: control ", s.control.shape_str());
  check_float(params, "adamw_update");
  check_same(grads, params, "adamw_update");
  const int64_t n = params.numel();
  FT_CHECK(grads.numel() == n && m.numel() == n && v.numel() == n, "adamw_update: sizes");
  FT_CHECK(m.dtype == DType::f32 && v.dtype == DType::f32, "adamw_update: m, v must be f32");
  if (params.dtype == DType::f32) {
    FT_CHECK(master.empty(), "adamw_update: fp32 params take no master weights");
  } else {
    FT_CHECK(!master.empty() && master.dtype == DType::f32 && master.numel() == n,
             "adamw_update: bf16/f16 params need f32 master weights of the same size");
  }
  for (const ParamSlice& sl : slices)
    FT_CHECK(sl.offset >= 0 && sl.count >= 0 && sl.offset + sl.count <= n, "adamw_update: slice [", sl.offset, ", +",
             sl.count, ") outside ", n);
  cuda::adamw_update(ctx_, params.dtype, params.data, master.empty() ? nullptr : static_cast<float*>(master.data),
                     grads.data, static_cast<float*>(m.data), static_cast<float*>(v.data), slices, s);
}

void CudaBackendBase::ema_update(Tensor out, Tensor src, float decay) {
  check_float(out, "ema_update");
  FT_CHECK(src.dtype == DType::f32 && src.numel() == out.numel(), "ema_update: src must be f32 of ", out.numel(),
           " elements, got ", src.shape_str());
  FT_CHECK(decay >= 0.f && decay <= 1.f, "ema_update: decay ", decay, " outside [0, 1]");
  cuda::ema_update(ctx_, out.dtype, out.data, static_cast<const float*>(src.data), out.numel(), decay);
}

}  // namespace ft::cuda
