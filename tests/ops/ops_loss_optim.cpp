// Op table entries: the fused classifier (softmax + cross-entropy + gradient in place), the
// sum of squares (gradient norm), the fused multi-slice AdamW and the weights' EMA.
#include <cmath>

#include "ops/op_table.h"

namespace ft::ops {

namespace {

Dims cls(int64_t B, int64_t T, int64_t Vp, int64_t V) {
  Dims d;
  d.B = B, d.T = T, d.Vp = Vp, d.V = V;
  return d;
}
Dims flat(int64_t n) {
  Dims d;
  d.n = n;
  return d;
}

float dloss_of(const Dims& d) { return 1.f / static_cast<float>(d.B * d.T); }

// Evaluation first (dloss = 0: losses only, logits must stay as they were), then training
// (the gradient overwrites the logits).
void classifier_eval(OpRun& r) {
  r.be.classifier_forward_backward(r.t("eval_losses"), r.t("logits"), r.t("targets"), r.d.V, 0.f);
}
void classifier_train(OpRun& r) {
  r.be.classifier_forward_backward(r.t("losses"), r.t("logits"), r.t("targets"), r.d.V,
                                   dloss_of(r.d));
}

// GPT-2 124M's parameter count, padded vocabulary (124,475,904)
constexpr int64_t kParams = 124475904;

std::vector<ParamSlice> adamw_slices(int64_t n) {
  if (n == kParams) return {{0, n / 2, true}, {n / 2, n - n / 2, false}};
  // decay on/off, a one-element slice, and the last 1000 elements in no slice
  return {{0, 30000, true}, {30000, 1, false}, {30001, 20000, true}, {50001, n - 51001, false}};
}

AdamWStep adamw_step() {
  AdamWStep s;
  s.lr = 1e-3f;
  s.weight_decay = 0.1f;
  s.grad_scale = 0.7f;
  s.t = 5;
  return s;
}

}  // namespace

void add_loss_optim_ops(std::vector<OpCase>& t) {
  {
    OpCase c;
    c.name = "classifier";
    c.seed = 20;
    // a short row (Vp=1088: a partial last pass), GPT-2's 50304 columns (fp32: the CUDA
    // backend falls back to two-pass there), more rows than any GPU has SMs (each staged
    // block works through several rows), and a tiny odd vocabulary
    c.shapes = {cls(3, 17, 1088, 1050), cls(3, 17, 50304, 50257), cls(20, 50, 1088, 1050),
                cls(5, 150, 8192, 8000), cls(2, 5, 16, 7)};  // CUDA: Vp in whole 16-byte packs
    c.make = [](const Dims& d, Precision, Gen& g, HostSet& hs) {
      const int64_t N = d.B * d.T;
      hs.inout("logits", {d.B, d.T, d.Vp}, g.randn(N * d.Vp, 3.f));
      auto tgt = g.randint(N, static_cast<int32_t>(d.V));
      tgt[3] = -1;  // ignored targets: loss 0, gradient 0
      if (N > 20) tgt[20] = -100;
      if (N > 7) tgt[7] = static_cast<int32_t>(d.V - 1);
      hs.tokens("targets", {d.B, d.T}, tgt);
      hs.out("eval_losses", {d.B, d.T}, Store::f32);
      hs.out("losses", {d.B, d.T}, Store::f32);
      hs.in("closs", {d.B, d.T}, std::vector<float>(N, dloss_of(d)), Store::f32);  // grad mode
    };
    c.run = [](OpRun& r) {
      classifier_eval(r);
      r.values["logits_after_eval"] = r.read("logits");
      classifier_train(r);
    };
    c.timed = classifier_train;
    c.checks = {{"eval_losses", tol(1e-5)}, {"losses", tol(1e-5)}, {"logits", tol(1e-5)}};
    c.extra = [](const Dims& d, Precision, const HostSet& in, const Values& got) {
      std::vector<std::string> f;
      const auto& after_eval = got.at("logits_after_eval");
      const HostBuf* x = in.find("logits");
      for (size_t i = 0; i < after_eval.size(); ++i)
        if (after_eval[i] != x->f[i]) {
          f.push_back("evaluation (dloss = 0) changed the logits");
          break;
        }
      const auto& grad = got.at("logits");
      const HostBuf* tgt = in.find("targets");
      for (int64_t r = 0; r < d.B * d.T; ++r) {
        const bool ignored = tgt->i[r] < 0;
        if (ignored && (got.at("losses")[r] != 0 || got.at("eval_losses")[r] != 0))
          f.push_back("ignored target row " + std::to_string(r) + " has a loss");
        for (int64_t c = ignored ? 0 : d.V; c < d.Vp; ++c)
          if (grad[r * d.Vp + c] != 0) {
            f.push_back("row " + std::to_string(r) + " column " + std::to_string(c) +
                        (ignored ? " (ignored target)" : " (padding)") + " has a gradient");
            break;
          }
      }
      return f;
    };
    c.grad_shapes = {cls(2, 5, 9, 7)};
    c.grad.forward = [](OpRun& r) {  // dloss = 0: losses only, logits untouched
      r.be.classifier_forward_backward(r.t("losses"), r.t("logits"), r.t("targets"), r.d.V, 0.f);
    };
    c.grad.fwd_out = "losses";
    c.grad.cotangent = "closs";
    c.grad.wrt = {{"logits", "logits"}};
    c.grad.atol = 5e-4;
    c.perf_shapes = {cls(8, 1024, 50304, 50257), cls(16, 1024, 50304, 50257)};
    // one read and one write of the logits: what the staged kernel moves
    c.work = [](const Dims& d, size_t a) { return Work{0, 2.0 * d.B * d.T * d.Vp * a}; };
    t.push_back(c);
  }
  {
    OpCase c;
    c.name = "sum_squares";
    c.seed = 21;
    c.shapes = {flat(int64_t(1) << 20), flat(12345), flat(3)};
    c.make = [](const Dims& d, Precision, Gen& g, HostSet& hs) { hs.in("x", {d.n}, g.randn(d.n)); };
    c.run = [](OpRun& r) { r.values["sum"] = {r.be.sum_squares(r.t("x"))}; };
    c.checks = {{"sum", {1e-5, 1e-5, 1e-5}}};  // from the same (rounded) values: fp32 sums
    c.perf_shapes = {flat(kParams)};
    c.work = [](const Dims& d, size_t a) { return Work{0, 1.0 * d.n * a}; };
    t.push_back(c);
  }
  {
    // bf16/f16: params are the fp32 master weights rounded; the reference (fp32) updates the
    // master weights as its params. The update is ~1e-3 of the weight, so the change is
    // compared, not the value.
    OpCase c;
    c.name = "adamw";
    c.seed = 22;
    c.shapes = {flat(70001)};
    c.make = [](const Dims& d, Precision p, Gen& g, HostSet& hs) {
      const int64_t n = d.n;
      auto master = g.randn(n, 0.5f);
      hs.inout("params", {n}, master);  // rounded by the harness in bf16/f16
      if (p != Precision::fp32) hs.inout("master", {n}, master, Store::f32);
      hs.in("grads", {n}, g.randn(n, 0.01f));
      hs.inout("m", {n}, g.randn(n, 0.01f), Store::f32);
      hs.inout("v", {n}, g.randu(n, 1e-6f, 1e-4f), Store::f32);
    };
    c.run = [](OpRun& r) {
      const auto sl = adamw_slices(r.d.n);
      const bool master = r.has("master");
      if (master && r.act == DType::f32)  // the reference of a mixed-precision run
        r.be.adamw_update(r.t("master"), Tensor(), r.t("grads"), r.t("m"), r.t("v"), sl, adamw_step());
      else
        r.be.adamw_update(r.t("params"), master ? r.t("master") : Tensor(), r.t("grads"), r.t("m"),
                          r.t("v"), sl, adamw_step());
    };
    const Tol change = {1e-3, 1e-3, 1e-3}, moments = {1e-6, 1e-6, 1e-6};
    c.checks = {{"params", change, "", true, 1u << 0}, {"master", change, "", true},
                {"m", moments}, {"v", moments}};
    c.extra = [](const Dims& d, Precision p, const HostSet& in, const Values& got) {
      std::vector<std::string> f;
      const auto& params = got.at("params");
      if (p != Precision::fp32) {  // params are the master weights rounded
        const DType act = act_dtype(p);
        const auto& master = got.at("master");
        for (size_t i = 0; i < params.size(); ++i)
          if (params[i] != round_to(act, static_cast<float>(master[i]))) {
            f.push_back("params[" + std::to_string(i) + "] is not the rounded master weight");
            break;
          }
      }
      const HostBuf* p0 = in.find("params");
      for (int64_t i = d.n - 1000; i < d.n; ++i)
        if (params[i] != p0->f[i]) {
          f.push_back("element " + std::to_string(i) + " (in no slice) changed");
          break;
        }
      return f;
    };
    c.perf_shapes = {flat(kParams)};
    c.work = [](const Dims& d, size_t a) {
      return Work{0, d.n * (3.0 * a + 16.0 + (a == 4 ? 0.0 : 8.0))};
    };
    t.push_back(c);
  }
  {
    // The EMA of the weights: f32 average of f32 weights (--ema-decay's update).
    OpCase c;
    c.name = "ema_update";
    c.seed = 23;
    c.shapes = {flat(70001), flat(3)};
    c.make = [](const Dims& d, Precision, Gen& g, HostSet& hs) {
      hs.inout("ema", {d.n}, g.randn(d.n, 0.5f), Store::f32);
      hs.in("src", {d.n}, g.randn(d.n, 0.5f), Store::f32);
    };
    c.run = [](OpRun& r) { r.be.ema_update(r.t("ema"), r.t("src"), 0.995f); };
    c.checks = {{"ema", {1e-6, 1e-6, 1e-6}}};  // f32 in every precision
    c.perf_shapes = {flat(kParams)};
    c.work = [](const Dims& d, size_t) { return Work{0, 12.0 * d.n}; };
    t.push_back(c);
  }
  {
    // decay 0: the converting copy that swaps weights in (EMA -> params in the parameter
    // dtype) and starts the EMA. `out` starts as NaN: it must not be read.
    OpCase c;
    c.name = "ema_copy";
    c.seed = 24;
    c.shapes = {flat(70001), flat(5)};
    c.make = [](const Dims& d, Precision, Gen& g, HostSet& hs) {
      hs.in("src", {d.n}, g.randn(d.n, 0.5f), Store::f32);
      hs.out("out", {d.n});
    };
    c.run = [](OpRun& r) { r.be.ema_update(r.t("out"), r.t("src"), 0.f); };
    // the rounded source, exactly (round to nearest); the table compares CUDA by e < tol
    c.checks = {{"out", tol(1e-12)}};
    c.perf_shapes = {flat(kParams)};
    c.work = [](const Dims& d, size_t a) { return Work{0, (4.0 + a) * d.n}; };
    t.push_back(c);
  }
}

}  // namespace ft::ops
