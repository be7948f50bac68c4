// models/attention_bias.h's identities on the CPU backend, against the plain column sums of the
// whole d(qkv): for attention without a padding mask the keys' bias gradient is zero and the
// values' is d(b_proj) W_proj; over two micro-batches (GradWrite::add) the values' part is the
// product of the running sum. Causal and not.
#include "models/attention_bias.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/cpu_backend.h"

namespace ft {
namespace {

struct Vec {
  std::vector<float> v;
  Tensor t(std::initializer_list<int64_t> dims) { return Tensor(v.data(), DType::f32, dims); }
};
Vec randn(int64_t n, std::mt19937& g, float scale = 1.f) {
  std::normal_distribution<float> d(0.f, scale);
  Vec x{std::vector<float>(static_cast<size_t>(n))};
  for (float& f : x.v) f = d(g);
  return x;
}

// One attention block's backward from d(proj out): d(qkv) [B,T,3C] and d(b_proj) [C] (added to
// dproj_b, as the model's gated residual does).
struct Block {
  int64_t B = 2, T = 7, C = 16, NH = 2;
  bool causal = false;
  std::mt19937 g{7};
  Vec w_qkv = randn(3 * C * C, g, 0.3f), b_qkv = randn(3 * C, g), w_p = randn(C * C, g, 0.3f);
  std::unique_ptr<Backend> be = make_cpu_backend();
  std::vector<float> workspace;
  explicit Block(bool c) : causal(c) {
    const OpShape ops[] = {OpShape::attention(B, T, NH, C / NH, causal)};
    workspace.resize(be->workspace_bytes(ops, Precision::fp32) / 4 + 1);
    be->set_workspace(workspace.data(), workspace.size() * 4);
  }

  void run(Vec& dqkv, Vec& dproj_b, uint32_t seed) {
    std::mt19937 gs(seed);
    const int64_t N = B * T;
    Vec x = randn(N * C, gs), qkv{std::vector<float>(static_cast<size_t>(N * 3 * C))};
    Vec out{std::vector<float>(static_cast<size_t>(N * C))}, dout{out.v};
    const size_t saved_bytes = be->attention_saved_bytes(OpShape::attention(B, T, NH, C / NH, causal), Precision::fp32);
    Vec saved{std::vector<float>(saved_bytes / 4 + 1)};
    be->matmul_forward(qkv.t({B, T, 3 * C}), x.t({B, T, C}), w_qkv.t({3 * C, C}), b_qkv.t({3 * C}));
    AttentionOptions opt;
    opt.causal = causal;
    be->attention_forward(out.t({B, T, C}), saved.t({static_cast<int64_t>(saved.v.size())}), qkv.t({B, T, 3 * C}),
                          static_cast<int>(NH), opt);
    Vec dy = randn(N * C, gs);  // d(proj out)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c) dproj_b.v[static_cast<size_t>(c)] += dy.v[static_cast<size_t>(n * C + c)];
    be->matmul_backward(dout.t({N, C}), Tensor(), Tensor(), dy.t({N, C}), out.t({N, C}), w_p.t({C, C}));
    dqkv.v.assign(static_cast<size_t>(N * 3 * C), 0.f);
    be->attention_backward(dqkv.t({B, T, 3 * C}), dout.t({B, T, C}), qkv.t({B, T, 3 * C}), out.t({B, T, C}),
                           saved.t({static_cast<int64_t>(saved.v.size())}), static_cast<int>(NH), opt);
  }
};

std::vector<double> column_sums(const Vec& d, int64_t N, int64_t L) {
  std::vector<double> s(static_cast<size_t>(L), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < L; ++c) s[static_cast<size_t>(c)] += d.v[static_cast<size_t>(n * L + c)];
  return s;
}

void check(bool causal) {
  Block blk(causal);
  const int64_t C = blk.C, N = blk.B * blk.T;
  Vec dqkv, dproj_b{std::vector<float>(static_cast<size_t>(C), 0.f)};
  Vec got{std::vector<float>(static_cast<size_t>(3 * C), NAN)};
  blk.run(dqkv, dproj_b, 1);
  std::vector<double> want = column_sums(dqkv, N, 3 * C);
  qkv_bias_backward(*blk.be, got.t({3 * C}), dqkv.t({blk.B, blk.T, 3 * C}), dproj_b.t({C}), blk.w_p.t({C, C}),
                    GradWrite::overwrite);
  double scale = 0;
  for (double w : want) scale = std::max(scale, std::fabs(w));
  ASSERT_GT(scale, 0.1);
  for (int64_t c = 0; c < 3 * C; ++c) {
    // the keys' sums are rounding noise around the exact zero written
    if (c >= C && c < 2 * C) {
      EXPECT_EQ(got.v[static_cast<size_t>(c)], 0.f) << c;
      EXPECT_NEAR(want[static_cast<size_t>(c)], 0.0, 1e-5 * scale) << c;
    } else {
      EXPECT_NEAR(got.v[static_cast<size_t>(c)], want[static_cast<size_t>(c)], 1e-5 * scale) << "causal " << causal << " column " << c;
    }
  }
  // a second micro-batch: b_q's part added, b_v's from the running sum of d(b_proj)
  Vec dqkv2;
  blk.run(dqkv2, dproj_b, 2);
  const std::vector<double> want2 = column_sums(dqkv2, N, 3 * C);
  qkv_bias_backward(*blk.be, got.t({3 * C}), dqkv2.t({blk.B, blk.T, 3 * C}), dproj_b.t({C}), blk.w_p.t({C, C}),
                    GradWrite::add);
  for (int64_t c = 0; c < 3 * C; ++c) {
    if (c >= C && c < 2 * C) continue;
    const double both = want[static_cast<size_t>(c)] + want2[static_cast<size_t>(c)];
    EXPECT_NEAR(got.v[static_cast<size_t>(c)], both, 2e-5 * scale) << "causal " << causal << " column " << c << " after two";
  }
}

TEST(QkvBiasBackward, MatchesTheColumnSumsOfDqkv) { check(false); }
TEST(QkvBiasBackward, HoldsForCausalAttention) { check(true); }

}  // namespace
}  // namespace ft
