// Attention: a T=2 case with known probabilities, gradient by finite differences, dqkv
// overwrite, determinism (also across workspace-limited thread counts).
#include "backend/cpu/attention.h"

#include "core/error.h"
#include "op_test_util.h"

namespace ft::test {
namespace {

TEST(Attention, HandComputedT2) {
  Harness h(2, 2, 1, 1);
  // C=2, NH=1, hs=2, scale 1/sqrt(2). Row 1: q1.k0 = 0, q1.k1 = sqrt(2) ln 3 -> scores 0, ln 3
  // -> p = [1/4, 3/4].
  const float a = std::sqrt(2.0f) * std::log(3.0f);
  //                      q        k       v
  std::vector<float> qkv = {7, 7,    0, 0,   1, 2,     // t = 0
                            a, 0,    1, 0,   5, 10};   // t = 1
  std::vector<float> out(4), att(4, -1.0f);
  h->attention_forward(tf(out, {1, 2, 2}), tf(att, {1, 1, 2, 2}), tf(qkv, {1, 2, 6}), 1);
  EXPECT_FLOAT_EQ(att[0], 1.0f);
  EXPECT_FLOAT_EQ(att[1], 0.0f);  // causal mask
  EXPECT_NEAR(att[2], 0.25f, 1e-6);
  EXPECT_NEAR(att[3], 0.75f, 1e-6);
  EXPECT_FLOAT_EQ(out[0], 1.0f);
  EXPECT_FLOAT_EQ(out[1], 2.0f);
  EXPECT_NEAR(out[2], 0.25f * 1 + 0.75f * 5, 1e-5);
  EXPECT_NEAR(out[3], 0.25f * 2 + 0.75f * 10, 1e-5);
}

struct AttCase {
  int64_t B = 2, T = 5, C = 8, NH = 2;
  std::vector<float> qkv = randn(B * T * 3 * C, 51), g = randn(B * T * C, 52);
  std::vector<float> out = std::vector<float>(B * T * C),
                     att = std::vector<float>(B * NH * T * T);
  void forward(Harness& h) {
    h->attention_forward(tf(out, {B, T, C}), tf(att, {B, NH, T, T}), tf(qkv, {B, T, 3 * C}),
                         static_cast<int>(NH));
  }
  void backward(Harness& h, std::vector<float>& dqkv) {
    h->attention_backward(tf(dqkv, {B, T, 3 * C}), tf(g, {B, T, C}), tf(qkv, {B, T, 3 * C}),
                          tf(out, {B, T, C}), tf(att, {B, NH, T, T}), static_cast<int>(NH));
  }
};

TEST(Attention, ProbabilitiesAreCausalRows) {
  Harness h;
  AttCase k;
  k.forward(h);
  for (int64_t r = 0; r < k.B * k.NH; ++r)
    for (int64_t t = 0; t < k.T; ++t) {
      double s = 0.0;
      for (int64_t t2 = 0; t2 < k.T; ++t2) {
        const float p = k.att[(r * k.T + t) * k.T + t2];
        if (t2 > t) {
          EXPECT_EQ(p, 0.0f);
        }
        s += p;
      }
      EXPECT_NEAR(s, 1.0, 1e-6);
    }
}

TEST(Attention, BackwardMatchesFiniteDifferences) {
  Harness h;
  AttCase k;
  auto loss = [&] {
    k.forward(h);
    return dot(k.out, k.g);
  };
  k.forward(h);
  std::vector<float> dqkv(k.qkv.size(), 0.0f);
  k.backward(h, dqkv);
  expect_grad_close(dqkv, numeric_grad(k.qkv, loss), "dqkv");
}

TEST(Attention, BackwardOverwritesAndIsDeterministic) {
  Harness h(17, 24, 3, 3);
  AttCase k;
  k.B = 3;
  k.T = 17;
  k.C = 24;
  k.NH = 3;
  k.qkv = randn(k.B * k.T * 3 * k.C, 61);
  k.g = randn(k.B * k.T * k.C, 62);
  k.out.resize(k.B * k.T * k.C);
  k.att.resize(k.B * k.NH * k.T * k.T);
  k.forward(h);
  const std::vector<float> o1 = k.out, a1 = k.att;
  k.forward(h);
  EXPECT_TRUE(bit_equal(o1, k.out));
  EXPECT_TRUE(bit_equal(a1, k.att));
  std::vector<float> d1(k.qkv.size(), 0.0f), d2(k.qkv.size(), 99.0f);
  k.backward(h, d1);
  k.backward(h, d2);  // garbage in dqkv must not leak into the result
  EXPECT_TRUE(bit_equal(d1, d2));
  // A workspace with room for one thread only: same bits (work is split by (b,h)).
  std::vector<float> one(k.T);
  h->set_workspace(one.data(), one.size() * sizeof(float));
  std::vector<float> d3(k.qkv.size(), -5.0f);
  k.backward(h, d3);
  EXPECT_TRUE(bit_equal(d1, d3));
}

TEST(Attention, BackwardNeedsWorkspace) {
  Harness h;
  AttCase k;
  k.forward(h);
  h->set_workspace(nullptr, 0);
  std::vector<float> d(k.qkv.size());
  EXPECT_THROW(k.backward(h, d), InternalError);
}

TEST(Attention, WorkspaceAndSavedSizes) {
  auto be = make_cpu_backend();
  OpDims d;
  d.B = 2;
  d.T = 5;
  d.C = 8;
  d.NH = 2;
  EXPECT_GE(be->workspace_bytes(d), attention_backward_workspace_bytes(5, 1));
  EXPECT_EQ(be->attention_saved_bytes(d, Precision::fp32), 2u * 2 * 5 * 5 * 4);
}

}  // namespace
}  // namespace ft::test
