// Embedding: hand case, gradient by finite differences, accumulation, determinism, checks.
#include "backend/cpu/embedding.h"

#include "core/error.h"
#include "op_test_util.h"

namespace ft::test {
namespace {

TEST(Embedding, HandComputed) {
  Harness h;
  std::vector<int32_t> tok = {1, 0};
  std::vector<float> wte = {1, 2, 10, 20}, wpe = {100, 200, 300, 400, 500, 600}, out(4);
  h->embedding_forward(tf(out, {1, 2, 2}), ti(tok, {1, 2}), tf(wte, {2, 2}), tf(wpe, {3, 2}));
  EXPECT_EQ(out, (std::vector<float>{110, 220, 301, 402}));
}

TEST(Embedding, BackwardMatchesFiniteDifferences) {
  Harness h;
  const int64_t B = 2, T = 5, C = 8, V = 4, maxT = 7;
  std::vector<int32_t> tok = randint(B * T, V, 1);
  tok[3] = tok[7];  // a repeated token must collect both gradients
  std::vector<float> wte = randn(V * C, 2), wpe = randn(maxT * C, 3), g = randn(B * T * C, 4);
  std::vector<float> out(B * T * C);
  auto loss = [&] {
    h->embedding_forward(tf(out, {B, T, C}), ti(tok, {B, T}), tf(wte, {V, C}),
                         tf(wpe, {maxT, C}));
    return dot(out, g);
  };
  std::vector<float> dwte(V * C, 0.0f), dwpe(maxT * C, 0.0f);
  h->embedding_backward(tf(dwte, {V, C}), tf(dwpe, {maxT, C}), tf(g, {B, T, C}),
                        ti(tok, {B, T}));
  expect_grad_close(dwte, numeric_grad(wte, loss), "dwte");
  expect_grad_close(dwpe, numeric_grad(wpe, loss), "dwpe");
}

TEST(Embedding, BackwardAccumulatesAndIsDeterministic) {
  Harness h;
  const int64_t B = 2, T = 5, C = 40, V = 3;  // C not a multiple of the column block
  std::vector<int32_t> tok = randint(B * T, V, 5);
  std::vector<float> g = randn(B * T * C, 6);
  std::vector<float> a1(V * C, 0.5f), p1(T * C, -0.25f), a2 = a1, p2 = p1;
  h->embedding_backward(tf(a1, {V, C}), tf(p1, {T, C}), tf(g, {B, T, C}), ti(tok, {B, T}));
  h->embedding_backward(tf(a2, {V, C}), tf(p2, {T, C}), tf(g, {B, T, C}), ti(tok, {B, T}));
  EXPECT_TRUE(bit_equal(a1, a2));
  EXPECT_TRUE(bit_equal(p1, p2));
  // reference: start value + gradient
  std::vector<double> ra(V * C, 0.5), rp(T * C, -0.25);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < C; ++c) {
        ra[tok[b * T + t] * C + c] += g[(b * T + t) * C + c];
        rp[t * C + c] += g[(b * T + t) * C + c];
      }
  for (size_t i = 0; i < ra.size(); ++i) EXPECT_NEAR(a1[i], ra[i], 1e-5);
  for (size_t i = 0; i < rp.size(); ++i) EXPECT_NEAR(p1[i], rp[i], 1e-5);
}

TEST(Embedding, RejectsBadTokensAndShapes) {
  Harness h;
  std::vector<int32_t> tok = {0, 2};
  std::vector<float> wte(4), wpe(4), out(4);
  EXPECT_THROW(
      h->embedding_forward(tf(out, {1, 2, 2}), ti(tok, {1, 2}), tf(wte, {2, 2}), tf(wpe, {2, 2})),
      InternalError);
  tok[1] = 1;
  std::vector<float> wpe1(2);  // one position only, T=2
  EXPECT_THROW(
      h->embedding_forward(tf(out, {1, 2, 2}), ti(tok, {1, 2}), tf(wte, {2, 2}), tf(wpe1, {1, 2})),
      InternalError);
}

}  // namespace
}  // namespace ft::test
