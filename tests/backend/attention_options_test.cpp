// Attention with options (AttentionOptions) on the CPU reference: what the op table cannot
// check, because on the CPU it compares the reference with itself. Non-causal rows see every
// key, a padded sample equals the same sample run unpadded at its length (so padded keys are
// masked), the default options are exactly the causal path, bad lengths are refused. The
// table (tests/ops/ops_nn.cpp) has the finite-difference gradients of every mask
// (OpTable.attention_bwd_grad), padded rows' output and gradient exactly 0, and the GPU
// comparisons.
#include "backend/cpu/attention.h"

#include "core/error.h"
#include "op_test_util.h"

namespace ft::test {
namespace {

struct OptCase {
  int64_t B = 2, T = 6, C = 8, NH = 2;
  bool causal = true;
  std::vector<int32_t> lens;  // empty: no seq_lens
  std::vector<float> qkv, g, out, att;
  OptCase(bool causal_, std::vector<int32_t> lens_, uint32_t seed = 71)
      : causal(causal_), lens(std::move(lens_)) {
    qkv = randn(B * T * 3 * C, seed);
    g = randn(B * T * C, seed + 1);
    out.assign(B * T * C, 0.0f);
    att.assign(B * NH * T * T, 0.0f);
  }
  AttentionOptions opt() {
    AttentionOptions o;
    o.causal = causal;
    if (!lens.empty()) o.seq_lens = ti(lens, {B});
    return o;
  }
  void forward(Harness& h) {
    h->attention_forward(tf(out, {B, T, C}), tf(att, {B, NH, T, T}), tf(qkv, {B, T, 3 * C}),
                         static_cast<int>(NH), opt());
  }
  void backward(Harness& h, std::vector<float>& dqkv) {
    h->attention_backward(tf(dqkv, {B, T, 3 * C}), tf(g, {B, T, C}), tf(qkv, {B, T, 3 * C}),
                          tf(out, {B, T, C}), tf(att, {B, NH, T, T}), static_cast<int>(NH), opt());
  }
  int64_t len(int64_t b) const { return lens.empty() ? T : lens[b]; }
};

TEST(AttentionOptions, NonCausalRowsSeeEveryKey) {
  Harness h(6, 8, 2, 2);
  OptCase k(false, {});
  k.forward(h);
  for (int64_t r = 0; r < k.B * k.NH; ++r)
    for (int64_t t = 0; t < k.T; ++t) {
      double s = 0.0;
      for (int64_t t2 = 0; t2 < k.T; ++t2) {
        const float p = k.att[(r * k.T + t) * k.T + t2];
        EXPECT_GT(p, 0.0f);
        s += p;
      }
      EXPECT_NEAR(s, 1.0, 1e-6);
    }
}

// A sample padded to T gives, on its real rows, exactly what the sample alone (T = len) gives.
TEST(AttentionOptions, PaddedSampleEqualsTruncatedSample) {
  for (bool causal : {true, false}) {
    Harness h(6, 8, 2, 2);
    OptCase k(causal, {4, 6});
    k.forward(h);
    std::vector<float> dqkv(k.qkv.size());
    k.backward(h, dqkv);
    // sample 0 alone at T = 4
    const int64_t L = 4, C = k.C;
    OptCase s(causal, {});
    s.B = 1;
    s.T = L;
    s.qkv.assign(k.qkv.begin(), k.qkv.begin() + L * 3 * C);
    s.g.assign(k.g.begin(), k.g.begin() + L * C);
    s.out.assign(L * C, 0.0f);
    s.att.assign(s.NH * L * L, 0.0f);
    s.forward(h);
    std::vector<float> ds(s.qkv.size());
    s.backward(h, ds);
    for (int64_t i = 0; i < L * C; ++i) EXPECT_NEAR(k.out[i], s.out[i], 1e-6) << i;
    for (int64_t i = 0; i < L * 3 * C; ++i) EXPECT_NEAR(dqkv[i], ds[i], 1e-5) << i;
  }
}

TEST(AttentionOptions, DefaultIsTheCausalPathBitForBit) {
  Harness h(6, 8, 2, 2);
  OptCase a(true, {}), b(true, {});
  a.forward(h);
  h->attention_forward(tf(b.out, {b.B, b.T, b.C}), tf(b.att, {b.B, b.NH, b.T, b.T}),
                       tf(b.qkv, {b.B, b.T, 3 * b.C}), static_cast<int>(b.NH));
  EXPECT_TRUE(bit_equal(a.out, b.out));
  EXPECT_TRUE(bit_equal(a.att, b.att));
  // seq_lens all T: the same bits as none
  OptCase full(true, {6, 6});
  full.forward(h);
  EXPECT_TRUE(bit_equal(a.out, full.out));
  std::vector<float> d1(a.qkv.size()), d2(a.qkv.size());
  a.backward(h, d1);
  full.backward(h, d2);
  EXPECT_TRUE(bit_equal(d1, d2));
}

TEST(AttentionOptions, RejectsBadSeqLens) {
  Harness h(6, 8, 2, 2);
  OptCase zero(true, {0, 6}), big(true, {3, 7}), k(true, {});
  EXPECT_THROW(zero.forward(h), InternalError);
  EXPECT_THROW(big.forward(h), InternalError);
  std::vector<int32_t> one = {3};
  AttentionOptions short_lens;
  short_lens.seq_lens = ti(one, {1});  // one length for two samples
  EXPECT_THROW(h->attention_forward(tf(k.out, {2, 6, 8}), tf(k.att, {2, 2, 6, 6}),
                                    tf(k.qkv, {2, 6, 24}), 2, short_lens),
               InternalError);
}

}  // namespace
}  // namespace ft::test
