// Helpers for the GPU tests outside the op table (tests/ops/, which compares every op with the
// CPU reference): one device allocation per test (bump-allocated views), bf16/f16 host
// conversion, upload/download with dtype conversion, poisoning, the relative-norm error
// metric, and ScopedEnv for the backend's FT_* switches.
#pragma once
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "backend/op_dims.h"
#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "core/half.h"
#include "core/tensor.h"
#include "scoped_env.h"  // ScopedEnv, for the backend's FT_* switches

namespace ft::gputest {

using ::ft::ScopedEnv;  // tests/scoped_env.h

inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
inline float bf16_to_f32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// f16 through core/half.h's host conversions (round to nearest even, as the device's
// __float2half_rn; overflow to inf).
inline uint16_t f32_to_f16(float f) { return float_to_fp16(f); }
inline float f16_to_f32(uint16_t h) { return fp16_to_float(h); }
// 16-bit storage of a float in dtype t (bf16 or f16), and back.
inline uint16_t to_bits16(DType t, float f) { return float_to_half_bits(t, f); }
inline float from_bits16(DType t, uint16_t h) { return half_bits_to_float(t, h); }
// The value a float becomes when stored in dtype t.
inline float round_to(DType t, float x) { return t == DType::f32 ? x : from_bits16(t, to_bits16(t, x)); }
inline std::vector<float> round_to(DType t, std::vector<float> v) {
  for (float& x : v) x = round_to(t, x);
  return v;
}

inline std::vector<float> randn(size_t n, std::mt19937& g, float scale = 1.f) {
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}
inline std::vector<float> randu(size_t n, std::mt19937& g, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

// ||a - ref|| / ||ref||; infinity if anything is not finite.
inline double rel_err(const std::vector<float>& a, const std::vector<double>& ref) {
  EXPECT_EQ(a.size(), ref.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size() && i < ref.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    double d = a[i] - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}
inline double rel_err(const std::vector<float>& a, const std::vector<float>& ref) {
  return rel_err(a, std::vector<double>(ref.begin(), ref.end()));
}

// bf16 keeps 8 mantissa bits, f16 11 (half-ulp 4.9e-4): f16 errors come out several times
// smaller, so its tolerance is half of bf16's.
inline double tol(DType t, double f32_tol = 1e-5) {
  return t == DType::bf16 ? 1e-2 : t == DType::f16 ? 5e-3 : f32_tol;
}

// A device backend with one allocation, handed out in 256-byte-aligned pieces, and the
// planned workspace already set.
class GpuEnv {
 public:
  explicit GpuEnv(const OpDims& dims, size_t pool_bytes = 256ull << 20) {
    be_ = make_cuda_backend();
    size_t ws = workspace_bytes(*be_, dims);
    size_ = pool_bytes + ws;
    base_ = static_cast<char*>(be_->alloc(size_));
    be_->set_workspace(take(ws), ws);
  }
  ~GpuEnv() { be_->free(base_); }
  Backend& be() { return *be_; }

  void* take(size_t bytes) {
    size_t off = (used_ + 255) / 256 * 256;
    EXPECT_LE(off + bytes, size_) << "test pool exhausted";
    used_ = off + bytes;
    return base_ + off;
  }
  Tensor tensor(DType t, std::initializer_list<int64_t> dims) {
    Tensor x(nullptr, t, dims);
    x.data = take(x.bytes());
    return x;
  }
  // Uploads floats (converted to t), returns the tensor.
  Tensor upload(DType t, std::initializer_list<int64_t> dims, const std::vector<float>& v) {
    Tensor x = tensor(t, dims);
    put(x, v);
    return x;
  }
  Tensor upload_i32(std::initializer_list<int64_t> dims, const std::vector<int32_t>& v) {
    Tensor x = tensor(DType::i32, dims);
    EXPECT_EQ(static_cast<size_t>(x.numel()), v.size());
    be_->copy_to_device(x.data, v.data(), x.bytes());
    return x;
  }
  void put(Tensor x, const std::vector<float>& v) {
    EXPECT_EQ(static_cast<size_t>(x.numel()), v.size());
    if (x.dtype == DType::f32) {
      be_->copy_to_device(x.data, v.data(), x.bytes());
    } else {
      std::vector<uint16_t> h(v.size());
      for (size_t i = 0; i < v.size(); ++i) h[i] = to_bits16(x.dtype, v[i]);
      be_->copy_to_device(x.data, h.data(), x.bytes());
    }
  }
  std::vector<float> get(Tensor x) {
    be_->synchronize();
    std::vector<float> v(x.numel());
    if (x.dtype == DType::f32) {
      be_->copy_to_host(v.data(), x.data, x.bytes());
    } else {
      std::vector<uint16_t> h(v.size());
      be_->copy_to_host(h.data(), x.data, x.bytes());
      for (size_t i = 0; i < v.size(); ++i) v[i] = from_bits16(x.dtype, h[i]);
    }
    return v;
  }
  // Fills with all-ones bytes: NaN in f32, bf16 and f16, so unwritten outputs fail the check.
  void poison(Tensor x) {
    std::vector<uint8_t> h(x.bytes(), 0xff);
    be_->copy_to_device(x.data, h.data(), h.size());
  }

 private:
  std::unique_ptr<Backend> be_;
  char* base_ = nullptr;
  size_t size_ = 0, used_ = 0;
};

#define GPU_SKIP_IF_NONE() \
  if (!::ft::cuda_available()) GTEST_SKIP() << "no CUDA device"

// Compute capability (major) of device 0: some kernels fit one generation only (sm_90a's).
inline int gpu_compute_capability_major() {
  int v = 0;
  if (cudaDeviceGetAttribute(&v, cudaDevAttrComputeCapabilityMajor, 0) != cudaSuccess) return 0;
  return v;
}

inline const DType kDtypes[] = {DType::f32, DType::bf16, DType::f16};

}  // namespace ft::gputest
