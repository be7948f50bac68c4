// Op table entries: the matrix products. matmul forward/backward with and without bias,
// the backward with dinp skipped (the bias reduction over many row groups), with
// GradWrite::overwrite, the MLP's product + GELU forward and product backward + GELU', and
// the projection with the residual add. Shapes: the old per-op tests' (rows not a multiple
// of any tile, OC not a multiple of 64; CUDA needs C in whole 16-byte packs, and OC too except
// for the bias gradient's narrow path, OC = 4) plus GPT-2
// 124M's four products for perf. Grad shapes (CPU only) may be any size.
#include <cmath>

#include "ops/op_table.h"

namespace ft::ops {

namespace {

Dims mm(int64_t B, int64_t T, int64_t C, int64_t OC, bool bias = true) {
  Dims d;
  d.B = B, d.T = T, d.C = C, d.OC = OC, d.bias = bias;
  return d;
}
std::vector<Dims> with_and_without_bias(std::initializer_list<Dims> ds) {
  std::vector<Dims> v;
  for (Dims d : ds) {
    v.push_back(d);
    d.bias = false;
    v.push_back(d);
  }
  return v;
}
// GPT-2 124M's products at B=8 and 16 (T=1024): qkv, attention projection, fc, MLP projection
std::vector<Dims> gpt2_products(std::initializer_list<std::pair<int64_t, int64_t>> cs) {
  std::vector<Dims> v;
  for (int64_t B : {8, 16})
    for (auto [C, OC] : cs) v.push_back(mm(B, 1024, C, OC));
  return v;
}
const std::initializer_list<std::pair<int64_t, int64_t>> kAll = {
    {768, 2304}, {768, 768}, {768, 3072}, {3072, 768}};
// GPT-2's, then the diffusion models' block products: DiT-B at batch 64 (16384 tokens of 768)
// and CDEIT at batch 32 (its first two stages: 131072 and 32768 tokens of 512), qkv,
// projection, fc1, fc2; then CDEIT's products outside its blocks at batch 32: the patch
// embeddings (K = 2 x 2 pixels = 4), the output head (4 columns), the patch merges (4 x 512 ->
// 512 at stages 2-4), the up-projections (512 -> 512 at 256 and 64 tokens a sample) and
// adaLN's conditioning product (32 rows). All to set beside PyTorch's at the same shapes
// (bench/torch_products.py, the same list).
std::vector<Dims> perf_products() {
  std::vector<Dims> v = gpt2_products(kAll);
  for (auto [C, OC] : {std::pair<int64_t, int64_t>{768, 2304}, {768, 768}, {768, 3072}, {3072, 768}})
    v.push_back(mm(64, 256, C, OC));
  for (int64_t T : {4096, 1024})
    for (auto [C, OC] : {std::pair<int64_t, int64_t>{512, 1536}, {512, 512}, {512, 2048}, {2048, 512}})
      v.push_back(mm(32, T, C, OC));
  v.push_back(mm(32, 4096, 4, 512));
  v.push_back(mm(32, 4096, 512, 4));
  for (int64_t T : {1024, 256, 64}) v.push_back(mm(32, T, 2048, 512));
  for (int64_t T : {256, 64}) v.push_back(mm(32, T, 512, 512));
  v.push_back(mm(1, 32, 512, 3072));
  return v;
}

int64_t rows(const Dims& d) { return d.B * d.T; }

// x [N,C], w [OC,C], bias [OC] (if d.bias), out [N,OC]
void product_inputs(const Dims& d, Gen& g, HostSet& hs) {
  const int64_t N = rows(d);
  hs.in("x", {d.B, d.T, d.C}, g.randn(N * d.C));
  hs.in("w", {d.OC, d.C}, g.randn(d.OC * d.C, 0.1f));
  if (d.bias) hs.in("bias", {d.OC}, g.randn(d.OC));
  hs.out("out", {d.B, d.T, d.OC});
}

// dout with a per-row offset, so that a dropped or doubled row group shows in the bias sums;
// dbias starts at the size of those sums (~sqrt(N)), so overwriting instead of adding fails.
void backward_inputs(const Dims& d, Gen& g, HostSet& hs, Role grads) {
  const int64_t N = rows(d);
  auto dout = g.randn(N * d.OC);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < d.OC; ++o) dout[n * d.OC + o] += (n % 7) * 0.25f;
  hs.in("dout", {d.B, d.T, d.OC}, dout);
  if (grads == Role::out) {
    hs.out("dw", {d.OC, d.C});
    if (d.bias) hs.out("dbias", {d.OC});
  } else {
    hs.inout("dw", {d.OC, d.C}, g.randn(d.OC * d.C));
    if (d.bias) hs.inout("dbias", {d.OC}, g.randn(d.OC, std::sqrt(static_cast<float>(N))));
  }
}


void forward(OpRun& r) { r.be.matmul_forward(r.t("out"), r.t("x"), r.t("w"), r.maybe("bias")); }

double product_flops(const Dims& d) { return 2.0 * rows(d) * d.C * d.OC; }

double gelu_tanh(double x) {
  const double k = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

}  // namespace

void add_matmul_ops(std::vector<OpCase>& t) {
  const Tol mm_tol = tol(1e-6);
  {
    OpCase c;
    c.name = "matmul_fwd";
    c.seed = 10;
    // then products with a side of <= 16 columns: CDEIT's patch embedding (K = 4) and head (4
    // outputs), DiT's (16), odd narrow widths, and J = 36, not whole bf16 packs
    c.shapes = with_and_without_bias({mm(2, 33, 96, 160), mm(2, 5, 8, 24), mm(1, 256, 768, 2304), mm(2, 300, 4, 512),
                                      mm(2, 300, 512, 4), mm(1, 517, 16, 96), mm(1, 517, 96, 16), mm(2, 37, 3, 40),
                                      mm(2, 37, 40, 3), mm(1, 50, 5, 36)});
    c.make = [](const Dims& d, Precision, Gen& g, HostSet& hs) { product_inputs(d, g, hs); };
    c.run = forward;
    c.checks = {{"out", mm_tol}};
    c.perf_shapes = perf_products();
    c.work = [](const Dims& d, size_t) { return Work{product_flops(d), 0}; };
    t.push_back(c);
  }
  const auto bwd_shapes = with_and_without_bias(
      {mm(2, 33, 96, 160), mm(2, 5, 8, 24), mm(2, 259, 96, 200), mm(1, 256, 768, 2304), mm(2, 300, 4, 512),
       mm(2, 300, 512, 4), mm(1, 517, 16, 96), mm(2, 37, 40, 3), mm(1, 9001, 4, 64)});
  {
    OpCase c;
    c.name = "matmul_bwd";
    c.seed = 11;
    c.shapes = bwd_shapes;
    c.make = [](const Dims& d, Precision, Gen& g, HostSet& hs) {
      product_inputs(d, g, hs);
      backward_inputs(d, g, hs, Role::inout);
      hs.out("dx", {d.B, d.T, d.C});  // overwritten
    };
    c.run = [](OpRun& r) {
      r.be.matmul_backward(r.t("dx"), r.t("dw"), r.maybe("dbias"), r.t("dout"), r.t("x"), r.t("w"));
    };
    c.checks = {{"dx", mm_tol}, {"dw", mm_tol}, {"dbias", mm_tol}};
    c.grad_shapes = with_and_without_bias({mm(2, 5, 8, 12)});
    c.grad.forward = forward;
    c.grad.fwd_out = "out";
    c.grad.cotangent = "dout";
    c.grad.wrt = {{"x", "dx"}, {"w", "dw"}, {"bias", "dbias"}};
    c.perf_shapes = perf_products();
    c.work = [](const Dims& d, size_t) { return Work{2 * product_flops(d), 0}; };
    t.push_back(c);

    // dinp skipped: dW and the bias reduction alone. N = 8193 splits dout into many row
    // groups (~2 blocks per SM over the column blocks; OC = 200: 129 groups of 64 rows, the
    // last one ragged). Perf: with minus without bias is the bias gradient's cost.
    c.name = "matmul_bwd_weights";
    c.seed = 12;
    // OC = 4, 16, 37: DiT/CDEIT output projections (and an odd width), narrower than a bf16
    // pack: the bias gradient's narrow path (row groups over all SMs, ragged last group);
    // OC = 300 (bf16: not whole packs, wider than 256): one block per column.
    c.shapes = {mm(3, 2731, 16, 200), mm(3, 2731, 16, 768), mm(3, 2731, 16, 3072),
                mm(2, 33, 96, 160, false), mm(4, 1024, 64, 4), mm(1, 9001, 16, 16), mm(2, 4099, 16, 37),
                mm(1, 700, 16, 300)};
    c.make = [](const Dims& d, Precision, Gen& g, HostSet& hs) {
      product_inputs(d, g, hs);
      backward_inputs(d, g, hs, Role::inout);
    };
    c.run = [](OpRun& r) {
      r.be.matmul_backward(Tensor(), r.t("dw"), r.maybe("dbias"), r.t("dout"), r.t("x"), r.t("w"));
    };
    c.checks = {{"dw", mm_tol}, {"dbias", mm_tol}};
    c.grad.wrt = {{"w", "dw"}, {"bias", "dbias"}};
    c.perf_shapes = {};
    for (int64_t OC : {768, 2304, 3072})
      for (bool b : {true, false}) c.perf_shapes.push_back(mm(16, 1024, 768, OC, b));
    c.work = [](const Dims& d, size_t) { return Work{product_flops(d), 0}; };
    t.push_back(c);

    // dinp alone with no input tensor (without dw the input is only a shape: dinp gives it),
    // as models/attention_bias.h runs d(b_proj) @ W_proj; one row too
    {
      OpCase in;
      in.name = "matmul_bwd_input";
      in.seed = 17;
      in.shapes = {mm(2, 33, 96, 160, false), mm(1, 1, 64, 64, false), mm(1, 1, 512, 512, false)};
      in.make = [](const Dims& d, Precision, Gen& g, HostSet& hs) {
        hs.in("w", {d.OC, d.C}, g.randn(d.OC * d.C, 0.1f));
        backward_inputs(d, g, hs, Role::out);
        hs.out("dx", {d.B, d.T, d.C});
      };
      in.run = [](OpRun& r) {
        r.be.matmul_backward(r.t("dx"), Tensor(), Tensor(), r.t("dout"), Tensor(), r.t("w"), GradWrite::overwrite);
      };
      in.checks = {{"dx", mm_tol}};
      in.work = [](const Dims& d, size_t) { return Work{product_flops(d), 0}; };
      t.push_back(in);
    }

    // column_sums: the bias gradient of a block of a wider row's columns, read in place
    // (the queries' third of attention's qkv bias, models/attention_bias.h). Dims: x [B,T,C],
    // the OC columns from n; the other columns hold 1e4 + n so a sum that strays into them
    // shows. Added to out (random start, ~sqrt(N)) or written over NaN (GradWrite::overwrite).
    // No grad mode: it is itself a gradient (matmul_bwd_weights checks the bias sums' finite
    // differences). extra: the sums against double sums of the host inputs, on every backend.
    for (const bool overwrite : {false, true}) {
      OpCase s;
      s.name = overwrite ? "column_sums_overwrite" : "column_sums";
      s.seed = overwrite ? 16 : 15;
      auto cs = [](int64_t B, int64_t T, int64_t L, int64_t OC, int64_t col0) {
        Dims d = mm(B, T, L, OC, false);
        d.n = col0;
        return d;
      };
      // CDEIT's qkv rows (3 x 64 columns, each third), many row groups over 1536-wide rows,
      // a block at an odd 16-byte offset, the whole row (the plain bias path) and a narrow one
      s.shapes = {cs(2, 33, 192, 64, 0),   cs(2, 33, 192, 64, 128), cs(1, 9001, 1536, 512, 0),
                  cs(3, 2731, 96, 32, 40), cs(2, 5, 24, 24, 0),     cs(2, 300, 4, 4, 0)};
      s.make = [overwrite](const Dims& d, Precision, Gen& g, HostSet& hs) {
        const int64_t N = rows(d);
        auto x = g.randn(N * d.C);
        for (int64_t r = 0; r < N; ++r)
          for (int64_t k = 0; k < d.C; ++k)
            if (k < d.n || k >= d.n + d.OC) x[r * d.C + k] = 1e4f + static_cast<float>(r % 5);
            else x[r * d.C + k] += (r % 7) * 0.25f;
        hs.in("x", {d.B, d.T, d.C}, x);
        if (overwrite) hs.out("out", {d.OC});
        else hs.inout("out", {d.OC}, g.randn(d.OC, std::sqrt(static_cast<float>(N))));
      };
      s.run = [overwrite](OpRun& r) {
        r.be.column_sums(r.t("out"), r.t("x"), r.d.n, overwrite ? GradWrite::overwrite : GradWrite::add);
      };
      s.checks = {{"out", mm_tol}};
      s.extra = [overwrite](const Dims& d, Precision p, const HostSet& in, const Values& got) {
        std::vector<std::string> f;
        const int64_t N = rows(d);
        const HostBuf* x = in.find("x");
        const HostBuf* out0 = in.find("out");
        const std::vector<double>& out = got.at("out");
        const double rel = p == Precision::fp32 ? 1e-5 : 1e-2;
        for (int64_t j = 0; j < d.OC; ++j) {
          double want = overwrite ? 0.0 : out0->f[static_cast<size_t>(j)];
          for (int64_t r = 0; r < N; ++r) want += x->f[static_cast<size_t>(r * d.C + d.n + j)];
          if (!(std::abs(out[static_cast<size_t>(j)] - want) <= rel * (std::abs(want) + std::sqrt(double(N))))) {
            f.push_back("column " + std::to_string(j) + ": " + std::to_string(out[static_cast<size_t>(j)]) +
                        ", the sum is " + std::to_string(want));
            break;
          }
        }
        return f;
      };
      s.perf_shapes = {cs(32, 4096, 1536, 512, 0), cs(32, 4096, 512, 512, 0)};
      s.work = [](const Dims& d, size_t act_bytes) { return Work{0, double(rows(d) * d.OC * act_bytes)}; };
      t.push_back(s);
    }

    // GradWrite::overwrite (the first micro-batch): dW and dbias start as NaN, which must
    // not be read (beta = 0)
    c.name = "matmul_bwd_overwrite";
    c.seed = 13;
    c.shapes = bwd_shapes;
    c.make = [](const Dims& d, Precision, Gen& g, HostSet& hs) {
      product_inputs(d, g, hs);
      backward_inputs(d, g, hs, Role::out);
      hs.out("dx", {d.B, d.T, d.C});
    };
    c.run = [](OpRun& r) {
      r.be.matmul_backward(r.t("dx"), r.t("dw"), r.maybe("dbias"), r.t("dout"), r.t("x"), r.t("w"),
                           GradWrite::overwrite);
    };
    c.checks = {{"dx", mm_tol}, {"dw", mm_tol}, {"dbias", mm_tol}};
    c.grad.wrt = {{"x", "dx"}, {"w", "dw"}, {"bias", "dbias"}};
    c.perf_shapes = gpt2_products(kAll);
    c.work = [](const Dims& d, size_t) { return Work{2 * product_flops(d), 0}; };
    t.push_back(c);
  }
  {
    // The MLP's first product with its GELU (cuBLASLt GELU_AUX_BIAS on CUDA where it has
    // one). fp32: 5e-4 leaves room for an approximate tanh inside cuBLASLt (which GELU it
    // computes is GPU_GeluEpilogue's check).
    OpCase c;
    c.name = "matmul_gelu_fwd";
    c.seed = 14;
    c.shapes = with_and_without_bias({mm(2, 33, 96, 384), mm(2, 5, 8, 32)});
    c.make = [](const Dims& d, Precision, Gen& g, HostSet& hs) {
      const int64_t N = rows(d);
      hs.in("x", {d.B, d.T, d.C}, g.randn(N * d.C));
      hs.in("w", {d.OC, d.C}, g.randn(d.OC * d.C, 0.15f));
      if (d.bias) hs.in("bias", {d.OC}, g.randn(d.OC, 0.5f));
      hs.out("pre", {d.B, d.T, d.OC});
      hs.out("out", {d.B, d.T, d.OC});
    };
    c.run = [](OpRun& r) {
      r.be.matmul_gelu_forward(r.t("pre"), r.t("out"), r.t("x"), r.t("w"), r.maybe("bias"));
    };
    c.checks = {{"pre", mm_tol}, {"out", tol(5e-4)}};
    c.perf_shapes = gpt2_products({{768, 3072}});
    c.work = [](const Dims& d, size_t) { return Work{product_flops(d), 0}; };
    t.push_back(c);
  }
  {
    // Backward of the product that consumes gelu(pre): dpre = (dout @ w) * gelu'(pre),
    // dw and dbias accumulate (cuBLASLt DGELU epilogue on CUDA). x [N,H] is gelu(pre) as in
    // the model; the product is [C,H] (the MLP projection), so d.C here is H, d.OC is C.
    OpCase c;
    c.name = "matmul_bwd_gelu";
    c.seed = 15;
    c.shapes = with_and_without_bias({mm(2, 33, 384, 96), mm(2, 5, 32, 8)});
    c.make = [](const Dims& d, Precision p, Gen& g, HostSet& hs) {
      const int64_t N = rows(d), H = d.C;
      auto pre = g.randn(N * H, 1.5f);
      std::vector<float> x(pre.size());
      for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(gelu_tanh(pre[i]));
      hs.in("pre", {d.B, d.T, H}, pre);
      hs.in("x", {d.B, d.T, H}, x);
      hs.in("w", {d.OC, H}, g.randn(d.OC * H, 0.1f));
      if (d.bias) hs.in("bias", {d.OC}, g.randn(d.OC, 0.1f));
      hs.in("dout", {d.B, d.T, d.OC}, g.randn(N * d.OC));
      hs.out("dpre", {d.B, d.T, H});
      hs.inout("dw", {d.OC, H}, g.randn(d.OC * H, 0.1f));
      if (d.bias) hs.inout("dbias", {d.OC}, g.randn(d.OC, 0.1f));
      hs.out("g", {d.B, d.T, H});  // grad mode: gelu(pre) recomputed from perturbed pre
      hs.out("out", {d.B, d.T, d.OC});
    };
    c.run = [](OpRun& r) {
      r.be.matmul_backward_gelu(r.t("dpre"), r.t("dw"), r.maybe("dbias"), r.t("dout"), r.t("x"),
                                r.t("w"), r.t("pre"));
    };
    c.checks = {{"dpre", tol(5e-4)}, {"dw", mm_tol}, {"dbias", mm_tol}};
    c.grad_shapes = with_and_without_bias({mm(2, 5, 16, 6)});
    c.grad.forward = [](OpRun& r) {
      r.be.gelu_forward(r.t("g"), r.t("pre"));
      r.be.matmul_forward(r.t("out"), r.t("g"), r.t("w"), r.maybe("bias"));
    };
    c.grad.fwd_out = "out";
    c.grad.cotangent = "dout";
    c.grad.wrt = {{"pre", "dpre"}, {"w", "dw"}, {"bias", "dbias"}};
    c.perf_shapes = gpt2_products({{3072, 768}});
    c.work = [](const Dims& d, size_t) { return Work{2 * product_flops(d), 0}; };
    t.push_back(c);
  }
  {
    // The projection with the residual add in its epilogue (C = residual, beta = 1).
    OpCase c;
    c.name = "matmul_residual_fwd";
    c.seed = 16;
    c.shapes = with_and_without_bias({mm(3, 41, 96, 136), mm(2, 5, 8, 24), mm(2, 300, 4, 512), mm(2, 37, 40, 3)});
    c.make = [](const Dims& d, Precision, Gen& g, HostSet& hs) {
      product_inputs(d, g, hs);
      hs.inout("res", {d.B, d.T, d.OC}, g.randn(rows(d) * d.OC, 3.f));  // read, never written
    };
    c.run = [](OpRun& r) {
      r.be.matmul_residual_forward(r.t("out"), r.t("x"), r.t("w"), r.maybe("bias"), r.t("res"));
    };
    c.checks = {{"out", mm_tol}};
    c.extra = [](const Dims&, Precision, const HostSet& in, const Values& got) {
      std::vector<std::string> f;
      const auto& res = got.at("res");
      const HostBuf* h = in.find("res");
      for (size_t i = 0; i < res.size(); ++i)
        if (res[i] != h->f[i]) {
          f.push_back("the residual input was written (element " + std::to_string(i) + ")");
          break;
        }
      return f;
    };
    c.perf_shapes = gpt2_products({{768, 768}, {3072, 768}});
    c.work = [](const Dims& d, size_t) { return Work{product_flops(d), 0}; };
    t.push_back(c);
  }
}

}  // namespace ft::ops
