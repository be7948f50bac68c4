// Op table entries: embedding, layernorm, GELU, residual add, attention (forward and
// backward of each; attention causal or not, with or without per-sample lengths, or with
// samples packed into rows). Shapes are
// the ones the per-op CPU and GPU tests used before the table, plus a GPT-2 width where those
// had none; perf shapes are GPT-2 124M (B=8/16, T=1024, C=768), and DiT-S for non-causal
// attention.
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

// The same with samples packed into rows: positions restart inside each row, so wpe rows are
// gathered and their gradients scattered (collisions within and across rows).
std::vector<Dims> packed_embedding_shapes() {
  std::vector<Dims> v = embedding_shapes();
  for (Dims& d : v) d.packed = true;
  return v;
}

void embedding_inputs(const Dims& d, Gen& g, HostSet& hs, bool backward) {
  auto tok = g.randint(d.B * d.T, static_cast<int32_t>(d.Vp));
  if (tok.size() > 40) tok[5] = tok[9] = tok[40] = 7 % d.Vp;  // scatter-add collisions
  else if (tok.size() > 7) tok[3] = tok[7];
  hs.tokens("tokens", {d.B, d.T}, tok);
  hs.in("wte", {d.Vp, d.C}, g.randn(d.Vp * d.C));
  if (d.maxT > 0) hs.in("wpe", {d.maxT, d.C}, g.randn(d.maxT * d.C));  // maxT 0: a row gather
  hs.out("out", {d.B, d.T, d.C});
  if (d.packed) hs.tokens("positions", {d.B, d.T}, d.positions());
  if (!backward) return;
  hs.in("dout", {d.B, d.T, d.C}, g.randn(d.B * d.T * d.C));
  // gradients accumulate: start from random values
  hs.inout("dwte", {d.Vp, d.C}, g.randn(d.Vp * d.C));
  if (d.maxT > 0) hs.inout("dwpe", {d.maxT, d.C}, g.randn(d.maxT * d.C));
}

// Row gather (no position table: maxT 0): the recommender's item and last-position rows.
std::vector<Dims> gather_shapes() {
  std::vector<Dims> v = embedding_shapes();
  for (Dims& d : v) d.maxT = 0;
  return v;
}

Tensor positions_of(OpRun& r) { return r.d.packed ? r.t("positions") : Tensor(); }

void embedding_fwd(OpRun& r) {
  r.be.embedding_forward(r.t("out"), r.t("tokens"), r.t("wte"), r.t("wpe"), positions_of(r));
}

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

Dims attn(int64_t B, int64_t T, int64_t NH, int64_t HS, bool causal = true, bool varlen = false) {
  Dims d;
  d.B = B, d.T = T, d.NH = NH, d.C = NH * HS, d.causal = causal, d.varlen = varlen;
  return d;
}
// Samples packed into rows (Dims::positions(): lengths 5, 1, T/3+1, 2 cycling): always causal.
Dims packed_attn(int64_t B, int64_t T, int64_t NH, int64_t HS) {
  Dims d = attn(B, T, NH, HS);
  d.packed = true;
  return d;
}

std::vector<Dims> attention_shapes() {
  // GPT-2's causal attention, then the same shapes non-causal (AttentionOptions::causal), then
  // per-sample lengths (seq_lens: T, 1, T/2, 3T/4+1 over b) causal and not. CUDA: head sizes
  // 32, 64, 128; cuDNN takes bf16/f16 causal and non-causal shapes it supports (key lengths
  // multiples of 128 on every cuDNN 9), fittrain's kernels the rest and every varlen shape;
  // the non-causal T = 64 shape's bf16/f16 backward takes the one-pass kernel by default
  // (FT_ATTENTION_BACKWARD=auto).
  const std::vector<Dims> base = {
      attn(2, 150, 3, 64),  // partial last tile
      attn(1, 128, 2, 64),  // exact tiles
      attn(2, 70, 2, 32),
      attn(1, 65, 1, 128),
      attn(2, 256, 3, 64),  // shapes cuDNN 9 runs forward and backward (bf16/f16)
      attn(1, 128, 2, 32),
      attn(1, 384, 1, 128),
      attn(3, 17, 2, 32),   // odd length, 3 sequences
      attn(5, 64, 2, 64),   // one tile (non-causal: the one-pass backward's smallest block)
  };
  std::vector<Dims> v = base;
  for (Dims d : base) {
    d.causal = false;
    v.push_back(d);
  }
  for (bool causal : {true, false}) {
    v.push_back(attn(4, 150, 3, 64, causal, true));  // lengths 150, 1, 75, 113: partial tiles
    v.push_back(attn(3, 128, 2, 64, causal, true));  // 128, 1, 64: tile boundaries
    v.push_back(attn(3, 70, 2, 32, causal, true));   // 70, 1, 35
    v.push_back(attn(3, 65, 1, 128, causal, true));  // 65, 1, 32
    v.push_back(attn(4, 17, 2, 32, causal, true));   // 17, 1, 8, 13
  }
  // Packed samples (positions): fittrain's kernels only. Samples of 1 and 2 tokens, samples
  // that start and end inside a tile, and T/3+1 = 129 at T = 384, which spans three 64-row
  // tiles and crosses the tensor-core kernels' 128-row query and key blocks.
  v.push_back(packed_attn(4, 150, 3, 64));  // partial last tile
  v.push_back(packed_attn(3, 384, 2, 64));  // long samples across blocks
  v.push_back(packed_attn(2, 256, 2, 64));  // exact tiles
  v.push_back(packed_attn(3, 70, 2, 32));
  v.push_back(packed_attn(2, 200, 1, 128));
  v.push_back(packed_attn(4, 17, 2, 32));
  return v;
}

void attention_inputs(const Dims& d, Gen& g, HostSet& hs, bool backward) {
  hs.in("qkv", {d.B, d.T, 3 * d.C}, g.randn(d.B * d.T * 3 * d.C));
  hs.out("out", {d.B, d.T, d.C});
  if (backward) {
    hs.in("dout", {d.B, d.T, d.C}, g.randn(d.B * d.T * d.C));
    hs.out("dqkv", {d.B, d.T, 3 * d.C});  // overwritten: NaN before must not leak through
  }
  if (d.varlen) hs.tokens("seq_lens", {d.B}, d.seq_lens());
  if (d.packed) hs.tokens("positions", {d.B, d.T}, d.positions());
}

AttentionOptions attention_options(OpRun& r) {
  AttentionOptions o;
  o.causal = r.d.causal;
  if (r.d.varlen) o.seq_lens = r.t("seq_lens");
  if (r.d.packed) o.positions = r.t("positions");
  return o;
}
Tensor attention_saved(OpRun& r) {
  return r.scratch("saved", r.be.attention_saved_bytes(r.d.attention(), precision_of(r.act)));
}
void attention_fwd(OpRun& r) {
  r.be.attention_forward(r.t("out"), attention_saved(r), r.t("qkv"), static_cast<int>(r.d.NH),
                         attention_options(r));
}
void attention_bwd(OpRun& r) {
  r.be.attention_backward(r.t("dqkv"), r.t("dout"), r.t("qkv"), r.t("out"), attention_saved(r),
                          static_cast<int>(r.d.NH), attention_options(r));
}
// Score and value products (2 x 2 FLOPs per query, key and channel) over the visible pairs:
// len^2 per sample, half of it causal. Packed rows count each of their samples.
double attention_flops(const Dims& d) {
  std::vector<int64_t> lens;
  if (d.packed) {
    for (int32_t p : d.positions()) {
      if (p == 0) lens.push_back(0);
      ++lens.back();
    }
  } else {
    for (int32_t len : d.seq_lens()) lens.push_back(len);
  }
  double pairs = 0;
  for (int64_t len : lens) pairs += static_cast<double>(len) * len * (d.causal ? 0.5 : 1.0);
  return 4.0 * pairs * d.C;
}

// Rows at or past a sample's length: output and every gradient exactly 0 (what a padded
// query row gives whatever dout holds there).
std::vector<std::string> padded_rows_zero(const Dims& d, Precision, const HostSet&,
                                          const Values& got) {
  std::vector<std::string> errs;
  if (!d.varlen) return errs;
  const std::vector<int32_t> lens = d.seq_lens();
  for (auto [name, width] : {std::pair<const char*, int64_t>{"out", d.C}, {"dqkv", 3 * d.C}}) {
    auto it = got.find(name);
    if (it == got.end()) continue;
    int64_t bad = 0;
    for (int64_t b = 0; b < d.B; ++b)
      for (int64_t t = lens[b]; t < d.T; ++t)
        for (int64_t c = 0; c < width; ++c)
          if (it->second[(b * d.T + t) * width + c] != 0.0 && bad++ == 0)
            errs.push_back(std::string(name) + " row b=" + std::to_string(b) + " t=" +
                           std::to_string(t) + " (length " + std::to_string(lens[b]) +
                           ") is not 0");
    if (bad > 1) errs.push_back(std::string(name) + ": " + std::to_string(bad) + " nonzero padded values");
  }
  return errs;
}

// Packed rows: a sample's first token sees only itself, so its output is its own v exactly
// (a softmax over one key is 1, and every other key contributes 0) on every backend; a lower
// bound that lets keys of the samples before it through changes it.
std::vector<std::string> sample_starts_see_themselves(const Dims& d, const HostSet& in,
                                                      const Values& got) {
  std::vector<std::string> errs;
  auto it = got.find("out");
  const HostBuf* qkv = in.find("qkv");
  if (!d.packed || it == got.end() || qkv == nullptr) return errs;
  const std::vector<int32_t> pos = d.positions();
  int64_t bad = 0;
  for (int64_t r = 0; r < d.B * d.T; ++r) {
    if (pos[static_cast<size_t>(r)] != 0) continue;
    for (int64_t c = 0; c < d.C; ++c)
      if (it->second[r * d.C + c] != qkv->f[r * 3 * d.C + 2 * d.C + c] && bad++ == 0)
        errs.push_back("out row b=" + std::to_string(r / d.T) + " t=" + std::to_string(r % d.T) +
                       " starts a sample but is not its own v");
  }
  if (bad > 1) errs.push_back("out: " + std::to_string(bad) + " values of sample-start rows differ from v");
  return errs;
}

std::vector<std::string> attention_exact(const Dims& d, Precision p, const HostSet& in,
                                         const Values& got) {
  std::vector<std::string> errs = padded_rows_zero(d, p, in, got);
  for (std::string& e : sample_starts_see_themselves(d, in, got)) errs.push_back(std::move(e));
  return errs;
}

std::vector<Dims> attention_perf() {
  // GPT-2 124M causal (and padded: the masked kernels; packed: samples of 5, 1, 342, 2
  // tokens, against the unpacked B=8 line), DiT-S non-causal (T = 256 patches), and CDEIT's
  // first stage at batch 32: 64x64 tokens in windows of 16x16, each window a sequence of 256;
  // then DiT-S at batch 256, CDEIT's second stage (32x32 tokens in 4 windows), third (16x16
  // tokens, global) and last (8x8 tokens, global) at batch 32
  return {attn(8, kT, kNH, kC / kNH), attn(16, kT, kNH, kC / kNH),
          attn(8, kT, kNH, kC / kNH, true, true), packed_attn(8, kT, kNH, kC / kNH),
          attn(16, 256, 6, 64, false), attn(32 * 16, 256, 8, 64, false),
          attn(256, 256, 6, 64, false), attn(32 * 4, 256, 8, 64, false),
          attn(32, 256, 8, 64, false), attn(32, 64, 8, 64, false)};
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
    for (const Dims& d : packed_embedding_shapes()) c.shapes.push_back(d);
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
      r.be.embedding_backward(r.t("dwte"), r.t("dwpe"), r.t("dout"), r.t("tokens"), positions_of(r));
    };
    c.checks = {{"dwte", tol(1e-6)}, {"dwpe", tol(1e-6)}};
    Dims g;
    g.B = 2, g.T = 5, g.C = 8, g.Vp = 4, g.maxT = 7;
    Dims gp = g;
    gp.T = 9, gp.packed = true;
    c.grad_shapes = {g, gp};
    c.grad.forward = embedding_fwd;
    c.grad.fwd_out = "out";
    c.grad.cotangent = "dout";
    c.grad.wrt = {{"wte", "dwte"}, {"wpe", "dwpe"}};
    c.work = [](const Dims& d, size_t a) { return Work{0, 4.0 * d.B * d.T * d.C * a}; };
    t.push_back(c);
  }
  {
    OpCase c;
    c.name = "row_gather_fwd";  // embedding_forward without wpe
    c.seed = 11;
    c.shapes = gather_shapes();
    c.make = [](const Dims& d, Precision, Gen& g, HostSet& hs) { embedding_inputs(d, g, hs, false); };
    c.run = [](OpRun& r) { r.be.embedding_forward(r.t("out"), r.t("tokens"), r.t("wte"), Tensor()); };
    c.checks = {{"out", tol(1e-6)}};
    c.perf_shapes = {};
    c.work = [](const Dims& d, size_t a) { return Work{0, 2.0 * d.B * d.T * d.C * a}; };
    t.push_back(c);

    c.name = "row_gather_bwd";
    c.make = [](const Dims& d, Precision, Gen& g, HostSet& hs) { embedding_inputs(d, g, hs, true); };
    c.run = [](OpRun& r) { r.be.embedding_backward(r.t("dwte"), Tensor(), r.t("dout"), r.t("tokens")); };
    c.checks = {{"dwte", tol(1e-6)}};
    Dims g;
    g.B = 2, g.T = 5, g.C = 8, g.Vp = 4, g.maxT = 0;
    c.grad_shapes = {g};
    c.grad.forward = [](OpRun& r) { r.be.embedding_forward(r.t("out"), r.t("tokens"), r.t("wte"), Tensor()); };
    c.grad.fwd_out = "out";
    c.grad.cotangent = "dout";
    c.grad.wrt = {{"wte", "dwte"}};
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
    c.extra = attention_exact;
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
    // every mask: causal or not, with lengths 6, 1, 3 or without; packed rows of samples
    // 5, 1, 3 and 1, 4, 2, 2 (T = 9) and 5, 1, 4 / 1, 4, 2, 3 / 4, 2, 4 (T = 10)
    c.grad_shapes = {attn(2, 5, 2, 4), attn(2, 5, 2, 4, false), attn(3, 6, 2, 4, true, true),
                     attn(3, 6, 2, 4, false, true), packed_attn(2, 9, 2, 4),
                     packed_attn(3, 10, 2, 4)};
    c.grad.forward = attention_fwd;
    c.grad.fwd_out = "out";
    c.grad.cotangent = "dout";
    c.grad.wrt = {{"qkv", "dqkv"}};
    c.work = [](const Dims& d, size_t) { return Work{2.5 * attention_flops(d), 0}; };
    t.push_back(c);
  }
}

}  // namespace ft::ops
