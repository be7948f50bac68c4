// How a training step's update is decided from its sums (Backend::update_control, the
// trainer's clipping and numerics guard, train/step_guard.h): one source for the CPU backend,
// the CUDA kernel (compiled as device code too) and the guard's host check, so the three
// cannot drift apart.
#pragma once
#include <cmath>

#include "core/error.h"
#include "core/host_device.h"
#include "core/tensor.h"

namespace ft {

struct UpdateRule {
  double max_norm = 0;  // clip the gradient norm to this (<= 0: no clipping)
  double unscale = 1;   // the gradients' true scale (fp16: 1 / loss scale; else 1)
  bool skip = false;    // skip the update whatever the sums say (a test hook)
};

// The rule, the reference of every backend's update_control():
//   norm = sqrt(sum_squares) * unscale
//   control[0] = (max_norm > 0 && norm > max_norm ? max_norm / norm : 1) * unscale
//   control[1] = !skip && loss and sum_squares are finite ? 1 : 0
// in double, rounded to f32 once.
FT_HOST_DEVICE inline void update_control_host(double loss, double sum_squares, const UpdateRule& r,
                                               float control[2]) {
  const double norm = std::sqrt(sum_squares) * r.unscale;
  const double clip = (r.max_norm > 0 && norm > r.max_norm) ? r.max_norm / norm : 1.0;
  control[0] = static_cast<float>(clip * r.unscale);
  control[1] = (!r.skip && std::isfinite(loss) && std::isfinite(sum_squares)) ? 1.f : 0.f;
}

// The argument checks every backend makes (host only).
inline void check_update_control(const Tensor& loss, const Tensor& sum_squares, const Tensor& control) {
  FT_CHECK(loss.dtype == DType::f64 && sum_squares.dtype == DType::f64 && control.dtype == DType::f32 &&
               loss.numel() >= 1 && sum_squares.numel() >= 1 && control.numel() >= 2,
           "update_control: loss ", loss.shape_str(), " sum_squares ", sum_squares.shape_str(), " control ",
           control.shape_str());
}
inline void check_scalars(const Tensor& dst, size_t count, const char* op) {
  FT_CHECK(dst.dtype == DType::f64 && static_cast<size_t>(dst.numel()) >= count && count <= 8, op, ": ", count,
           " f64 values into ", dst.shape_str());
}

}  // namespace ft
