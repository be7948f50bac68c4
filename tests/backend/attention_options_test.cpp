// Attention with options (AttentionOptions) on the CPU reference: what the op table cannot
// check, because on the CPU it compares the reference with itself. Non-causal rows see every
// key, a padded sample equals the same sample run unpadded at its length (so padded keys are
// masked), the default options are exactly the causal path, bad lengths are refused; samples
// packed into a row (positions) each give exactly what they give alone and ignore each
// other's tokens, bad positions are refused. The table (tests/ops/ops_nn.cpp) has the
// finite-difference gradients of every mask (OpTable.attention_bwd_grad), padded rows' output
// and gradient exactly 0, and the GPU comparisons.
#include "backend/cpu/attention.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "op_test_util.h"

namespace ft::test {
namespace {

struct OptCase {
  int64_t B = 2, T = 6, C = 8, NH = 2;
  bool causal = true;
  std::vector<int32_t> lens;  // empty: no seq_lens
  std::vector<int32_t> pos;   // empty: no positions (else [B,T]: packed samples)
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
    if (!pos.empty()) o.positions = ti(pos, {B, T});
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

// ---- packed samples (AttentionOptions::positions) ---------------------------------------

// Two rows of T = 7, each packing samples: row 0 = [3 tokens | 4 tokens], row 1 = [2 | 1 | 4].
struct Sample {
  int64_t b, start, len;
};
const std::vector<int32_t> kPackedPos = {0, 1, 2, 0, 1, 2, 3, 0, 1, 0, 0, 1, 2, 3};
const std::vector<Sample> kSamples = {{0, 0, 3}, {0, 3, 4}, {1, 0, 2}, {1, 2, 1}, {1, 3, 4}};

OptCase packed_case(uint32_t seed = 71) {
  OptCase k(true, {}, seed);
  k.B = 2;
  k.T = 7;
  k.qkv = randn(k.B * k.T * 3 * k.C, seed);
  k.g = randn(k.B * k.T * k.C, seed + 1);
  k.out.assign(k.B * k.T * k.C, 0.0f);
  k.att.assign(k.B * k.NH * k.T * k.T, 0.0f);
  k.pos = kPackedPos;
  return k;
}

// Rows [start, start + len) of row b of a [B, T, width] buffer.
std::vector<float> rows_of(const std::vector<float>& v, int64_t T, int64_t width, const Sample& s) {
  auto first = v.begin() + (s.b * T + s.start) * width;
  return std::vector<float>(first, first + s.len * width);
}

// Each sample of a packed row gives, forward and backward, the very bits it gives alone (one
// unpacked row of its own length, positions 0..len-1): the packed row sums over the same keys
// in the same order, and no other sample's key reaches it or takes gradient from it.
TEST(AttentionOptions, PackedSamplesEqualEachSampleAlone) {
  Harness h(7, 8, 2, 2);
  OptCase k = packed_case();
  k.forward(h);
  std::vector<float> dqkv(k.qkv.size());
  k.backward(h, dqkv);
  const int64_t C = k.C;
  for (const Sample& smp : kSamples) {
    SCOPED_TRACE(::testing::Message() << "sample b=" << smp.b << " start=" << smp.start);
    OptCase s(true, {});
    s.B = 1;
    s.T = smp.len;
    s.qkv = rows_of(k.qkv, k.T, 3 * C, smp);
    s.g = rows_of(k.g, k.T, C, smp);
    s.out.assign(smp.len * C, 0.0f);
    s.att.assign(s.NH * smp.len * smp.len, 0.0f);
    s.forward(h);
    std::vector<float> ds(s.qkv.size());
    s.backward(h, ds);
    EXPECT_TRUE(bit_equal(rows_of(k.out, k.T, C, smp), s.out));
    EXPECT_TRUE(bit_equal(rows_of(dqkv, k.T, 3 * C, smp), ds));
    // the saved probabilities: the sample's own block, 0 on every other key of the row
    for (int64_t h2 = 0; h2 < k.NH; ++h2)
      for (int64_t t = 0; t < smp.len; ++t)
        for (int64_t t2 = 0; t2 < k.T; ++t2) {
          const float p = k.att[((smp.b * k.NH + h2) * k.T + smp.start + t) * k.T + t2];
          const int64_t j = t2 - smp.start;
          const float want = j >= 0 && j <= t ? s.att[(h2 * smp.len + t) * smp.len + j] : 0.0f;
          EXPECT_EQ(p, want) << "head " << h2 << " query " << t << " key " << t2;
        }
  }
}

// By hand: a one-token sample (row 1, t = 2) attends to itself only: out = its v, and its
// gradients are dq = 0, dk = 0 (softmax over one key is constant) and dv = dout, exactly. A
// two-token sample's second query (row 1, t = 1) mixes its two keys by softmax.
TEST(AttentionOptions, PackedTinySamplesByHand) {
  Harness h(7, 8, 2, 2);
  OptCase k = packed_case(5);
  k.forward(h);
  std::vector<float> dqkv(k.qkv.size());
  k.backward(h, dqkv);
  const int64_t C = k.C, C3 = 3 * C, T = k.T, hs = C / k.NH;
  const int64_t one = 1 * T + 2;  // (b = 1, t = 2)
  for (int64_t i = 0; i < C; ++i) {
    EXPECT_EQ(k.out[one * C + i], k.qkv[one * C3 + 2 * C + i]) << i;
    EXPECT_EQ(dqkv[one * C3 + i], 0.0f) << "dq " << i;
    EXPECT_EQ(dqkv[one * C3 + C + i], 0.0f) << "dk " << i;
    EXPECT_EQ(dqkv[one * C3 + 2 * C + i], k.g[one * C + i]) << "dv " << i;
  }
  const int64_t q = 1 * T + 1, k0 = 1 * T + 0;  // (b = 1, t = 1) sees keys t = 0, 1 of row 1
  for (int64_t hh = 0; hh < k.NH; ++hh) {
    double s[2];
    for (int j = 0; j < 2; ++j) {
      double dot = 0;
      for (int64_t i = 0; i < hs; ++i)
        dot += static_cast<double>(k.qkv[q * C3 + hh * hs + i]) *
               k.qkv[(k0 + j) * C3 + C + hh * hs + i];
      s[j] = dot / std::sqrt(static_cast<double>(hs));
    }
    const double p1 = 1.0 / (1.0 + std::exp(s[0] - s[1])), p0 = 1.0 - p1;
    for (int64_t i = 0; i < hs; ++i) {
      const double want = p0 * k.qkv[k0 * C3 + 2 * C + hh * hs + i] +
                          p1 * k.qkv[(k0 + 1) * C3 + 2 * C + hh * hs + i];
      EXPECT_NEAR(k.out[q * C + hh * hs + i], want, 1e-5) << "head " << hh << " dim " << i;
    }
  }
}

// Changing every token of sample A (row 0, t < 3) leaves sample B's (t >= 3) output,
// probabilities and gradients bitwise unchanged; A's own output does change.
TEST(AttentionOptions, PackedSampleIgnoresTheOtherSamplesTokens) {
  Harness h(7, 8, 2, 2);
  OptCase a = packed_case(), b = packed_case();
  const int64_t C = a.C, C3 = 3 * C;
  const std::vector<float> other = randn(3 * C3, 99, 3.0f);
  std::copy(other.begin(), other.end(), b.qkv.begin());  // row 0, t = 0..2: q, k and v
  a.forward(h);
  b.forward(h);
  std::vector<float> da(a.qkv.size()), db(b.qkv.size());
  a.backward(h, da);
  b.backward(h, db);
  const Sample A = kSamples[0], B = kSamples[1];
  EXPECT_FALSE(bit_equal(rows_of(a.out, a.T, C, A), rows_of(b.out, b.T, C, A)));
  EXPECT_TRUE(bit_equal(rows_of(a.out, a.T, C, B), rows_of(b.out, b.T, C, B)));
  EXPECT_TRUE(bit_equal(rows_of(da, a.T, C3, B), rows_of(db, b.T, C3, B)));
  EXPECT_FALSE(bit_equal(a.att, b.att));  // A's own probabilities moved
  for (int64_t hh = 0; hh < a.NH; ++hh)
    for (int64_t t = B.start; t < a.T; ++t)
      for (int64_t t2 = 0; t2 < a.T; ++t2) {
        const int64_t i = (hh * a.T + t) * a.T + t2;  // batch row 0
        EXPECT_EQ(a.att[i], b.att[i]) << "head " << hh << " query " << t << " key " << t2;
      }
}

// Positions with every token at 0..T-1 (one sample a row) give the unpacked causal bits.
TEST(AttentionOptions, OneSamplePerRowPositionsAreTheCausalPath) {
  Harness h(6, 8, 2, 2);
  OptCase a(true, {}), p(true, {});
  p.pos = {0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5};
  a.forward(h);
  p.forward(h);
  EXPECT_TRUE(bit_equal(a.out, p.out));
  EXPECT_TRUE(bit_equal(a.att, p.att));
  std::vector<float> d1(a.qkv.size()), d2(a.qkv.size());
  a.backward(h, d1);
  p.backward(h, d2);
  EXPECT_TRUE(bit_equal(d1, d2));
}

TEST(AttentionOptions, RejectsBadPositions) {
  Harness h(6, 8, 2, 2);
  const std::vector<int32_t> good = {0, 1, 2, 0, 1, 0, 0, 1, 2, 3, 4, 5};
  {
    OptCase k(false, {});  // packed samples are causal only
    k.pos = good;
    EXPECT_THROW(k.forward(h), InternalError);
  }
  {
    OptCase k(true, {6, 6});  // not with seq_lens
    k.pos = good;
    EXPECT_THROW(k.forward(h), InternalError);
  }
  for (const std::vector<int32_t>& bad :
       {std::vector<int32_t>{1, 2, 3, 4, 5, 6, 0, 1, 2, 3, 4, 5},   // first token not at 0
        std::vector<int32_t>{0, 1, 3, 0, 1, 2, 0, 1, 2, 3, 4, 5},   // skips a position
        std::vector<int32_t>{0, 1, 1, 0, 1, 2, 0, 1, 2, 3, 4, 5},   // repeats one
        std::vector<int32_t>{0, 1, 2, 0, 1, 2, 0, 1, 2, 3, -1, 5}}) {  // negative
    OptCase k(true, {});
    k.pos = bad;
    EXPECT_THROW(k.forward(h), InternalError);
    std::vector<float> d(k.qkv.size());
    EXPECT_THROW(k.backward(h, d), InternalError);
  }
  OptCase k(true, {});
  std::vector<int32_t> row = {0, 1, 2, 3, 4, 5};  // one row's positions for two rows
  AttentionOptions o;
  o.positions = ti(row, {1, 6});
  EXPECT_THROW(h->attention_forward(tf(k.out, {2, 6, 8}), tf(k.att, {2, 2, 6, 6}),
                                    tf(k.qkv, {2, 6, 24}), 2, o),
               InternalError);
  OptCase ok(true, {});
  ok.pos = good;
  EXPECT_NO_THROW(ok.forward(h));
}

}  // namespace
}  // namespace ft::test
