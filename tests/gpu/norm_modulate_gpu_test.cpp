// GPU fused adaLN input (Backend::norm_modulate_forward/backward): the CUDA kernels against the
// CPU reference in fp32 and bf16 at a DiT-S-like shape (B=4, T=256, C=384: several backward
// chunks a sample), CDEIT-like windows (B=2, 32x32 grid, windows of 16, shift 0 and 8, C=64)
// and a C off the 16-byte pack (the element path); the backward run twice gives the same bits;
// a workspace sized from OpShape::norm_modulate alone covers the launch. The op table's cases
// (GPU_OpTable.norm_modulate_*) add fp16 and more shapes.
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "gpu_test_util.h"
#include "ops/op_table.h"

namespace ft::gputest {

namespace {

struct Shape {
  int64_t B, H, W, C;  // grid H x W (T = H*W); no windows: H = T, W = 1
  int window, shift;
  NormKind norm;
  int64_t T() const { return H * W; }
  NormModulateOptions opts() const {
    NormModulateOptions o;
    o.norm = norm;
    if (window > 0) o.out_order = {int(H), int(W), window, shift};
    return o;
  }
  std::string label() const {
    return std::string(norm == NormKind::rms ? "rms" : "layer") + " B" + std::to_string(B) + " " + std::to_string(H) +
           "x" + std::to_string(W) + " C" + std::to_string(C) + " w" + std::to_string(window) + " s" +
           std::to_string(shift);
  }
};

struct Host {
  std::vector<float> x, shift, scale, dout, dinp0;
};
struct Results {
  std::vector<float> out, mean, rstd, dinp, dshift, dscale;
};

// Runs forward then backward on `be` (its workspace sized for this shape alone) with the
// inputs rounded to t; the backward runs `reps` times from the same dinp start, and every
// run's results are kept.
std::vector<Results> run(Backend& be, DType t, const Shape& s, const Host& h, int reps) {
  const int64_t B = s.B, T = s.T(), C = s.C, N = B * T;
  const bool rms = s.norm == NormKind::rms;
  const std::vector<OpShape> ops{OpShape::norm_modulate(B, T, C)};
  const size_t ws = be.workspace_bytes(ops, Precision::bf16);
  void* wsp = ws ? be.alloc(ws) : nullptr;
  be.set_workspace(wsp, ws);
  std::vector<void*> allocs;
  auto tensor = [&](DType dt, std::initializer_list<int64_t> dims) {
    Tensor x(nullptr, dt, dims);
    x.data = be.alloc(std::max<size_t>(x.bytes(), 256));
    allocs.push_back(x.data);
    return x;
  };
  auto put = [&](Tensor x, const std::vector<float>& v) {
    if (x.dtype == DType::f32) return be.copy_to_device(x.data, v.data(), x.bytes());
    std::vector<uint16_t> b(v.size());
    for (size_t i = 0; i < v.size(); ++i) b[i] = to_bits16(x.dtype, v[i]);
    be.copy_to_device(x.data, b.data(), x.bytes());
  };
  auto get = [&](Tensor x) {
    be.synchronize();
    std::vector<float> v(static_cast<size_t>(x.numel()));
    if (x.dtype == DType::f32) {
      be.copy_to_host(v.data(), x.data, x.bytes());
    } else {
      std::vector<uint16_t> b(v.size());
      be.copy_to_host(b.data(), x.data, x.bytes());
      for (size_t i = 0; i < v.size(); ++i) v[i] = from_bits16(x.dtype, b[i]);
    }
    return v;
  };
  Tensor x = tensor(t, {B, T, C}), sh = tensor(t, {B, C}), sc = tensor(t, {B, C}), out = tensor(t, {B, T, C});
  Tensor mean = rms ? Tensor() : tensor(DType::f32, {N}), rstd = tensor(DType::f32, {N});
  Tensor dout = tensor(t, {B, T, C}), dinp = tensor(t, {B, T, C}), dsh = tensor(t, {B, C}), dsc = tensor(t, {B, C});
  put(x, h.x), put(sh, h.shift), put(sc, h.scale), put(dout, h.dout);
  std::vector<Results> res;
  be.norm_modulate_forward(out, mean, rstd, x, sh, sc, s.opts());
  for (int k = 0; k < reps; ++k) {
    put(dinp, h.dinp0);
    put(dsh, std::vector<float>(static_cast<size_t>(B * C), NAN));  // overwritten: NaN must not leak
    put(dsc, std::vector<float>(static_cast<size_t>(B * C), NAN));
    be.norm_modulate_backward(dinp, dsh, dsc, dout, x, mean, rstd, sc, s.opts());
    Results r;
    r.out = get(out), r.rstd = get(rstd), r.dinp = get(dinp), r.dshift = get(dsh), r.dscale = get(dsc);
    if (!rms) r.mean = get(mean);
    res.push_back(std::move(r));
  }
  for (void* p : allocs) be.free(p);
  if (wsp) be.free(wsp);
  return res;
}

Host make(const Shape& s, DType t, uint32_t seed) {
  std::mt19937 g(seed);
  const size_t n = static_cast<size_t>(s.B * s.T() * s.C), bc = static_cast<size_t>(s.B * s.C);
  Host h{randn(n, g, 2.f), randn(bc, g), randn(bc, g, 0.5f), randn(n, g), randn(n, g)};
  for (size_t i = 0; i < n; ++i) h.x[i] += 0.3f * static_cast<float>((i / static_cast<size_t>(s.C)) % 5);
  for (auto* v : {&h.x, &h.shift, &h.scale, &h.dout, &h.dinp0}) *v = round_to(t, *v);  // both sides see the same
  return h;
}

void compare(const Shape& s, DType t) {
  SCOPED_TRACE(s.label() + " " + dtype_name(t));
  const Host h = make(s, t, 3);
  auto cpu = make_cpu_backend();
  const Results ref = run(*cpu, DType::f32, s, h, 1)[0];
  auto gpu = make_backend(DeviceKind::cuda);
  const std::vector<Results> got = run(*gpu, t, s, h, 2);
  const double tl = tol(t, 1e-5);
  EXPECT_LT(rel_err(got[0].out, ref.out), tl);
  EXPECT_LT(rel_err(got[0].rstd, ref.rstd), 1e-5);
  if (s.norm == NormKind::layer) EXPECT_LT(rel_err(got[0].mean, ref.mean), 1e-5);
  // dinp accumulates into a start of its own size: compare the change
  std::vector<float> dg(got[0].dinp.size()), dr(ref.dinp.size());
  for (size_t i = 0; i < dg.size(); ++i) dg[i] = got[0].dinp[i] - h.dinp0[i], dr[i] = ref.dinp[i] - h.dinp0[i];
  EXPECT_LT(rel_err(dg, dr), t == DType::f32 ? 1e-5 : 3e-2);  // bf16: dinp rounded after the add
  EXPECT_LT(rel_err(got[0].dshift, ref.dshift), tl);
  EXPECT_LT(rel_err(got[0].dscale, ref.dscale), tl);
  // deterministic: the second backward repeats the first bit for bit
  EXPECT_EQ(got[1].dinp, got[0].dinp);
  EXPECT_EQ(got[1].dshift, got[0].dshift);
  EXPECT_EQ(got[1].dscale, got[0].dscale);
}

void expect_ok(const ops::Result& r) {
  for (const auto& n : r.notes) std::printf("  %s\n", n.c_str());
  for (const auto& f : r.failures) ADD_FAILURE() << f;
}

}  // namespace

TEST(GPU_NormModulate, DitShapeMatchesCpu) {
  GPU_SKIP_IF_NONE();
  for (NormKind k : {NormKind::layer, NormKind::rms})
    for (DType t : {DType::f32, DType::bf16}) compare({4, 256, 1, 384, 0, 0, k}, t);
}

TEST(GPU_NormModulate, CdeitWindowsMatchCpu) {
  GPU_SKIP_IF_NONE();
  for (NormKind k : {NormKind::layer, NormKind::rms})
    for (int shift : {0, 8})
      for (DType t : {DType::f32, DType::bf16}) compare({2, 32, 32, 64, 16, shift, k}, t);
}

TEST(GPU_NormModulate, CNotMultipleOfPackMatchesCpu) {
  GPU_SKIP_IF_NONE();
  for (NormKind k : {NormKind::layer, NormKind::rms})
    for (DType t : {DType::f32, DType::bf16}) {
      compare({3, 50, 1, 37, 0, 0, k}, t);    // one backward chunk a sample: dshift/dscale direct
      compare({2, 8, 8, 37, 4, 2, k}, t);     // windows, element path
      compare({2, 100, 1, 2056, 0, 0, k}, t); // packs, but rows too wide for the register kernels
    }
}

// Every dtype and more shapes, through the op table (fp16 included).
TEST(GPU_NormModulate, TableCasesMatchCpu) {
  GPU_SKIP_IF_NONE();
  for (const char* op : {"norm_modulate_fwd_layer", "norm_modulate_bwd_layer", "norm_modulate_fwd_rms",
                         "norm_modulate_bwd_rms", "norm_modulate_win_fwd_layer", "norm_modulate_win_bwd_layer",
                         "norm_modulate_win_fwd_rms", "norm_modulate_win_bwd_rms"}) {
    const ops::OpCase* c = ops::find_op(op);
    ASSERT_NE(c, nullptr) << op;
    for (Precision p : {Precision::fp32, Precision::bf16, Precision::fp16})
      expect_ok(ops::run_test(*c, DeviceKind::cuda, p));
  }
}

// The backward's chunk partials need scratch at large B*T (DiT-S B=256, CDEIT B=32 T=4096);
// a workspace sized without OpShape::norm_modulate is refused with a message naming it.
TEST(GPU_NormModulate, ScratchIsPlannedAndChecked) {
  GPU_SKIP_IF_NONE();
  auto be = make_backend(DeviceKind::cuda);
  const std::vector<OpShape> none{OpShape::elementwise(1)};
  const std::vector<OpShape> dit{OpShape::norm_modulate(256, 256, 384)}, cdeit{OpShape::norm_modulate(32, 4096, 512)};
  EXPECT_GT(be->workspace_bytes(dit, Precision::bf16), be->workspace_bytes(none, Precision::bf16));
  EXPECT_GT(be->workspace_bytes(cdeit, Precision::bf16), be->workspace_bytes(none, Precision::bf16));
  const int64_t B = 32, T = 4096, C = 512;  // 4 MB of chunk partials
  const size_t ws = be->workspace_bytes(none, Precision::bf16);
  void* wsp = be->alloc(ws);
  be->set_workspace(wsp, ws);
  Tensor x(nullptr, DType::bf16, {B, T, C}), dout = x, dinp = x, rows(nullptr, DType::bf16, {B, C});
  Tensor rstd(nullptr, DType::f32, {B * T}), mean = rstd, dsh = rows, dsc = rows;
  for (Tensor* p : {&x, &dout, &dinp, &rows, &rstd, &mean, &dsh, &dsc}) p->data = be->alloc(p->bytes());
  be->zero(x), be->zero(rows), be->zero(rstd), be->zero(mean);
  try {
    be->norm_modulate_backward(dinp, dsh, dsc, dout, x, mean, rstd, rows, NormModulateOptions{});
    ADD_FAILURE() << "a workspace without OpShape::norm_modulate was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("OpShape::norm_modulate"), std::string::npos) << e.what();
  }
  for (Tensor* p : {&x, &dout, &dinp, &rows, &rstd, &mean, &dsh, &dsc}) be->free(p->data);
  be->free(wsp);
}

namespace {

// The bytes of a device tensor, for bitwise comparisons.
std::vector<unsigned char> bytes_of(Backend& be, Tensor x) {
  be.synchronize();
  std::vector<unsigned char> v(x.bytes());
  be.copy_to_host(v.data(), x.data, x.bytes());
  return v;
}

// Random values, scaled, in x (a tensor of env's).
void put_randn(GpuEnv& env, Tensor x, std::mt19937& rng, float scale) {
  env.put(x, randn(static_cast<size_t>(x.numel()), rng, scale));
}

// Backend::gated_residual_norm_modulate_forward on CUDA (one pass) against the two ops it
// replaces, on the same device and inputs: r, out and the statistics agree to the last bit,
// since the fused kernel rounds r as the gated residual does and takes the statistics from r
// as stored. y in token order (DiT) and in window order (CDEIT's middle, shift 0 and 8), or
// out in window order (CDEIT's block ends: the closing gated residual into the next block's
// first norm), in bf16 and f32; C = 2056 has no register kernel and takes the two ops inside
// the call.
enum class Windowed { y, out };
void residual_front_matches(int64_t B, int64_t H, int64_t W, int64_t C, int window, int wshift, NormKind k,
                            DType t, Windowed which = Windowed::y) {
  GpuEnv env(OpDims{1, 1, 64, 1, 64, 64});
  Backend& be = env.be();
  const int64_t T = H * W, N = B * T;
  const std::string what = std::string(k == NormKind::rms ? "rms" : "layer") + " " + dtype_name(t) + " B" +
                           std::to_string(B) + " " + std::to_string(H) + "x" + std::to_string(W) + " C" +
                           std::to_string(C) + " w" + std::to_string(window) + " s" + std::to_string(wshift) +
                           (which == Windowed::out ? " (out windowed)" : "");
  std::mt19937 rng(7);
  Tensor res = env.tensor(t, {B, T, C}), y = env.tensor(t, {B, T, C}), gate = env.tensor(t, {B, C});
  Tensor shift = env.tensor(t, {B, C}), scale = env.tensor(t, {B, C});
  put_randn(env, res, rng, 2.f), put_randn(env, y, rng, 1.f), put_randn(env, gate, rng, 0.5f);
  put_randn(env, shift, rng, 1.f), put_randn(env, scale, rng, 0.5f);
  WindowOrder yo;
  NormModulateOptions o;
  o.norm = k;
  if (window > 0) (which == Windowed::y ? yo : o.out_order) = WindowOrder{int(H), int(W), window, wshift};
  const bool layer = k == NormKind::layer;
  Tensor r[2], out[2], mean[2], rstd[2];
  for (int i = 0; i < 2; ++i) {
    r[i] = env.tensor(t, {B, T, C}), out[i] = env.tensor(t, {B, T, C}), rstd[i] = env.tensor(DType::f32, {N});
    mean[i] = layer ? env.tensor(DType::f32, {N}) : Tensor();
  }
  be.gated_residual_norm_modulate_forward(r[0], out[0], mean[0], rstd[0], res, y, gate, yo, shift, scale, o);
  be.gated_residual_forward(r[1], res, y, gate, yo);
  be.norm_modulate_forward(out[1], mean[1], rstd[1], r[1], shift, scale, o);
  EXPECT_EQ(bytes_of(be, r[0]), bytes_of(be, r[1])) << what << ": r";
  EXPECT_EQ(bytes_of(be, out[0]), bytes_of(be, out[1])) << what << ": out";
  EXPECT_EQ(bytes_of(be, rstd[0]), bytes_of(be, rstd[1])) << what << ": rstd";
  if (layer) EXPECT_EQ(bytes_of(be, mean[0]), bytes_of(be, mean[1])) << what << ": mean";
}

// Backend::norm_modulate_gated_residual_backward in one pass (a backend made with
// FT_RESIDUAL_NORM=fused) against the two ops (one made with FT_RESIDUAL_NORM=separate), on
// the same device and inputs: dr, dy, dshift and dscale agree to the last bit (the same row
// arithmetic and the same chunked sums); dgate and the bias columns are summed in another
// order and agree to rounding.
struct BwdRun {
  std::vector<float> dr, dshift, dscale, dy, dgate, dbias;
};
// which: the side in window order (window > 0); alias: dy written over y (a block's end,
// whose branch output is not read again).
BwdRun residual_backward_on(GpuEnv& env, int64_t B, int64_t H, int64_t W, int64_t C, int window, NormKind k,
                            Windowed which = Windowed::y, bool alias = false) {
  Backend& be = env.be();
  const int64_t T = H * W, N = B * T;
  const std::vector<OpShape> ops{OpShape::norm_modulate(B, T, C)};
  const size_t ws = be.workspace_bytes(ops, Precision::bf16);
  be.set_workspace(env.take(ws), ws);
  std::mt19937 rng(11);
  const DType t = DType::bf16;
  ResidualNormGrads g;
  g.o.norm = k;
  g.dr = env.tensor(t, {B, T, C}), g.dout = env.tensor(t, {B, T, C}), g.r = env.tensor(t, {B, T, C});
  g.dshift = env.tensor(t, {B, C}), g.dscale = env.tensor(t, {B, C}), g.scale = env.tensor(t, {B, C});
  g.rstd = env.tensor(DType::f32, {N});
  if (k == NormKind::layer) g.mean = env.tensor(DType::f32, {N});
  g.dgate = env.tensor(t, {B, C});
  g.y = env.tensor(t, {B, T, C}), g.gate = env.tensor(t, {B, C});
  g.dy = alias ? g.y : env.tensor(t, {B, T, C});
  g.dbias_y = env.tensor(t, {C});
  if (window > 0) (which == Windowed::y ? g.y_order : g.o.out_order) = WindowOrder{int(H), int(W), window, 0};
  put_randn(env, g.r, rng, 2.f), put_randn(env, g.scale, rng, 0.5f), put_randn(env, g.dout, rng, 1.f);
  put_randn(env, g.dr, rng, 1.f), put_randn(env, g.y, rng, 1.f), put_randn(env, g.gate, rng, 0.5f);
  put_randn(env, g.dbias_y, rng, 1.f);
  Tensor shift = env.tensor(t, {B, C}), out = env.tensor(t, {B, T, C});
  put_randn(env, shift, rng, 1.f);
  be.norm_modulate_forward(out, g.mean, g.rstd, g.r, shift, g.scale, g.o);  // the statistics
  be.norm_modulate_gated_residual_backward(g);
  return {env.get(g.dr), env.get(g.dshift), env.get(g.dscale), env.get(g.dy), env.get(g.dgate), env.get(g.dbias_y)};
}

// A CUDA backend made with FT_RESIDUAL_NORM=mode (its switches are read when it is made), and
// FT_RESIDUAL_NORM_STAGED=staged where given (else unset: the default).
std::unique_ptr<GpuEnv> env_with_residual_norm(const char* mode, const char* staged = nullptr) {
  ScopedEnv e("FT_RESIDUAL_NORM", mode), s("FT_RESIDUAL_NORM_STAGED", staged);
  return std::make_unique<GpuEnv>(OpDims{1, 1, 64, 1, 64, 64});
}

// A fused backward case: the shape, the norm, the side in window order and dy over y.
struct BwdCase {
  int64_t B, H, W, C;
  int window;
  NormKind k;
  Windowed which = Windowed::y;
  bool alias = false;
  BwdRun on(GpuEnv& env) const { return residual_backward_on(env, B, H, W, C, window, k, which, alias); }
  std::string what() const {
    return "B" + std::to_string(B) + " " + std::to_string(H) + "x" + std::to_string(W) + " C" + std::to_string(C) +
           " w" + std::to_string(window) + (which == Windowed::out ? " (norm in windows)" : "") +
           (alias ? " dy over y" : "");
  }
};
// (C = 768: rows wider than the fused kernel takes, the two ops inside the call; the last
// two: a block's end, the norm's rows in windows or tokens and dy written over y)
const std::vector<BwdCase> kFusedBackwardCases = {
    {4, 256, 1, 384, 0, NormKind::layer},  {2, 64, 64, 512, 16, NormKind::rms},
    {3, 9, 1, 64, 0, NormKind::rms},       {2, 16, 16, 128, 8, NormKind::layer},
    {2, 40, 1, 768, 0, NormKind::layer},   {2, 64, 64, 512, 16, NormKind::rms, Windowed::out, true},
    {4, 256, 1, 384, 0, NormKind::layer, Windowed::y, true}};

// The outputs both tests hold bitwise: the rows (dr, dy) and the modulation's column sums.
void expect_rows_and_modulation_sums_equal(const BwdRun& a, const BwdRun& b, const std::string& what) {
  EXPECT_EQ(a.dr, b.dr) << what;
  EXPECT_EQ(a.dy, b.dy) << what;
  EXPECT_EQ(a.dshift, b.dshift) << what;
  EXPECT_EQ(a.dscale, b.dscale) << what;
}

}  // namespace

TEST(GPU_NormModulate, GatedResidualInFrontMatchesTheTwoOpsBitwise) {
  GPU_SKIP_IF_NONE();
  for (NormKind k : {NormKind::layer, NormKind::rms})
    for (DType t : {DType::bf16, DType::f32}) {
      residual_front_matches(4, 256, 1, 384, 0, 0, k, t);  // DiT-S-like, y in token order
      residual_front_matches(2, 32, 32, 512, 16, 0, k, t);  // CDEIT's first stage, y in window order
      residual_front_matches(2, 32, 32, 64, 16, 8, k, t);   // shifted windows
      residual_front_matches(2, 32, 32, 512, 16, 0, k, t, Windowed::out);  // CDEIT's block ends
      residual_front_matches(2, 32, 32, 64, 16, 8, k, t, Windowed::out);
      residual_front_matches(2, 30, 1, 2056, 0, 0, k, t);   // no register kernel: the two ops
    }
  // every dtype and the op table's shapes: GPU_OpTable.residual_norm_modulate_*
}

TEST(GPU_NormModulate, FusedBackwardWithTheGatedResidualMatchesTheTwoOps) {
  GPU_SKIP_IF_NONE();
  for (const BwdCase& c : kFusedBackwardCases) {
    auto fused = env_with_residual_norm("fused"), separate = env_with_residual_norm("separate");
    const BwdRun a = c.on(*fused), b = c.on(*separate);
    const std::string what = c.what();
    expect_rows_and_modulation_sums_equal(a, b, what);
    EXPECT_LT(rel_err(a.dgate, b.dgate), 1e-2) << what;
    EXPECT_LT(rel_err(a.dbias, b.dbias), 1e-2) << what;
    // a second run gives the same bits (fixed-order sums)
    const BwdRun a2 = c.on(*fused);
    EXPECT_EQ(a.dgate, a2.dgate) << what;
    EXPECT_EQ(a.dbias, a2.dbias) << what;
  }
}

// The fused backward's cp.async-staged kernel (FT_RESIDUAL_NORM_STAGED=1) does each row's
// arithmetic and each sum in the register kernel's order, from the same bytes: every output
// matches it bitwise, over the same cases (rows in windows or tokens, dy written over y, rows
// too wide for either kernel).
TEST(GPU_NormModulate, StagedFusedBackwardMatchesTheRegisterKernelBitwise) {
  GPU_SKIP_IF_NONE();
  std::vector<BwdCase> cases = kFusedBackwardCases;
  cases.push_back({5, 7, 1, 24, 0, NormKind::layer});
  for (const BwdCase& c : cases) {
    // each case its own pools, as above
    auto staged = env_with_residual_norm("fused", "1"), regs = env_with_residual_norm("fused", "0");
    const BwdRun a = c.on(*staged), b = c.on(*regs);
    const std::string what = c.what();
    expect_rows_and_modulation_sums_equal(a, b, what);
    EXPECT_EQ(a.dgate, b.dgate) << what;
    EXPECT_EQ(a.dbias, b.dbias) << what;
  }
}

}  // namespace ft::gputest
