// Op table entries for generation with a KV cache: kv_cache_store (a prefill's positions
// from 0, a decode step's at each row's own start), attention_decode (one query per row over
// its cached keys; per-row lengths from Dims::seq_lens: T, 1, T/2, 3T/4+1) and argmax_rows.
// Shapes: head sizes 32, 64, 128 (the CUDA kernel's three), a ragged T, GPT-2's width; perf
// at GPT-2 124M decoding: G = 32 rows, T = 1024 cached positions, C = 768, 12 heads.
#include "ops/op_table.h"

namespace ft::ops {

namespace {

Dims kv(int64_t B, int64_t T, int64_t C, int64_t NH, bool varlen, int64_t n = 0) {
  Dims d;
  d.B = B, d.T = T, d.C = C, d.NH = NH, d.varlen = varlen, d.n = n;
  return d;
}

void store_inputs(const Dims& d, Gen& g, HostSet& hs) {
  const int64_t B = d.B, T = d.T, C = d.C, t = d.n;
  // inout: positions the store does not write must keep their values
  hs.inout("kcache", {B, T, C}, g.randn(B * T * C));
  hs.inout("vcache", {B, T, C}, g.randn(B * T * C));
  hs.in("qkv", {B, t, 3 * C}, g.randn(B * t * 3 * C));
  std::vector<int32_t> start(B);
  for (int64_t b = 0; b < B; ++b) start[b] = static_cast<int32_t>((b * 7 + 3) % (T - t + 1));
  hs.tokens("start", {B}, start);
}

void decode_inputs(const Dims& d, Gen& g, HostSet& hs) {
  const int64_t B = d.B, T = d.T, C = d.C;
  hs.in("qkv", {B, 3 * C}, g.randn(B * 3 * C));
  hs.in("kcache", {B, T, C}, g.randn(B * T * C));
  hs.in("vcache", {B, T, C}, g.randn(B * T * C));
  hs.tokens("lens", {B}, d.seq_lens());
  hs.out("out", {B, C});
}

}  // namespace

void add_kv_ops(std::vector<OpCase>& t) {
  {
    OpCase c;
    c.name = "kv_cache_store";
    c.seed = 21;
    // varlen: each row from its own start (a decode step when n = 1); else from 0 (a prefill)
    c.shapes = {kv(3, 16, 64, 2, true, 1), kv(2, 37, 72, 2, true, 5), kv(4, 64, 768, 12, false, 40),
                kv(32, 1024, 768, 12, true, 1)};
    c.make = [](const Dims& d, Precision, Gen& g, HostSet& hs) { store_inputs(d, g, hs); };
    c.run = [](OpRun& r) {
      r.be.kv_cache_store(r.t("kcache"), r.t("vcache"), r.t("qkv"), r.d.varlen ? r.t("start") : Tensor());
    };
    c.checks = {{"kcache", tol(0)}, {"vcache", tol(0)}};  // a copy: exact in every precision
    for (Check& k : c.checks) k.tol = {1e-12, 1e-12, 1e-12};
    c.perf_shapes = {kv(32, 1024, 768, 12, true, 1), kv(32, 1024, 768, 12, false, 64)};
    c.work = [](const Dims& d, size_t a) { return Work{0, 4.0 * d.B * d.n * d.C * a}; };
    t.push_back(c);
  }
  {
    OpCase c;
    c.name = "attention_decode";
    c.seed = 22;
    c.shapes = {kv(3, 64, 64, 2, true), kv(5, 100, 128, 2, true), kv(2, 300, 256, 2, true),
                kv(4, 1024, 768, 12, true), kv(2, 45, 768, 12, false)};
    c.make = [](const Dims& d, Precision, Gen& g, HostSet& hs) { decode_inputs(d, g, hs); };
    c.run = [](OpRun& r) {
      r.be.attention_decode(r.t("out"), r.t("qkv"), r.t("kcache"), r.t("vcache"), r.t("lens"),
                            static_cast<int>(r.d.NH));
    };
    c.checks = {{"out", tol(1e-5)}};
    c.perf_shapes = {kv(32, 1024, 768, 12, false), kv(32, 256, 768, 12, false)};
    // bound by reading every cached key and value once
    c.work = [](const Dims& d, size_t a) { return Work{0, 2.0 * d.B * d.T * d.C * a}; };
    t.push_back(c);
  }
  {
    OpCase c;
    c.name = "argmax_rows";
    c.seed = 23;
    auto shape = [](int64_t B, int64_t V, int64_t Vp) {
      Dims d;
      d.B = B, d.V = V, d.Vp = Vp;
      return d;
    };
    c.shapes = {shape(3, 61, 128), shape(5, 1000, 1024), shape(32, 50257, 50304)};
    c.make = [](const Dims& d, Precision, Gen& g, HostSet& hs) {
      // rounded to bf16 many logits tie: both backends take the first of equals
      hs.in("logits", {d.B, d.Vp}, g.randn(d.B * d.Vp, 2.f));
      hs.out("next", {d.B}, Store::i32);
    };
    c.run = [](OpRun& r) { r.be.argmax_rows(r.t("next"), r.t("logits"), r.d.V); };
    c.checks = {{"next", {1e-12, 1e-12, 1e-12}}};  // the same index (a tolerance must be > 0)
    c.perf_shapes = {shape(32, 50257, 50304)};
    c.work = [](const Dims& d, size_t a) { return Work{0, 1.0 * d.B * d.V * a}; };
    t.push_back(c);
  }
}

}  // namespace ft::ops
