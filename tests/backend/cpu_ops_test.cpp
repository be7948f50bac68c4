// CPU backend op checks the op table (tests/ops/) does not make: hand-computed values and
// independent scalar references (the table's reference is this backend, so its own
// correctness rests on these and on the table's finite-difference grad mode), special
// semantics (causal probabilities, loss-only classifier mode, ignored targets, large logits,
// in-place residual, one-thread attention workspace) and argument checks.
// Finite differences, accumulate/overwrite semantics and bitwise repeats: OpTable.*.
#include "backend/cpu/attention.h"
#include "core/error.h"
#include "op_test_util.h"

namespace ft::test {
namespace {

// One AdamW step on one element, written out independently of the kernel, in double.
void adamw_ref(double& p, double g, double& m, double& v, const AdamWStep& s, bool decay) {
  g *= s.grad_scale;
  m = s.beta1 * m + (1 - s.beta1) * g;
  v = s.beta2 * v + (1 - s.beta2) * g * g;
  const double mhat = m / (1 - std::pow(static_cast<double>(s.beta1), static_cast<double>(s.t)));
  const double vhat = v / (1 - std::pow(static_cast<double>(s.beta2), static_cast<double>(s.t)));
  p -= s.lr * (mhat / (std::sqrt(vhat) + s.eps) + (decay ? s.weight_decay * p : 0.0));
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

TEST(AdamW, OneStepMatchesScalarReference) {
  Harness h;
  const int64_t n = 50;
  std::vector<float> p = randn(n, 101), g = randn(n, 102), m = randn(n, 103, 0.1f), v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = 0.01f * static_cast<float>(i % 7 + 1);
  const std::vector<float> p0 = p, m0 = m, v0 = v;
  // [0,20) decays, [20,35) does not, [35,45) decays, [45,50) belongs to no slice
  const ParamSlice sl[] = {{0, 20, true}, {20, 15, false}, {35, 10, true}};
  AdamWStep s;
  s.lr = 1e-2f;
  s.weight_decay = 0.1f;
  s.grad_scale = 0.5f;
  s.t = 3;
  h->adamw_update(tf(p, {n}), Tensor(), tf(g, {n}), tf(m, {n}), tf(v, {n}), sl, s);
  for (int64_t i = 0; i < n; ++i) {
    if (i >= 45) {
      EXPECT_EQ(p[i], p0[i]);
      EXPECT_EQ(m[i], m0[i]);
      EXPECT_EQ(v[i], v0[i]);
      continue;
    }
    const bool decay = i < 20 || i >= 35;
    double pr = p0[i], mr = m0[i], vr = v0[i];
    adamw_ref(pr, g[i], mr, vr, s, decay);
    EXPECT_NEAR(p[i], pr, 1e-6 + 1e-6 * std::fabs(pr)) << i;
    EXPECT_NEAR(m[i], mr, 1e-7 + 1e-6 * std::fabs(mr)) << i;
    EXPECT_NEAR(v[i], vr, 1e-8 + 1e-6 * std::fabs(vr)) << i;
  }
}

TEST(AdamW, FirstStepMovesByLearningRate) {
  // t=1 from zero state: mhat = g, vhat = g^2, so the step is lr * sign(g) (+ decay).
  Harness h;
  std::vector<float> p = {1.0f, 1.0f}, g = {3.0f, -2.0f}, m(2, 0.0f), v(2, 0.0f);
  const ParamSlice sl[] = {{0, 1, false}, {1, 1, true}};
  AdamWStep s;
  s.lr = 0.1f;
  s.weight_decay = 0.5f;
  h->adamw_update(tf(p, {2}), Tensor(), tf(g, {2}), tf(m, {2}), tf(v, {2}), sl, s);
  EXPECT_NEAR(p[0], 1.0 - 0.1, 1e-6);
  EXPECT_NEAR(p[1], 1.0 + 0.1 - 0.1 * 0.5, 1e-6);
}

// (bitwise repeats: OpTable.adamw_test)
TEST(AdamW, RejectsMasterAndBadSlices) {
  Harness h;
  const int64_t n = 10000;
  std::vector<float> g = randn(n, 111), p1 = randn(n, 112), m1(n, 0.0f), v1(n, 0.0f);
  const ParamSlice sl[] = {{0, n, true}};
  AdamWStep s;
  s.lr = 6e-4f;
  std::vector<float> master(n);
  EXPECT_THROW(h->adamw_update(tf(p1, {n}), tf(master, {n}), tf(g, {n}), tf(m1, {n}),
                               tf(v1, {n}), sl, s),
               InternalError);
  const ParamSlice bad[] = {{n - 5, 10, true}};
  EXPECT_THROW(
      h->adamw_update(tf(p1, {n}), Tensor(), tf(g, {n}), tf(m1, {n}), tf(v1, {n}), bad, s),
      InternalError);
}

// (bitwise repeats: OpTable.sum_squares_test)
TEST(SumSquares, Value) {
  Harness h;
  std::vector<float> x = {1, 2, 3};
  EXPECT_EQ(h->sum_squares(tf(x, {3})), 14.0);
  const int64_t n = 100003;
  std::vector<float> y = randn(n, 121);
  double ref = 0.0;
  for (float v : y) ref += static_cast<double>(v) * v;
  EXPECT_NEAR(h->sum_squares(tf(y, {n})), ref, 1e-9 * ref);
  std::vector<float> empty_ok(1, 0.5f);
  EXPECT_EQ(h->sum_squares(tf(empty_ok, {1})), 0.25);
}

// The update decided from values in the backend's memory (the trainer's step:
// ModelRuntime::queue_step_sums): the control from the rule, and AdamW reading it.
TEST(UpdateControl, FollowsTheRule) {
  Harness h;
  std::vector<double> loss = {2.5}, ss = {16.0};  // gradient norm 4
  std::vector<float> control(2, -1.f);
  auto run = [&](double l, double s, const UpdateRule& r) {
    loss[0] = l;
    ss[0] = s;
    h->update_control(Tensor(loss.data(), DType::f64, {1}), Tensor(ss.data(), DType::f64, {1}),
                      Tensor(control.data(), DType::f32, {2}), r);
    float ref[2];
    update_control_host(l, s, r, ref);
    EXPECT_EQ(control[0], ref[0]);
    EXPECT_EQ(control[1], ref[1]);
  };
  UpdateRule clip;
  clip.max_norm = 1.0;
  run(2.5, 16.0, clip);
  EXPECT_FLOAT_EQ(control[0], 0.25f);  // clipped to norm 1
  EXPECT_EQ(control[1], 1.f);
  run(2.5, 0.25, clip);  // norm 0.5: not clipped
  EXPECT_EQ(control[0], 1.f);
  UpdateRule fp16 = clip;
  fp16.unscale = 1.0 / 1024;  // sum of squares of gradients scaled by 1024: true norm 4
  run(2.5, 16.0 * 1024 * 1024, fp16);
  EXPECT_FLOAT_EQ(control[0], 0.25f / 1024);
  UpdateRule none;  // no clipping: only the unscale
  run(2.5, 1e6, none);
  EXPECT_EQ(control[0], 1.f);
  EXPECT_EQ(control[1], 1.f);
  for (double bad : {NAN, INFINITY}) {
    run(bad, 16.0, clip);
    EXPECT_EQ(control[1], 0.f);
    run(2.5, bad, clip);
    EXPECT_EQ(control[1], 0.f);
  }
  UpdateRule skip = clip;
  skip.skip = true;
  run(2.5, 16.0, skip);
  EXPECT_EQ(control[1], 0.f);
}

TEST(UpdateControl, AdamWReadsIt) {
  Harness h;
  const int64_t n = 40;
  const std::vector<float> p0 = randn(n, 131), g = randn(n, 132), m0 = randn(n, 133, 0.1f);
  const std::vector<float> v0(n, 0.02f);
  const ParamSlice sl[] = {{0, 25, true}, {25, 15, false}};
  AdamWStep s;
  s.lr = 1e-2f;
  s.t = 4;
  s.grad_scale = 0.3f;
  std::vector<float> pa = p0, ma = m0, va = v0, ga = g;
  h->adamw_update(tf(pa, {n}), Tensor(), tf(ga, {n}), tf(ma, {n}), tf(va, {n}), sl, s);
  // control[0] replaces grad_scale: the same bits as passing it directly
  std::vector<float> control = {0.3f, 1.f};
  AdamWStep sc = s;
  sc.grad_scale = 123.f;  // ignored
  sc.control = Tensor(control.data(), DType::f32, {2});
  std::vector<float> pb = p0, mb = m0, vb = v0, gb = g;
  h->adamw_update(tf(pb, {n}), Tensor(), tf(gb, {n}), tf(mb, {n}), tf(vb, {n}), sl, sc);
  EXPECT_EQ(pa, pb);
  EXPECT_EQ(ma, mb);
  EXPECT_EQ(va, vb);
  // control[1] == 0: nothing moves
  control[1] = 0.f;
  h->adamw_update(tf(pb, {n}), Tensor(), tf(gb, {n}), tf(mb, {n}), tf(vb, {n}), sl, sc);
  EXPECT_EQ(pa, pb);
  EXPECT_EQ(ma, mb);
  EXPECT_EQ(va, vb);
}

TEST(SumSquares, IntoBackendMemory) {
  Harness h;
  std::vector<float> y = randn(1001, 141);
  std::vector<double> out = {7.0, -1.0, 9.0};
  h->set_scalars(Tensor(out.data(), DType::f64, {3}), std::vector<double>{1.5, 2.5});
  EXPECT_EQ(out, (std::vector<double>{1.5, 2.5, 9.0}));
  h->sum_squares_to(tf(y, {1001}), Tensor(out.data() + 1, DType::f64, {1}));
  EXPECT_EQ(out[1], h->sum_squares(tf(y, {1001})));  // bit for bit
  EXPECT_EQ(out[0], 1.5);
  h->sum_squares_to(Tensor(), Tensor(out.data() + 2, DType::f64, {1}));
  EXPECT_EQ(out[2], 0.0);
}

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

// A workspace with room for one thread only gives the same bits (work is split by (b,h)).
// (Overwriting dqkv and bitwise repeats: OpTable.attention_bwd_test.)
TEST(Attention, OneThreadWorkspaceGivesSameBits) {
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
  std::vector<float> d1(k.qkv.size(), 0.0f);
  k.backward(h, d1);
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
  const OpShape att = OpShape::attention(2, 5, 2, 4);
  EXPECT_GE(be->workspace_bytes(std::span<const OpShape>(&att, 1), Precision::fp32),
            attention_backward_workspace_bytes(5, 1));
  EXPECT_EQ(be->attention_saved_bytes(att, Precision::fp32), 2u * 2 * 5 * 5 * 4);
}

TEST(Classifier, UniformLogitsGiveLogVAndPaddingIsExcluded) {
  Harness h;
  const int64_t N = 3, V = 5, Vp = 8;
  std::vector<float> logits(N * Vp, 2.0f);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t v = V; v < Vp; ++v) logits[n * Vp + v] = 50.0f;  // padding must not count
  std::vector<int32_t> tgt = {0, 4, 2};
  std::vector<float> losses(N);
  const float dloss = 1.0f / 3;
  h->classifier_forward_backward(tf(losses, {N}), tf(logits, {N, Vp}), ti(tgt, {N}), V, dloss);
  for (int64_t n = 0; n < N; ++n) {
    EXPECT_NEAR(losses[n], std::log(5.0), 1e-6);
    for (int64_t v = 0; v < Vp; ++v) {
      const double want = v >= V ? 0.0 : (0.2 - (v == tgt[n] ? 1.0 : 0.0)) * dloss;
      EXPECT_NEAR(logits[n * Vp + v], want, 1e-7) << n << "," << v;
      if (v >= V) {
        EXPECT_EQ(logits[n * Vp + v], 0.0f);
      }
    }
  }
}

TEST(Classifier, IgnoredTargetsAndLossOnlyMode) {
  Harness h;
  const int64_t N = 4, V = 6, Vp = 8;
  const std::vector<float> x0 = randn(N * Vp, 91);
  std::vector<int32_t> tgt = {1, -1, 5, -100};
  std::vector<float> x = x0, l0(N), l1(N, 7.0f);
  h->classifier_forward_backward(tf(l0, {N}), tf(x, {N, Vp}), ti(tgt, {N}), V, 0.0f);
  EXPECT_TRUE(bit_equal(x, x0));  // evaluation leaves logits as they were
  EXPECT_EQ(l0[1], 0.0f);
  EXPECT_EQ(l0[3], 0.0f);
  EXPECT_GT(l0[0], 0.0f);
  h->classifier_forward_backward(tf(l1, {N}), tf(x, {N, Vp}), ti(tgt, {N}), V, 0.25f);
  EXPECT_TRUE(bit_equal(l0, l1));  // same losses with or without the gradient
  for (int64_t v = 0; v < Vp; ++v) {
    EXPECT_EQ(x[1 * Vp + v], 0.0f);
    EXPECT_EQ(x[3 * Vp + v], 0.0f);
  }
  // a real row's gradient sums to zero over the vocabulary
  double s = 0.0;
  for (int64_t v = 0; v < Vp; ++v) s += x[v];
  EXPECT_NEAR(s, 0.0, 1e-7);
}

// (bitwise repeats at ordinary logits: OpTable.classifier_test)
TEST(Classifier, StableForLargeLogitsAndDeterministic) {
  Harness h;
  const int64_t N = 16, V = 100, Vp = 128;
  std::vector<float> x = randn(N * Vp, 93, 1.0f);
  for (float& v : x) v += 1000.0f;  // exp would overflow without the max shift
  std::vector<int32_t> tgt = randint(N, V, 94);
  std::vector<float> a = x, b = x, la(N), lb(N);
  h->classifier_forward_backward(tf(la, {N}), tf(a, {N, Vp}), ti(tgt, {N}), V, 0.5f);
  h->classifier_forward_backward(tf(lb, {N}), tf(b, {N, Vp}), ti(tgt, {N}), V, 0.5f);
  for (float l : la) EXPECT_TRUE(std::isfinite(l));
  for (float g : a) EXPECT_TRUE(std::isfinite(g));
  EXPECT_TRUE(bit_equal(a, b));
  EXPECT_TRUE(bit_equal(la, lb));
}

TEST(Classifier, RejectsTargetsPastV) {
  Harness h;
  std::vector<float> x(8), l(1);
  std::vector<int32_t> tgt = {6};
  EXPECT_THROW(h->classifier_forward_backward(tf(l, {1}), tf(x, {1, 8}), ti(tgt, {1}), 6, 1.0f),
               InternalError);
}

TEST(Embedding, HandComputed) {
  Harness h;
  std::vector<int32_t> tok = {1, 0};
  std::vector<float> wte = {1, 2, 10, 20}, wpe = {100, 200, 300, 400, 500, 600}, out(4);
  h->embedding_forward(tf(out, {1, 2, 2}), ti(tok, {1, 2}), tf(wte, {2, 2}), tf(wpe, {3, 2}));
  EXPECT_EQ(out, (std::vector<float>{110, 220, 301, 402}));
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

TEST(Gelu, KnownValues) {
  Harness h;
  std::vector<float> x = {0.0f, 1.0f, -1.0f, 3.0f}, out(4);
  h->gelu_forward(tf(out, {4}), tf(x, {4}));
  auto ref = [](double v) {
    return 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
  };
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_NEAR(out[1], 0.8411920, 1e-6);  // tanh-approx GELU(1)
  EXPECT_NEAR(out[2], -0.1588080, 1e-6);
  EXPECT_NEAR(out[3], ref(3.0), 1e-6);
}

TEST(LayerNorm, HandComputed) {
  Harness h;
  std::vector<float> x = {1, 2, 3}, w = {1, 1, 1}, b = {0, 0, 0}, out(3), mean(1), rstd(1);
  h->layernorm_forward(tf(out, {1, 3}), tf(mean, {1}), tf(rstd, {1}), tf(x, {1, 3}), tf(w, {3}),
                       tf(b, {3}));
  const double r = 1.0 / std::sqrt(2.0 / 3.0 + 1e-5);
  EXPECT_FLOAT_EQ(mean[0], 2.0f);
  EXPECT_NEAR(rstd[0], r, 1e-6);
  EXPECT_NEAR(out[0], -r, 1e-6);
  EXPECT_NEAR(out[1], 0.0, 1e-6);
  EXPECT_NEAR(out[2], r, 1e-6);
  // weight and bias
  w = {2, 2, 2};
  b = {1, 1, 1};
  h->layernorm_forward(tf(out, {1, 3}), tf(mean, {1}), tf(rstd, {1}), tf(x, {1, 3}), tf(w, {3}),
                       tf(b, {3}));
  EXPECT_NEAR(out[2], 2 * r + 1, 1e-5);
}

TEST(Matmul, HandComputed2x2) {
  Harness h;
  std::vector<float> x = {1, 2, 3, 4}, w = {5, 6, 7, 8}, bias = {1, 2}, out(4);
  h->matmul_forward(tf(out, {2, 2}), tf(x, {2, 2}), tf(w, {2, 2}), tf(bias, {2}));
  EXPECT_EQ(out, (std::vector<float>{18, 25, 40, 55}));
  h->matmul_forward(tf(out, {2, 2}), tf(x, {2, 2}), tf(w, {2, 2}), Tensor());
  EXPECT_EQ(out, (std::vector<float>{17, 23, 39, 53}));
}

TEST(Matmul, RejectsMismatchedShapes) {
  Harness h;
  std::vector<float> x(6), w(4), out(4);
  EXPECT_THROW(h->matmul_forward(tf(out, {2, 2}), tf(x, {2, 3}), tf(w, {2, 2}), Tensor()),
               InternalError);
}

TEST(Residual, AddsAndAllowsInPlace) {
  Harness h;
  std::vector<float> a = {1, 2, 3, 4}, b = {10, 20, 30, 40}, out(4);
  h->residual_forward(tf(out, {2, 2}), tf(a, {2, 2}), tf(b, {2, 2}));
  EXPECT_EQ(out, (std::vector<float>{11, 22, 33, 44}));
  h->residual_forward(tf(a, {2, 2}), tf(a, {2, 2}), tf(b, {2, 2}));
  EXPECT_EQ(a, out);
}

TEST(Residual, RejectsMismatchedSizes) {
  Harness h;
  std::vector<float> a(4), b(3), out(4);
  EXPECT_THROW(h->residual_forward(tf(out, {4}), tf(a, {4}), tf(b, {3})), InternalError);
}

}  // namespace
}  // namespace ft::test
