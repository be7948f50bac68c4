// Finite-difference helpers for backend tests that are not (yet) op-table cases.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

namespace ft::test {

// sum_i out[i] * g[i] in double: the scalar whose gradient wrt out is g.
inline double dot(const std::vector<float>& out, const std::vector<float>& g) {
  double s = 0.0;
  for (size_t i = 0; i < out.size(); ++i) s += static_cast<double>(out[i]) * g[i];
  return s;
}

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
