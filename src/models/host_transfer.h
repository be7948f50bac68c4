// Host <-> device transfers every model makes outside its ops: host f32 values into a device
// tensor of the activation dtype (timestep coefficients, conditions, noisy images), and the
// per-sample losses of a pass summed on the host. One copy each, shared by the models.
#pragma once
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"
#include "core/half.h"

namespace ft {

// dst[0, n) = src (rounded to dst's dtype on the host when it is bf16/f16).
inline void upload_floats(Backend& be, Tensor dst, const float* src, int64_t n) {
  FT_CHECK(dst.numel() >= n, "upload of ", n, " values into ", dst.shape_str());
  if (dst.dtype == DType::f32) {
    be.copy_to_device(dst.data, src, static_cast<size_t>(n) * 4);
    return;
  }
  std::vector<uint16_t> h(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) h[static_cast<size_t>(i)] = float_to_half_bits(dst.dtype, src[i]);
  be.copy_to_device(dst.data, h.data(), static_cast<size_t>(n) * 2);
}

// The sum of an f32 device tensor, read back through `scratch` (sized by the caller's plan).
inline double sum_device_floats(Backend& be, Tensor t, std::vector<float>& scratch) {
  FT_CHECK(scratch.size() >= static_cast<size_t>(t.numel()), "read-back of ", t.numel(), " floats");
  be.copy_to_host(scratch.data(), t.data, t.bytes());
  double sum = 0;
  for (int64_t i = 0; i < t.numel(); ++i) sum += scratch[static_cast<size_t>(i)];
  return sum;
}

}  // namespace ft
