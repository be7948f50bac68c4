// Op table entries for the element-wise ops a DiT adds: SiLU, adaLN modulation and the gated
// residual (forward and backward of each). Shapes: C a whole number of 16-byte packs (the
// CUDA vector path), C = 37 (the element path), a DiT-XL width (C = 1152); perf shapes are
// DiT-S (B=64, T=256, C=384) and DiT-XL/2 (B=32, T=256, C=1152), SiLU's their MLP widths.
#include "ops/op_table.h"

namespace ft::ops {

namespace {

Dims btc(int64_t B, int64_t T, int64_t C) {
  Dims d;
  d.B = B, d.T = T, d.C = C;
  return d;
}

std::vector<Dims> flat(std::initializer_list<int64_t> ns) {
  std::vector<Dims> v;
  for (int64_t n : ns) {
    Dims d;
    d.n = n;
    v.push_back(d);
  }
  return v;
}

// [B,T,C] by [B,C]: aligned, ragged (C = 37, T = 9: CUDA's scalar kernels), DiT-XL's width
// (few samples: CUDA's packed backward in narrow column blocks), and many samples of few
// tokens (its widest and middle column blocks on a 132-SM card: backend/cuda/row_broadcast.cuh
// picks them by the block count)
std::vector<Dims> row_broadcast_shapes() {
  return {btc(2, 37, 64), btc(3, 9, 37), btc(1, 200, 1152), btc(264, 2, 128), btc(140, 3, 128)};
}
std::vector<Dims> row_broadcast_perf() { return {btc(64, 256, 384), btc(32, 256, 1152)}; }
double full(const Dims& d) { return static_cast<double>(d.B * d.T * d.C); }

// ---- modulate ---------------------------------------------------------------------------------

void modulate_inputs(const Dims& d, Gen& g, HostSet& hs) {
  const int64_t B = d.B, T = d.T, C = d.C;
  hs.in("x", {B, T, C}, g.randn(B * T * C));
  hs.in("shift", {B, C}, g.randn(B * C));
  hs.in("scale", {B, C}, g.randn(B * C, 0.5f));
  hs.out("out", {B, T, C});
  hs.in("dout", {B, T, C}, g.randn(B * T * C));
  // all three overwrite (activation gradients): NaN before must not leak through
  hs.out("dx", {B, T, C});
  hs.out("dshift", {B, C});
  hs.out("dscale", {B, C});
}

void modulate_fwd(OpRun& r) {
  r.be.modulate_forward(r.t("out"), r.t("x"), r.t("shift"), r.t("scale"));
}

// ---- gated residual -------------------------------------------------------------------------

void gated_inputs(const Dims& d, Gen& g, HostSet& hs) {
  const int64_t B = d.B, T = d.T, C = d.C;
  hs.in("res", {B, T, C}, g.randn(B * T * C));
  hs.in("y", {B, T, C}, g.randn(B * T * C));
  hs.in("gate", {B, C}, g.randn(B * C));
  hs.out("out", {B, T, C});
  hs.in("dout", {B, T, C}, g.randn(B * T * C));
  hs.out("dy", {B, T, C});  // both overwrite
  hs.out("dgate", {B, C});
}

void gated_fwd(OpRun& r) {
  r.be.gated_residual_forward(r.t("out"), r.t("res"), r.t("y"), r.t("gate"));
}

// y (and dy) in window order: grid H x W (T = H*W), window P, shift n
Dims windowed(int64_t B, int64_t H, int64_t W, int64_t C, int64_t window, int64_t shift) {
  Dims d = btc(B, H * W, C);
  d.H = H, d.W = W, d.P = window, d.n = shift;
  return d;
}
void gated_win_fwd(OpRun& r) {
  r.be.gated_residual_forward(r.t("out"), r.t("res"), r.t("y"), r.t("gate"), r.d.window_order());
}

}  // namespace

void add_dit_ops(std::vector<OpCase>& t) {
  {
    OpCase c;
    c.name = "silu_fwd";
    c.seed = 11;
    c.shapes = flat({4096, 1003, 4 * 768 * 64});  // 1003: a tail past the last full pack
    c.make = [](const Dims& d, Precision, Gen& g, HostSet& hs) {
      hs.in("x", {d.n}, g.randn(d.n, 3.f));
      hs.out("out", {d.n});
      hs.in("dout", {d.n}, g.randn(d.n));
      hs.out("dx", {d.n});  // overwritten
    };
    c.run = [](OpRun& r) { r.be.silu_forward(r.t("out"), r.t("x")); };
    c.checks = {{"out", tol(1e-5)}};
    // an MLP's hidden activations: DiT-S (as many as GPT-2 124M's at B=8), DiT-XL/2
    c.perf_shapes = flat({64 * 256 * 4 * 384, 32 * 256 * 4 * 1152});
    c.work = [](const Dims& d, size_t a) { return Work{0, 2.0 * d.n * a}; };
    t.push_back(c);

    auto fwd = c.run;
    c.name = "silu_bwd";
    c.run = [](OpRun& r) { r.be.silu_backward(r.t("dx"), r.t("x"), r.t("dout")); };
    c.checks = {{"dx", tol(1e-5)}};
    c.grad_shapes = flat({80});
    c.grad.forward = fwd;
    c.grad.fwd_out = "out";
    c.grad.cotangent = "dout";
    c.grad.wrt = {{"x", "dx"}};
    c.work = [](const Dims& d, size_t a) { return Work{0, 3.0 * d.n * a}; };
    t.push_back(c);

    // the backward that also recomputes the forward's output (CDEIT's MLP keeps only the
    // pre-activation): both outputs checked, the gradient against finite differences
    c.name = "silu_bwd_recompute";
    c.run = [](OpRun& r) { r.be.silu_backward_recompute(r.t("dx"), r.t("out"), r.t("x"), r.t("dout")); };
    c.checks = {{"dx", tol(1e-5)}, {"out", tol(1e-5)}};
    c.work = [](const Dims& d, size_t a) { return Work{0, 4.0 * d.n * a}; };
    t.push_back(c);

    // ... and that also sums dinp's columns into dbias (accumulating: the fc1 bias gradient
    // CDEIT takes from this pass). Rows x H: whole packs over several row groups, H off the
    // pack (CUDA's unfused fallback), CDEIT's first stage for perf.
    OpCase b;
    b.name = "silu_bwd_recompute_bias";
    b.seed = 15;
    b.shapes = {btc(300, 1, 256), btc(33, 1, 37), btc(1000, 1, 2048)};
    b.make = [](const Dims& d, Precision, Gen& g, HostSet& hs) {
      hs.in("x", {d.B, d.C}, g.randn(d.B * d.C, 3.f));
      hs.in("dout", {d.B, d.C}, g.randn(d.B * d.C));
      hs.out("dx", {d.B, d.C});
      hs.out("out", {d.B, d.C});
      hs.inout("dbias", {d.C}, g.randn(d.C));
    };
    b.run = [](OpRun& r) {
      r.be.silu_backward_recompute(r.t("dx"), r.t("out"), r.t("x"), r.t("dout"), r.t("dbias"), GradWrite::add);
    };
    b.checks = {{"dx", tol(1e-5)}, {"out", tol(1e-5)}, {"dbias", tol(1e-4)}};
    b.perf_shapes = {btc(32 * 4096, 1, 2048)};
    b.work = [](const Dims& d, size_t a) { return Work{0, 4.0 * d.B * d.C * a}; };
    t.push_back(b);

    // ... with out empty: for a model that kept silu(inp) from its forward, dinp and dbias
    // alone (CUDA's kernels without the store of out, every layout and the element path)
    b.name = "silu_bwd_bias";
    b.make = [](const Dims& d, Precision, Gen& g, HostSet& hs) {
      hs.in("x", {d.B, d.C}, g.randn(d.B * d.C, 3.f));
      hs.in("dout", {d.B, d.C}, g.randn(d.B * d.C));
      hs.out("dx", {d.B, d.C});
      hs.inout("dbias", {d.C}, g.randn(d.C));
    };
    b.run = [](OpRun& r) {
      r.be.silu_backward_recompute(r.t("dx"), Tensor(), r.t("x"), r.t("dout"), r.t("dbias"), GradWrite::add);
    };
    b.checks = {{"dx", tol(1e-5)}, {"dbias", tol(1e-4)}};
    b.work = [](const Dims& d, size_t a) { return Work{0, 3.0 * d.B * d.C * a}; };
    t.push_back(b);
  }
  {
    // a SiLU MLP's second product: out = silu(x) wᵀ + bias; act is the room the unfused path
    // writes silu(x) into (not compared: the fused path leaves it alone). Shapes: ragged rows,
    // CUDA's fused path's whole packs (C, OC multiples of 8) with and without bias, CDEIT's
    // first two stages at batch 32 for perf.
    OpCase c;
    c.name = "silu_matmul_fwd";
    c.seed = 16;
    auto mm = [](int64_t B, int64_t T, int64_t C, int64_t OC, bool bias) {
      Dims d = btc(B, T, C);
      d.OC = OC, d.bias = bias, d.silu_product = true;
      return d;
    };
    c.shapes = {mm(2, 37, 64, 40, true), mm(1, 300, 256, 64, true), mm(1, 300, 256, 64, false), mm(3, 5, 37, 9, true)};
    c.make = [](const Dims& d, Precision, Gen& g, HostSet& hs) {
      const int64_t N = d.B * d.T;
      hs.in("x", {d.B, d.T, d.C}, g.randn(N * d.C, 3.f));
      hs.in("w", {d.OC, d.C}, g.randn(d.OC * d.C, 0.1f));
      if (d.bias) hs.in("bias", {d.OC}, g.randn(d.OC));
      hs.out("out", {d.B, d.T, d.OC});
      hs.out("act", {d.B, d.T, d.C});
    };
    c.run = [](OpRun& r) {
      r.be.silu_matmul_forward(r.t("out"), r.t("x"), r.t("w"), r.has("bias") ? r.t("bias") : Tensor(), r.t("act"));
    };
    c.checks = {{"out", tol(1e-5)}};
    c.perf_shapes = {mm(32, 4096, 2048, 512, true), mm(32, 1024, 2048, 512, true)};
    c.work = [](const Dims& d, size_t) { return Work{2.0 * d.B * d.T * d.C * d.OC, 0}; };
    t.push_back(c);
  }
  {
    OpCase c;
    c.name = "modulate_fwd";
    c.seed = 12;
    c.shapes = row_broadcast_shapes();
    c.make = [](const Dims& d, Precision, Gen& g, HostSet& hs) { modulate_inputs(d, g, hs); };
    c.run = modulate_fwd;
    c.checks = {{"out", tol(1e-6)}};
    c.perf_shapes = row_broadcast_perf();
    c.work = [](const Dims& d, size_t a) { return Work{0, 2.0 * full(d) * a}; };
    t.push_back(c);

    c.name = "modulate_bwd";
    c.run = [](OpRun& r) {
      r.be.modulate_backward(r.t("dx"), r.t("dshift"), r.t("dscale"), r.t("dout"), r.t("x"),
                             r.t("scale"));
    };
    // the sums over t are deterministic: the harness's third CUDA run repeats the second
    c.checks = {{"dx", tol(1e-6)}, {"dshift", tol(1e-5)}, {"dscale", tol(1e-5)}};
    c.grad_shapes = {btc(2, 3, 5)};
    c.grad.forward = modulate_fwd;
    c.grad.fwd_out = "out";
    c.grad.cotangent = "dout";
    c.grad.wrt = {{"x", "dx"}, {"shift", "dshift"}, {"scale", "dscale"}};
    c.work = [](const Dims& d, size_t a) { return Work{0, 3.0 * full(d) * a}; };
    t.push_back(c);
  }
  {
    OpCase c;
    c.name = "gated_residual_fwd";
    c.seed = 13;
    c.shapes = row_broadcast_shapes();
    c.make = [](const Dims& d, Precision, Gen& g, HostSet& hs) { gated_inputs(d, g, hs); };
    c.run = gated_fwd;
    c.checks = {{"out", tol(1e-6)}};
    c.perf_shapes = row_broadcast_perf();
    c.work = [](const Dims& d, size_t a) { return Work{0, 3.0 * full(d) * a}; };
    t.push_back(c);

    c.name = "gated_residual_bwd";
    c.run = [](OpRun& r) {
      r.be.gated_residual_backward(r.t("dy"), r.t("dgate"), r.t("dout"), r.t("y"), r.t("gate"));
    };
    c.checks = {{"dy", tol(1e-6)}, {"dgate", tol(1e-5)}};
    c.grad_shapes = {btc(2, 3, 5)};
    c.grad.forward = gated_fwd;
    c.grad.fwd_out = "out";
    c.grad.cotangent = "dout";
    // the residual's gradient is dout itself (no dres output): checked as the input it is
    c.grad.wrt = {{"y", "dy"}, {"gate", "dgate"}, {"res", "dout"}};
    c.work = [](const Dims& d, size_t a) { return Work{0, 3.0 * full(d) * a}; };
    t.push_back(c);

    // y and dy in window order (CDEIT's attention projection, no window copies): shifted and
    // odd-shifted windows on non-square grids, C off the pack (the scalar kernels), one window
    // over the whole grid; perf at CDEIT's first stage (B=32, 64x64 tokens of 512, windows of 16)
    OpCase w = c;
    w.name = "gated_residual_win_fwd";
    w.seed = 14;
    w.shapes = {windowed(2, 8, 12, 64, 4, 2), windowed(3, 4, 6, 37, 2, 1), windowed(1, 16, 16, 128, 16, 0),
                windowed(2, 32, 32, 512, 16, 8)};
    w.run = gated_win_fwd;
    w.checks = {{"out", tol(1e-6)}};
    w.grad = {};
    w.grad_shapes = {};
    w.perf_shapes = {windowed(32, 64, 64, 512, 16, 0)};
    t.push_back(w);

    w.name = "gated_residual_win_bwd";
    w.run = [](OpRun& r) {
      r.be.gated_residual_backward(r.t("dy"), r.t("dgate"), r.t("dout"), r.t("y"), r.t("gate"), r.d.window_order());
    };
    w.checks = {{"dy", tol(1e-6)}, {"dgate", tol(1e-5)}};
    w.grad_shapes = {windowed(1, 4, 4, 3, 2, 1)};
    w.grad = c.grad;
    w.grad.forward = gated_win_fwd;
    t.push_back(w);

    // ... summing dy's columns into the bias gradient of y's product (accumulating), in token
    // order and in window order (CDEIT's fc2 and proj biases)
    for (const bool win : {false, true}) {
      OpCase b = w;
      b.name = win ? "gated_residual_win_bwd_bias" : "gated_residual_bwd_bias";
      b.seed = win ? 16 : 17;
      if (!win) b.shapes = row_broadcast_shapes(), b.perf_shapes = row_broadcast_perf();
      b.make = [](const Dims& d, Precision, Gen& g, HostSet& hs) {
        gated_inputs(d, g, hs);
        hs.inout("dbias", {d.C}, g.randn(d.C));
      };
      b.run = [win](OpRun& r) {
        r.be.gated_residual_backward(r.t("dy"), r.t("dgate"), r.t("dout"), r.t("y"), r.t("gate"),
                                     win ? r.d.window_order() : WindowOrder{}, r.t("dbias"), GradWrite::add);
      };
      b.checks = {{"dy", tol(1e-6)}, {"dgate", tol(1e-5)}, {"dbias", tol(1e-4)}};
      b.grad = {};
      b.grad_shapes = {};
      t.push_back(b);
    }
  }
}

}  // namespace ft::ops
