// The optimizer step's parameters (ParamSlice, AdamWStep: Backend::adamw_update), and how a
// training step's update is decided from its sums (Backend::update_control, the trainer's
// clipping and numerics guard, train/step_guard.h): one source for the CPU backend, the CUDA
// kernel (compiled as device code too) and the guard's host check, so the three cannot drift
// apart.
#pragma once
#include <cmath>

#include "backend/stream_handle.h"
#include "core/error.h"
#include "core/host_device.h"
#include "core/tensor.h"

namespace ft {

// One contiguous run of parameters updated by AdamW with the same weight-decay setting.
// Offsets are in elements into the flat parameter buffer (see models/gpt2.h).
struct ParamSlice {
  int64_t offset = 0;
  int64_t count = 0;
  bool decay = false;  // GPT-2 convention: matrices and embeddings decay; biases and LN don't
};

struct AdamWStep {
  float lr = 0, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f;
  float grad_scale = 1.0f;  // multiplies every gradient first (clipping, loss-scale undo)
  int64_t t = 1;            // 1-based step count for bias correction
  // Optional f32 [2] in the backend's memory, written by update_control() on the same stream:
  // when given, control[0] replaces grad_scale and control[1] == 0 skips the update (weights
  // and moments untouched). The trainer queues the update before it knows the step's
  // gradient norm, so that the device never waits for the host between backward and update.
  Tensor control;
  // Where the update runs (null: the compute stream). Another stream must be ordered after
  // the writers of everything the update reads (ZeRO-1's update beside the next forward,
  // train/param_gatherer.h); a synchronous backend ignores it.
  StreamHandle stream;
};

struct UpdateRule {
  double max_norm = 0;  // clip the gradient norm to this (<= 0: no clipping)
  double unscale = 1;   // the gradients' true scale (fp16: 1 / loss scale; else 1)
  bool skip = false;    // skip the update whatever the sums say (no loss unit in the batch; a test hook)
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
