// Op table entries: embedding, layernorm, GELU, residual add, attention (forward and
// backward of each). Shapes are the ones the per-op CPU and GPU tests used before the table,
// plus a GPT-2 width where those had none; perf shapes are GPT-2 124M (B=8/16, T=1024, C=768).
#include <cmath>

#include "ops/op_table.h"

namespace ft::ops {

namespace {

constexpr int64_t kT = 1024, kC = 768, kNH = 12, kVp = 50304;

std::vector<Dims> gpt2_rows(int64_t width_mult = 1) {
  std::vector<Dims> v;
  for (int64_t B : {8, 16}) {
    Dims d;
    d.B = B * kT;
    d.C = kC * width_mult;
    v.push_back(d);
  }
  return v;
}

// ---- embedding -------------------------------------------------------------------------------

std::vector<Dims> embedding_shapes() {
  std::vector<Dims> v;
  auto add = [&](int64_t B, int64_t T, int64_t C, int64_t Vp, int64_t maxT) {
    Dims d;
    d.B = B, d.T = T, d.C = C, d.Vp = Vp, d.maxT = maxT;
    v.push_back(d);
  };
  add(3, 37, 64, 96, 48);    // GPU test: repeated tokens, maxT > T
  add(2, 5, 40, 3, 5);       // C not a multiple of the column block, 3 tokens for 10 places
  add(2, 64, 768, 1024, 1024);  // GPT-2 width
  return v;
}

void embedding_inputs(const Dims& d, Gen& g, HostSet& hs, bool backward) {
  auto tok = g.randint(d.B * d.T, static_cast<int32_t>(d.Vp));
  if (tok.size() > 40) tok[5] = tok[9] = tok[40] = 7 % d.Vp;  // scatter-add collisions
  else if (tok.size() > 7) tok[3] = tok[7];
  hs.tokens("tokens", {d.B, d.T}, tok);
  hs.in("wte", {d.Vp, d.C}, g.randn(d.Vp * d.C));
  hs.in("wpe", {d.maxT, d.C}, g.randn(d.maxT * d.C));
  hs.out("out", {d.B, d.T, d.C});
  if (!backward) return;
  hs.in("dout", {d.B, d.T, d.C}, g.randn(d.B * d.T * d.C));
  // gradients accumulate: start from random values
  hs.inout("dwte", {d.Vp, d.C}, g.randn(d.Vp * d.C));
  hs.inout("dwpe", {d.maxT, d.C}, g.randn(d.maxT * d.C));
}

void embedding_fwd(OpRun& r) { r.be.embedding_forward(r.t("out"), r.t("tokens"), r.t("wte"), r.t("wpe")); }

// ---- layernorm ---------------------------------------------------------------------------------

std::vector<Dims> layernorm_shapes() {
  // N = 77: a few partial rows per parameter; 3000: more than the reduction's 32 row slices
  // per block. C = 64 leaves most lanes idle, 768 fills 3 (bf16) or 6 (fp32) packs per
  // lane, 1600 is 8 packs with the last partly idle, 2560 the loop kernel; 132 x 72: odd
  // widths in packs (CUDA needs C to be a whole number of 16-byte packs).
  std::vector<Dims> v;
  for (auto [N, C] : {std::pair<int64_t, int64_t>{77, 64}, {77, 768}, {3000, 768}, {77, 1600},
                      {77, 2560}, {132, 72}}) {
    Dims d;
    d.B = N, d.C = C;
    v.push_back(d);
  }
  return v;
}

void layernorm_inputs(const Dims& d, Gen& g, HostSet& hs, bool backward) {
  const int64_t N = d.B * d.T, C = d.C;
  auto x = g.randn(N * C, 2.f);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) x[n * C + c] += 0.5f * n / N;  // nonzero row means
  hs.in("x", {N, C}, x);
  hs.in("w", {C}, g.randu(C, 0.5f, 1.5f));
  hs.in("b", {C}, g.randn(C, 0.1f));
  hs.out("out", {N, C});
  hs.out("mean", {N}, Store::f32);
  hs.out("rstd", {N}, Store::f32);
  if (!backward) return;
  hs.in("dout", {N, C}, g.randn(N * C));
  // all three accumulate (dinp is the residual stream's gradient)
  hs.inout("dx", {N, C}, g.randn(N * C));
  hs.inout("dw", {C}, g.randn(C));
  hs.inout("db", {C}, g.randn(C));
}

void layernorm_fwd(OpRun& r) {
  r.be.layernorm_forward(r.t("out"), r.t("mean"), r.t("rstd"), r.t("x"), r.t("w"), r.t("b"));
}
void layernorm_bwd(OpRun& r) {
  r.be.layernorm_backward(r.t("dx"), r.t("dw"), r.t("db"), r.t("dout"), r.t("x"), r.t("w"),
                          r.t("mean"), r.t("rstd"));
}

// ---- attention ------------------------------------------------------------------------------

std::vector<Dims> attention_shapes() {
  std::vector<Dims> v;
  auto add = [&](int64_t B, int64_t T, int64_t NH, int64_t HS) {
    Dims d;
    d.B = B, d.T = T, d.NH = NH, d.C = NH * HS;
    v.push_back(d);
  };
  add(2, 150, 3, 64);  // partial last tile
  add(1, 128, 2, 64);  // exact tiles
  add(2, 70, 2, 32);
  add(1, 65, 1, 128);
  add(2, 256, 3, 64);  // shapes cuDNN 9 runs forward and backward (bf16/f16)
  add(1, 128, 2, 32);
  add(1, 384, 1, 128);
  add(3, 17, 2, 32);   // odd length, 3 sequences (CUDA: head sizes 32, 64, 128)
  return v;
}

void attention_inputs(const Dims& d, Gen& g, HostSet& hs, bool backward) {
  hs.in("qkv", {d.B, d.T, 3 * d.C}, g.randn(d.B * d.T * 3 * d.C));
  hs.out("out", {d.B, d.T, d.C});
  if (!backward) return;
  hs.in("dout", {d.B, d.T, d.C}, g.randn(d.B * d.T * d.C));
  hs.out("dqkv", {d.B, d.T, 3 * d.C});  // overwritten: NaN before must not leak through
}

Tensor attention_saved(OpRun& r) {
  return r.scratch("saved", r.be.attention_saved_bytes(r.d.attention(), precision_of(r.act)));
}
void attention_fwd(OpRun& r) {
  r.be.attention_forward(r.t("out"), attention_saved(r), r.t("qkv"), static_cast<int>(r.d.NH));
}
void attention_bwd(OpRun& r) {
  r.be.attention_backward(r.t("dqkv"), r.t("dout"), r.t("qkv"), r.t("out"), attention_saved(r),
                          static_cast<int>(r.d.NH));
}
double attention_flops(const Dims& d) { return 4.0 * d.B * d.T * d.T * d.C / 2; }  // causal half

std::vector<Dims> attention_perf() {
  std::vector<Dims> v;
  for (int64_t B : {8, 16}) {
    Dims d;
    d.B = B, d.T = kT, d.C = kC, d.NH = kNH;
    v.push_back(d);
  }
  return v;
}

// ---- elementwise ----------------------------------------------------------------------------

std::vector<Dims> flat(std::initializer_list<int64_t> ns) {
  std::vector<Dims> v;
  for (int64_t n : ns) {
    Dims d;
    d.n = n;
    v.push_back(d);
  }
  return v;
}

}  // namespace

void add_nn_ops(std::vector<OpCase>& t) {
  {
    OpCase c;
    c.name = "embedding_fwd";
    c.seed = 1;
    c.shapes = embedding_shapes();
    c.make = [](const Dims& d, Precision, Gen& g, HostSet& hs) { embedding_inputs(d, g, hs, false); };
    c.run = embedding_fwd;
    c.checks = {{"out", tol(1e-6)}};
    c.perf_shapes = {};
    for (int64_t B : {8, 16}) {
      Dims d;
      d.B = B, d.T = kT, d.C = kC, d.Vp = kVp, d.maxT = kT;
      c.perf_shapes.push_back(d);
    }
    c.work = [](const Dims& d, size_t a) { return Work{0, 3.0 * d.B * d.T * d.C * a}; };
    t.push_back(c);

    c.name = "embedding_bwd";
    c.make = [](const Dims& d, Precision, Gen& g, HostSet& hs) { embedding_inputs(d, g, hs, true); };
    c.run = [](OpRun& r) {
      r.be.embedding_backward(r.t("dwte"), r.t("dwpe"), r.t("dout"), r.t("tokens"));
    };
    c.checks = {{"dwte", tol(1e-6)}, {"dwpe", tol(1e-6)}};
    Dims g;
    g.B = 2, g.T = 5, g.C = 8, g.Vp = 4, g.maxT = 7;
    c.grad_shapes = {g};
    c.grad.forward = embedding_fwd;
    c.grad.fwd_out = "out";
    c.grad.cotangent = "dout";
    c.grad.wrt = {{"wte", "dwte"}, {"wpe", "dwpe"}};
    c.work = [](const Dims& d, size_t a) { return Work{0, 4.0 * d.B * d.T * d.C * a}; };
    t.push_back(c);
  }
  {
    OpCase c;
    c.name = "layernorm_fwd";
    c.seed = 2;
    c.shapes = layernorm_shapes();
    c.make = [](const Dims& d, Precision, Gen& g, HostSet& hs) { layernorm_inputs(d, g, hs, false); };
    c.run = layernorm_fwd;
    // the statistics are fp32 from the (rounded) inputs in every precision
    c.checks = {{"out", tol(1e-5)}, {"mean", {1e-5, 1e-5, 1e-5}}, {"rstd", {1e-5, 1e-5, 1e-5}}};
    c.perf_shapes = gpt2_rows();
    c.work = [](const Dims& d, size_t a) { return Work{0, 2.0 * d.B * d.C * a}; };
    t.push_back(c);

    c.name = "layernorm_bwd";
    c.make = [](const Dims& d, Precision, Gen& g, HostSet& hs) { layernorm_inputs(d, g, hs, true); };
    c.run = [](OpRun& r) {
      layernorm_fwd(r);  // the statistics the backward reads come from this backend
      layernorm_bwd(r);
    };
    c.timed = layernorm_bwd;
    c.checks = {{"dx", tol(1e-5)}, {"dw", tol(1e-5)}, {"db", tol(1e-5)}};
    Dims g;
    g.B = 10, g.C = 8;
    c.grad_shapes = {g};
    c.grad.forward = layernorm_fwd;
    c.grad.fwd_out = "out";
    c.grad.cotangent = "dout";
    c.grad.wrt = {{"x", "dx"}, {"w", "dw"}, {"b", "db"}};
    c.work = [](const Dims& d, size_t a) { return Work{0, 4.0 * d.B * d.C * a}; };
    t.push_back(c);
  }
  {
    OpCase c;
    c.name = "gelu_fwd";
    c.seed = 3;
    c.shapes = flat({4096, 1003, 4 * 768 * 64});  // 1003: a tail past the last full pack
    c.make = [](const Dims& d, Precision, Gen& g, HostSet& hs) {
      hs.in("x", {d.n}, g.randn(d.n, 2.f));
      hs.out("out", {d.n});
      hs.in("dout", {d.n}, g.randn(d.n));
      hs.out("dx", {d.n});  // overwritten
    };
    c.run = [](OpRun& r) { r.be.gelu_forward(r.t("out"), r.t("x")); };
    c.checks = {{"out", tol(1e-5)}};
    c.perf_shapes = flat({8 * kT * 4 * kC, 16 * kT * 4 * kC});
    c.work = [](const Dims& d, size_t a) { return Work{0, 2.0 * d.n * a}; };
    t.push_back(c);

    auto fwd = c.run;
    c.name = "gelu_bwd";
    c.run = [](OpRun& r) { r.be.gelu_backward(r.t("dx"), r.t("x"), r.t("dout")); };
    c.checks = {{"dx", tol(1e-5)}};
    c.grad_shapes = flat({80});
    c.grad.forward = fwd;
    c.grad.fwd_out = "out";
    c.grad.cotangent = "dout";
    c.grad.wrt = {{"x", "dx"}};
    c.work = [](const Dims& d, size_t a) { return Work{0, 3.0 * d.n * a}; };
    t.push_back(c);
  }
  {
    OpCase c;
    c.name = "residual";
    c.seed = 4;
    c.shapes = flat({8192, 77, 768 * 64 + 5});
    c.make = [](const Dims& d, Precision, Gen& g, HostSet& hs) {
      hs.in("a", {d.n}, g.randn(d.n));
      hs.in("b", {d.n}, g.randn(d.n));
      hs.out("out", {d.n});
    };
    c.run = [](OpRun& r) { r.be.residual_forward(r.t("out"), r.t("a"), r.t("b")); };
    c.checks = {{"out", tol(1e-7)}};
    c.perf_shapes = flat({8 * kT * kC, 16 * kT * kC});
    c.work = [](const Dims& d, size_t a) { return Work{0, 3.0 * d.n * a}; };
    t.push_back(c);
  }
  {
    OpCase c;
    c.name = "attention_fwd";
    c.seed = 5;
    c.shapes = attention_shapes();
    c.make = [](const Dims& d, Precision, Gen& g, HostSet& hs) { attention_inputs(d, g, hs, false); };
    c.run = attention_fwd;
    c.checks = {{"out", tol(1e-5)}};
    c.perf_shapes = attention_perf();
    c.work = [](const Dims& d, size_t) { return Work{attention_flops(d), 0}; };
    t.push_back(c);

    c.name = "attention_bwd";
    c.make = [](const Dims& d, Precision, Gen& g, HostSet& hs) { attention_inputs(d, g, hs, true); };
    c.run = [](OpRun& r) {
      attention_fwd(r);  // saved state is per backend (probabilities or log-sum-exp)
      attention_bwd(r);
    };
    c.timed = attention_bwd;
    c.checks = {{"dqkv", tol(1e-5)}};
    // cuDNN's backward (bf16/f16 by default) accumulates dQ with atomics; fittrain's own
    // kernel's determinism is GPU_Attention.FittrainPathMatchesAndRepeats's
    c.deterministic = false;
    Dims g;
    g.B = 2, g.T = 5, g.C = 8, g.NH = 2;
    c.grad_shapes = {g};
    c.grad.forward = attention_fwd;
    c.grad.fwd_out = "out";
    c.grad.cotangent = "dout";
    c.grad.wrt = {{"qkv", "dqkv"}};
    c.work = [](const Dims& d, size_t) { return Work{2.5 * attention_flops(d), 0}; };
    t.push_back(c);
  }
}

}  // namespace ft::ops
