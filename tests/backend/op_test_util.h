// Shared helpers for the CPU op tests: seeded random fills, tensors over std::vector (tests
// only; the engine itself never allocates per tensor), a backend with its workspace, and a
// central finite-difference gradient checker.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <memory>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
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

// sum_i out[i] * g[i] in double: the scalar whose gradient wrt out is g.
inline double dot(const std::vector<float>& out, const std::vector<float>& g) {
  double s = 0.0;
  for (size_t i = 0; i < out.size(); ++i) s += static_cast<double>(out[i]) * g[i];
  return s;
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
    ws.resize(be->workspace_bytes(d) / sizeof(float) + 1);
    be->set_workspace(ws.data(), ws.size() * sizeof(float));
  }
  Backend* operator->() { return be.get(); }
};

// Central differences of loss() wrt every element of x, perturbing x in place by +-eps.
inline std::vector<double> numeric_grad(std::vector<float>& x, const std::function<double()>& loss,
                                        float eps = 1e-3f) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const float x0 = x[i];
    x[i] = x0 + eps;
    const double lp = loss();
    x[i] = x0 - eps;
    const double lm = loss();
    x[i] = x0;
    // divide by the step actually taken in fp32
    g[i] = (lp - lm) / (static_cast<double>(x0 + eps) - static_cast<double>(x0 - eps));
  }
  return g;
}

// Elementwise |a - n| <= atol + rtol * max(|a|, |n|), plus a whole-tensor relative check.
inline void expect_grad_close(const std::vector<float>& analytic,
                              const std::vector<double>& numeric, const char* what,
                              double rtol = 1e-2, double atol = 2e-3) {
  ASSERT_EQ(analytic.size(), numeric.size()) << what;
  double diff2 = 0.0, ref2 = 0.0;
  int bad = 0;
  for (size_t i = 0; i < analytic.size(); ++i) {
    const double a = analytic[i], n = numeric[i];
    diff2 += (a - n) * (a - n);
    ref2 += n * n;
    if (std::fabs(a - n) > atol + rtol * std::max(std::fabs(a), std::fabs(n))) {
      if (++bad <= 5)
        ADD_FAILURE() << what << "[" << i << "]: analytic " << a << " vs numeric " << n;
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << analytic.size() << " elements differ";
  EXPECT_LE(std::sqrt(diff2), rtol * std::sqrt(ref2) + atol) << what << ": relative norm error";
}

}  // namespace ft::test
