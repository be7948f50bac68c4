// Op table entries for the recommender head: bpr_forward_backward (fused BPR scoring, loss and
// gradients over a tied item table; evaluation with dloss = 0 first, then training) and
// item_scores (candidate scores for the sampled evaluation protocol).
// Shapes: SASRec's width 50 (not a multiple of 8: the CUDA kernels load scalars) and 64, an
// odd 13; K = 1 and K = 8; padding rows (pos < 0); items repeated across rows, inside a row's
// negatives and between a positive and another row's negative (scatter collisions), and a
// 20-item table where nearly every item collides. Perf at MovieLens-1M size: N = 128*200 rows,
// C = 64, K = 1, 3706 items (padded to 3712).
#include <cmath>

#include "ops/op_table.h"

namespace ft::ops {

namespace {

Dims bpr(int64_t B, int64_t T, int64_t C, int64_t Vp, int64_t K, int64_t n = 0) {
  Dims d;
  d.B = B, d.T = T, d.C = C, d.Vp = Vp, d.K = K, d.n = n;
  return d;
}

// Linear in dloss; 0.5 keeps dE's change well above its small starting values in bf16.
constexpr float kDloss = 0.5f;

void bpr_inputs(const Dims& d, Gen& g, HostSet& hs) {
  const int64_t N = d.B * d.T, C = d.C, Vp = d.Vp, K = d.K;
  // scale 0.3: x = h . (E[pos] - E[neg]) is of order 1, the sigmoid neither flat nor saturated
  hs.in("h", {N, C}, g.randn(N * C, 0.3f));
  hs.in("E", {Vp, C}, g.randn(Vp * C, 0.3f));
  auto pos = g.randint(N, static_cast<int32_t>(Vp));
  auto neg = g.randint(N * K, static_cast<int32_t>(Vp));
  if (N > 3) pos[3] = -1;       // padding rows
  pos[N - 1] = -1;
  if (N > 2) pos[2] = pos[1];   // the same positive in two rows
  if (N > 2) neg[2 * K] = pos[1];  // one row's negative is another's positive
  if (N > 5 && K > 1) neg[5 * K + 1] = neg[5 * K];  // a negative twice in one row
  if (N > 5 && K > 2) neg[5 * K + 2] = neg[5 * K];  // ... three times
  hs.tokens("pos", {N}, pos);
  hs.tokens("neg", {N, K}, neg);
  hs.out("eval_losses", {N}, Store::f32);
  hs.out("losses", {N}, Store::f32);
  hs.out("dh", {N, C});
  // accumulated: small random start, so that += is checked (an overwrite loses it)
  hs.inout("dE", {Vp, C}, g.randn(Vp * C, 0.01f));
  hs.in("closs", {N}, std::vector<float>(N, kDloss), Store::f32);  // grad mode's cotangent
}

void bpr_eval(OpRun& r) {
  r.be.bpr_forward_backward(r.t("eval_losses"), r.t("dh"), r.t("dE"), r.t("h"), r.t("E"),
                            r.t("pos"), r.t("neg"), 0.f);
}
void bpr_train(OpRun& r) {
  r.be.bpr_forward_backward(r.t("losses"), r.t("dh"), r.t("dE"), r.t("h"), r.t("E"), r.t("pos"),
                            r.t("neg"), kDloss);
}

}  // namespace

void add_bpr_ops(std::vector<OpCase>& t) {
  {
    OpCase c;
    c.name = "bpr";
    c.seed = 31;
    c.shapes = {bpr(2, 7, 50, 40, 1),   bpr(3, 10, 64, 20, 8),  bpr(4, 50, 64, 3712, 1),
                bpr(2, 33, 50, 500, 8), bpr(1, 9, 13, 11, 3),   bpr(8, 200, 50, 3712, 8)};
    c.make = [](const Dims& d, Precision, Gen& g, HostSet& hs) { bpr_inputs(d, g, hs); };
    c.run = [](OpRun& r) {
      bpr_eval(r);
      r.values["dE_after_eval"] = r.read("dE");
      r.values["dh_after_eval"] = r.read("dh");
      bpr_train(r);
    };
    c.timed = bpr_train;
    c.checks = {{"eval_losses", tol(1e-5)}, {"losses", tol(1e-5)}, {"dh", tol(1e-5)},
                {"dE", tol(1e-5)}};
    c.extra = [](const Dims& d, Precision, const HostSet& in, const Values& got) {
      std::vector<std::string> f;
      const int64_t N = d.B * d.T, C = d.C;
      const HostBuf* dE0 = in.find("dE");
      const auto& dE_eval = got.at("dE_after_eval");
      for (size_t i = 0; i < dE_eval.size(); ++i)
        if (dE_eval[i] != dE0->f[i]) {
          f.push_back("evaluation (dloss = 0) changed dE");
          break;
        }
      for (double v : got.at("dh_after_eval"))
        if (!std::isnan(v)) {
          f.push_back("evaluation (dloss = 0) wrote dh");
          break;
        }
      const HostBuf* pos = in.find("pos");
      for (int64_t n = 0; n < N; ++n) {
        if (pos->i[n] >= 0) continue;
        if (got.at("losses")[n] != 0 || got.at("eval_losses")[n] != 0)
          f.push_back("padding row " + std::to_string(n) + " has a loss");
        for (int64_t c = 0; c < C; ++c)
          if (got.at("dh")[n * C + c] != 0) {
            f.push_back("padding row " + std::to_string(n) + " has a gradient dh");
            break;
          }
      }
      return f;
    };
    c.grad_shapes = {bpr(1, 6, 5, 7, 3), bpr(2, 3, 4, 5, 1)};
    c.grad.forward = bpr_eval;  // dloss = 0: losses only
    c.grad.fwd_out = "eval_losses";
    c.grad.cotangent = "closs";
    c.grad.wrt = {{"h", "dh"}, {"E", "dE"}};
    c.grad.atol = 5e-4;
    c.perf_shapes = {bpr(128, 200, 64, 3712, 1), bpr(128, 200, 64, 3712, 8)};
    // every row reads h and K+1 item rows twice (scores, dh), writes dh; the scatter reads h
    // and writes an item row per slot
    c.work = [](const Dims& d, size_t a) {
      const double N = double(d.B) * d.T, S = double(d.K) + 1;
      return Work{0, N * d.C * a * (2.0 + 2.0 * S + 2.0 * S)};
    };
    t.push_back(c);
  }
  {
    OpCase c;
    c.name = "item_scores";
    c.seed = 32;
    // n = M candidates a row: 101 for the sampled protocol (1 positive + 100 negatives)
    c.shapes = {bpr(2, 5, 50, 30, 0, 7), bpr(3, 4, 64, 3712, 0, 101), bpr(1, 6, 13, 9, 0, 3),
                bpr(64, 1, 50, 3712, 0, 101)};
    c.make = [](const Dims& d, Precision, Gen& g, HostSet& hs) {
      const int64_t N = d.B * d.T, M = d.n;
      hs.in("h", {N, d.C}, g.randn(N * d.C, 0.3f));
      hs.in("E", {d.Vp, d.C}, g.randn(d.Vp * d.C, 0.3f));
      auto items = g.randint(N * M, static_cast<int32_t>(d.Vp));
      items[0] = 0;
      items[N * M - 1] = static_cast<int32_t>(d.Vp - 1);  // both ends of the table
      hs.tokens("items", {N, M}, items);
      hs.out("scores", {N, M}, Store::f32);
    };
    c.run = [](OpRun& r) { r.be.item_scores(r.t("scores"), r.t("h"), r.t("E"), r.t("items")); };
    c.checks = {{"scores", tol(1e-5)}};
    c.perf_shapes = {bpr(6040, 1, 64, 3712, 0, 101)};  // every ML-1M user, sampled protocol
    c.work = [](const Dims& d, size_t a) {
      return Work{2.0 * d.B * d.T * d.n * d.C, double(d.B) * d.T * d.n * d.C * a};
    };
    t.push_back(c);
  }
}

}  // namespace ft::ops
