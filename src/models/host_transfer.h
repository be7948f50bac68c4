// Host <-> device transfers every model makes outside its ops: host f32 values into a device
// tensor of the activation dtype (timestep coefficients, conditions, noisy images), a device
// tensor back as f32 (predictions), and the per-sample losses of a pass summed on the host.
// One copy each, shared by the models; the host staging is the caller's, sized at bind.
#pragma once
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"
#include "core/half.h"

namespace ft {

// dst[0, n) = src (rounded to dst's dtype on the host when it is bf16/f16, through staging:
// the caller sizes it at bind, so a step allocates nothing).
inline void upload_floats(Backend& be, Tensor dst, const float* src, int64_t n, std::vector<uint16_t>& staging) {
  FT_CHECK(dst.numel() >= n, "upload of ", n, " values into ", dst.shape_str());
  if (dst.dtype == DType::f32) {
    be.copy_to_device(dst.data, src, static_cast<size_t>(n) * 4);
    return;
  }
  if (staging.size() < static_cast<size_t>(n)) staging.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) staging[static_cast<size_t>(i)] = float_to_half_bits(dst.dtype, src[i]);
  be.copy_to_device(dst.data, staging.data(), static_cast<size_t>(n) * 2);
}

// out[0, numel) = the device tensor src as f32 (bf16/f16 widened on the host, through staging).
inline void download_floats(Backend& be, float* out, Tensor src, std::vector<uint16_t>& staging) {
  const int64_t n = src.numel();
  if (src.dtype == DType::f32) {
    be.copy_to_host(out, src.data, src.bytes());
    return;
  }
  if (staging.size() < static_cast<size_t>(n)) staging.resize(static_cast<size_t>(n));
  be.copy_to_host(staging.data(), src.data, src.bytes());
  for (int64_t i = 0; i < n; ++i) out[i] = half_bits_to_float(src.dtype, staging[static_cast<size_t>(i)]);
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
