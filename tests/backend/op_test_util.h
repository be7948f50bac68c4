// Shared helpers for the CPU backend tests outside the op table: seeded random fills, tensors
// over std::vector (tests only; the engine itself never allocates per tensor), a backend with
// its workspace. (Finite-difference gradient checks are the op table's grad mode, tests/ops/.)
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/op_dims.h"
#include "core/tensor.h"

namespace ft::test {

inline std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

inline std::vector<int32_t> randint(size_t n, int32_t hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, hi - 1);
  std::vector<int32_t> v(n);
  for (int32_t& x : v) x = dist(rng);
  return v;
}

inline Tensor tf(std::vector<float>& v, std::initializer_list<int64_t> dims) {
  Tensor t(v.data(), DType::f32, dims);
  EXPECT_EQ(static_cast<size_t>(t.numel()), v.size()) << "test tensor shape mismatch";
  return t;
}
inline Tensor ti(std::vector<int32_t>& v, std::initializer_list<int64_t> dims) {
  Tensor t(v.data(), DType::i32, dims);
  EXPECT_EQ(static_cast<size_t>(t.numel()), v.size()) << "test tensor shape mismatch";
  return t;
}

inline bool bit_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The CPU backend with a workspace sized for sequence length T (and any op of these sizes).
struct Harness {
  std::unique_ptr<Backend> be = make_cpu_backend();
  std::vector<float> ws;
  explicit Harness(int64_t T = 16, int64_t C = 16, int64_t NH = 2, int64_t B = 2) {
    OpDims d;
    d.B = B;
    d.T = T;
    d.C = C;
    d.NH = NH;
    d.Vp = 64;
    d.V = 50;
    ws.resize(workspace_bytes(*be, d) / sizeof(float) + 1);
    be->set_workspace(ws.data(), ws.size() * sizeof(float));
  }
  Backend* operator->() { return be.get(); }
};

}  // namespace ft::test
