// The token-choice rule (models/sampling.h): greedy limits, the exact kept set of top-k and
// top-p on a hand-made logits vector, the draw's frequencies, determinism of the seed.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "models/sampling.h"

namespace ft {
namespace {

GenerateOptions sampled(double temperature, int top_k, double top_p) {
  GenerateOptions o;
  o.temperature = temperature, o.top_k = top_k, o.top_p = top_p;
  return o;
}

std::vector<float> random_logits(Rng& rng, int V) {
  std::vector<float> l(V);
  for (float& x : l) x = static_cast<float>(3 * rng.normal());
  return l;
}

TEST(Sampling, TinyTopPAndTopKOneAreGreedy) {
  Rng rng(3);
  for (int trial = 0; trial < 50; ++trial) {
    const std::vector<float> l = random_logits(rng, 97);
    const int32_t best = argmax_token(l);
    for (double u : {0.0, 0.3, 0.999999}) {
      EXPECT_EQ(sample_token(l, sampled(1.0, 0, 1e-9), u), best);
      EXPECT_EQ(sample_token(l, sampled(2.0, 1, 1.0), u), best);
      EXPECT_EQ(sample_token(l, sampled(0.0, 5, 0.5), u), best);  // temperature 0: greedy
    }
  }
  EXPECT_EQ(argmax_token(std::vector<float>{1, 3, 3, 2}), 1);  // the first of equals
  EXPECT_EQ(argmax_token(std::vector<float>{NAN, -1, NAN}), 1);  // NaN never wins
}

// logits 3, 2, 1, 0.5, 0, -1 at ids 5, 0, 1, 2, 3, 4: p ~ e^l
TEST(Sampling, DistributionHonoursTopKAndTopPExactly) {
  const std::vector<float> l = {2, 1, 0.5f, 0, -1, 3};
  const int order[6] = {5, 0, 1, 2, 3, 4};
  auto softmax_over = [&](std::vector<int> ids, double temp) {
    std::vector<double> p(6, 0.0);
    double z = 0;
    for (int i : ids) z += std::exp(l[i] / temp);
    for (int i : ids) p[i] = std::exp(l[i] / temp) / z;
    return p;
  };
  auto expect_eq = [](const std::vector<double>& got, const std::vector<double>& want, const char* what) {
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << what << " id " << i;
  };
  expect_eq(sampling_distribution(l, sampled(1, 0, 1)), softmax_over({0, 1, 2, 3, 4, 5}, 1), "all");
  expect_eq(sampling_distribution(l, sampled(0.5, 0, 1)), softmax_over({0, 1, 2, 3, 4, 5}, 0.5), "temperature");
  expect_eq(sampling_distribution(l, sampled(1, 3, 1)), softmax_over({5, 0, 1}, 1), "top-k 3");
  // top-p: the shortest most-likely-first prefix whose mass reaches p
  const std::vector<double> full = softmax_over({0, 1, 2, 3, 4, 5}, 1);
  double cum = 0;
  for (int n = 1; n <= 6; ++n) {
    cum += full[order[n - 1]];
    std::vector<int> prefix(order, order + n);
    // just under the prefix's mass keeps exactly this prefix; just over needs one more
    expect_eq(sampling_distribution(l, sampled(1, 0, cum - 1e-9)), softmax_over(prefix, 1), "top-p");
  }
  // top-k first, then top-p over the renormalised k: 3 of mass (e^3 + e^2) / (e^3 + e^2 + e)
  const std::vector<double> k3 = softmax_over({5, 0, 1}, 1);
  expect_eq(sampling_distribution(l, sampled(1, 3, k3[5] + k3[0] - 1e-9)), softmax_over({5, 0}, 1), "top-k then top-p");
  expect_eq(sampling_distribution(l, sampled(1, 3, k3[5] + 1e-9)), softmax_over({5, 0}, 1), "top-k then top-p, over");
}

TEST(Sampling, DrawsFollowTheDistribution) {
  const std::vector<float> l = {2, 1, 0.5f, 0, -1, 3};
  for (const GenerateOptions& o : {sampled(1, 0, 1), sampled(0.7, 4, 1), sampled(1.3, 0, 0.9)}) {
    const std::vector<double> p = sampling_distribution(l, o);
    std::vector<int> count(6, 0);
    const int n = 200000;
    for (int i = 0; i < n; ++i) count[sample_token(l, o, sample_uniform(11, 0, i))]++;
    for (int v = 0; v < 6; ++v) {
      if (p[v] == 0) EXPECT_EQ(count[v], 0) << "id " << v << " is outside the kept set";
      else EXPECT_NEAR(count[v] / double(n), p[v], 5 * std::sqrt(p[v] * (1 - p[v]) / n) + 1e-9) << "id " << v;
    }
  }
}

TEST(Sampling, TheSeedDecidesTheDraw) {
  EXPECT_EQ(sample_uniform(1, 2, 3), sample_uniform(1, 2, 3));
  EXPECT_NE(sample_uniform(1, 2, 3), sample_uniform(2, 2, 3));
  EXPECT_NE(sample_uniform(1, 2, 3), sample_uniform(1, 3, 3));
  EXPECT_NE(sample_uniform(1, 2, 3), sample_uniform(1, 2, 4));
  for (int i = 0; i < 1000; ++i) {
    const double u = sample_uniform(7, i, i * 3);
    EXPECT_TRUE(u >= 0 && u < 1) << u;
  }
}

TEST(Sampling, BadOptionsAreRefused) {
  for (const GenerateOptions& o : {sampled(-1, 0, 1), sampled(1, -2, 1), sampled(1, 0, 0), sampled(1, 0, 1.5)})
    EXPECT_THROW(check_generate_options(o), UserError);
  EXPECT_NO_THROW(check_generate_options(sampled(0, 0, 1)));
}

}  // namespace
}  // namespace ft
