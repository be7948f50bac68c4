// Attention with options (AttentionOptions): non-causal, per-sample lengths (padding masks),
// and both together, on the CPU reference: finite-difference gradients for every combination,
// padded rows give 0, a padded sample equals the same sample run unpadded at its length, and
// the default options are exactly the causal path.
#include "backend/cpu/attention.h"

#include "core/error.h"
#include "fd_util.h"
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

// Every combination of causal x seq_lens, against central differences.
TEST(AttentionOptions, BackwardMatchesFiniteDifferences) {
  for (bool causal : {true, false})
    for (bool varlen : {false, true}) {
      SCOPED_TRACE(std::string(causal ? "causal" : "non-causal") + (varlen ? " varlen" : ""));
      Harness h(6, 8, 2, 2);
      OptCase k(causal, varlen ? std::vector<int32_t>{4, 6} : std::vector<int32_t>{});
      auto loss = [&] {
        k.forward(h);
        return dot(k.out, k.g);
      };
      k.forward(h);
      std::vector<float> dqkv(k.qkv.size(), 7.0f);
      k.backward(h, dqkv);
      expect_grad_close(dqkv, numeric_grad(k.qkv, loss), "dqkv");
    }
}

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

// Padded queries: output 0, probabilities 0; padded keys: probability 0; dq/dk/dv of padded
// positions 0 whatever dout holds there.
TEST(AttentionOptions, PaddedRowsAndKeysAreZero) {
  for (bool causal : {true, false}) {
    Harness h(6, 8, 2, 2);
    OptCase k(causal, {3, 6});
    k.forward(h);
    std::vector<float> dqkv(k.qkv.size(), 5.0f);
    k.backward(h, dqkv);
    for (int64_t b = 0; b < k.B; ++b)
      for (int64_t t = 0; t < k.T; ++t) {
        const bool pad = t >= k.len(b);
        for (int64_t c = 0; c < k.C; ++c)
          if (pad) EXPECT_EQ(k.out[(b * k.T + t) * k.C + c], 0.0f);
        for (int64_t c = 0; c < 3 * k.C; ++c)
          if (pad) EXPECT_EQ(dqkv[(b * k.T + t) * 3 * k.C + c], 0.0f) << "b=" << b << " t=" << t;
        for (int64_t h2 = 0; h2 < k.NH; ++h2)
          for (int64_t t2 = 0; t2 < k.T; ++t2)
            if (pad || t2 >= k.len(b))
              EXPECT_EQ(k.att[((b * k.NH + h2) * k.T + t) * k.T + t2], 0.0f);
      }
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
