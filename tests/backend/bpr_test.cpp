// CPU BPR head checks the op table (tests/ops/ops_bpr.cpp) does not make: a hand-computed
// row, stability at large score gaps, garbage negatives of a padding row, refused ids, the
// workspace it needs and its sizing through OpShape::bpr.
#include <cmath>

#include "core/error.h"
#include "op_test_util.h"

namespace ft::test {
namespace {

// A CPU backend whose workspace is sized for exactly OpShape::bpr(N, C, K).
struct BprHarness {
  std::unique_ptr<Backend> be = make_cpu_backend();
  std::vector<float> ws;
  BprHarness(int64_t N, int64_t C, int64_t K) {
    const OpShape op = OpShape::bpr(N, C, K);
    ws.resize(be->workspace_bytes(std::span<const OpShape>(&op, 1), Precision::fp32) / sizeof(float));
    be->set_workspace(ws.data(), ws.size() * sizeof(float));
  }
  Backend* operator->() { return be.get(); }
};

TEST(Bpr, HandComputedWithPaddingRow) {
  BprHarness h(2, 1, 1);
  // row 0: h = 1, pos item 0 (E = 2), neg item 1 (E = 1): x = 1; row 1: padding, with a
  // negative id that would be out of range (never read)
  std::vector<float> hv = {1, 5}, E = {2, 1}, dh(2), dE = {10, 20}, loss(2);
  std::vector<int32_t> pos = {0, -1}, neg = {1, -7};
  h->bpr_forward_backward(tf(loss, {2}), tf(dh, {2, 1}), tf(dE, {2, 1}), tf(hv, {2, 1}),
                          tf(E, {2, 1}), ti(pos, {2}), ti(neg, {2, 1}), 1.0f);
  const double g = 1.0 / (1.0 + std::exp(-1.0)) - 1.0;  // sigmoid(1) - 1
  EXPECT_NEAR(loss[0], std::log1p(std::exp(-1.0)), 1e-6);
  EXPECT_EQ(loss[1], 0.0f);
  EXPECT_NEAR(dh[0], g * (2 - 1), 1e-6);
  EXPECT_EQ(dh[1], 0.0f);
  EXPECT_NEAR(dE[0], 10 + g * 1, 1e-6);
  EXPECT_NEAR(dE[1], 20 - g * 1, 1e-6);
}

TEST(Bpr, StableAtLargeScoreGaps) {
  BprHarness h(2, 1, 1);
  std::vector<float> hv = {100, -100}, E = {1, 0}, dh(2), dE(2), loss(2);
  std::vector<int32_t> pos = {0, 0}, neg = {1, 1};
  h->bpr_forward_backward(tf(loss, {2}), tf(dh, {2, 1}), tf(dE, {2, 1}), tf(hv, {2, 1}),
                          tf(E, {2, 1}), ti(pos, {2}), ti(neg, {2, 1}), 1.0f);
  EXPECT_TRUE(std::isfinite(loss[0]) && loss[0] >= 0 && loss[0] < 1e-30);  // x = 100
  EXPECT_NEAR(loss[1], 100.0, 1e-4);                                        // x = -100
  EXPECT_NEAR(dh[0], 0.0, 1e-30);
  EXPECT_NEAR(dh[1], -1.0, 1e-6);
}

TEST(Bpr, RefusesBadIdsAndMissingWorkspace) {
  BprHarness h(1, 2, 2);
  std::vector<float> hv(2), E(6), dh(2), dE(6), loss(1);
  std::vector<int32_t> pos = {3}, neg = {0, 1};
  auto call = [&](float dloss) {
    h->bpr_forward_backward(tf(loss, {1}), tf(dh, {1, 2}), tf(dE, {3, 2}), tf(hv, {1, 2}),
                            tf(E, {3, 2}), ti(pos, {1}), ti(neg, {1, 2}), dloss);
  };
  EXPECT_THROW(call(1.0f), InternalError);  // positive past Vp = 3
  pos[0] = 2, neg[1] = -1;
  EXPECT_THROW(call(1.0f), InternalError);  // negative < 0 in a real row
  neg[1] = 1;
  EXPECT_NO_THROW(call(1.0f));
  h->set_workspace(nullptr, 0);
  EXPECT_THROW(call(1.0f), InternalError);  // the backward needs its coefficients' scratch
  EXPECT_NO_THROW(call(0.0f));              // evaluation needs none
}

TEST(Bpr, WorkspaceCoversTheCoefficients) {
  auto be = make_cpu_backend();
  const OpShape op = OpShape::bpr(25600, 64, 8);
  EXPECT_GE(be->workspace_bytes(std::span<const OpShape>(&op, 1), Precision::fp32),
            size_t(25600) * 9 * sizeof(float));
}

TEST(ItemScores, HandComputedAndRefusesBadIds) {
  Harness h;
  std::vector<float> hv = {1, 2, 3, 4}, E = {1, 0, 0, 1, 1, 1}, out(4);
  std::vector<int32_t> items = {0, 2, 1, 1};
  h->item_scores(tf(out, {2, 2}), tf(hv, {2, 2}), tf(E, {3, 2}), ti(items, {2, 2}));
  EXPECT_EQ(out, (std::vector<float>{1, 3, 4, 4}));
  items[3] = 3;
  EXPECT_THROW(h->item_scores(tf(out, {2, 2}), tf(hv, {2, 2}), tf(E, {3, 2}), ti(items, {2, 2})),
               InternalError);
}

}  // namespace
}  // namespace ft::test
