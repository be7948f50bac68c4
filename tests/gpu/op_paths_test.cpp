// CUDA code paths the op table (tests/ops/) does not reach with the backend's defaults, each
// checked against the table's CPU reference with the table's own case: the backend switch
// (read when a backend is created, so set around the run, which creates them) selects the
// path, and the backend fails rather than falls back, so the test checks the path it names.
//   FT_ATTENTION=fittrain with FT_ATTENTION_BACKWARD=library: our tensor-core kernels in
//     bf16/f16 too (the default takes cuDNN there, and the one-pass backward at T = 64), and
//     their backward is deterministic (cuDNN's is not), for every mask;
//   FT_ATTENTION=cudnn: cuDNN's fused engines (bf16/f16 only), causal and non-causal;
//   FT_ATTENTION_BACKWARD=onepass / wgmma: the one-pass backward of short non-causal rows and
//     its Hopper (wgmma) form, after either forward (and their refusal of shapes they do not fit;
//     =library against auto: the workspace planned for cuDNN's backward);
//   FT_CLASSIFIER=twopass / staged: both classifier kernels (the default picks one);
//   FT_BGRAD_EPILOGUE_STRICT=1 FT_NO_BGRAD_EPILOGUE=0: cuBLASLt's BGRADB bias-gradient
//     epilogue (the default is fittrain's reduction);
//   FT_SILU_BIAS=rows / tiles: the SiLU backward's bias-summing kernel with rows staged in
//     registers and in its column-tile layout (the default stages the table's rows through
//     shared memory);
//   FT_SILU_MATMUL=cudnn / off: a SiLU MLP's second product through cuDNN's fused plan and
//     through the SiLU pass + cuBLASLt product (the default times both on a shape's first call).
#include <cmath>
#include <cstdio>
#include <string>

#include "gpu_test_util.h"
#include "ops/op_table.h"

namespace ft::gputest {

namespace {

using ops::Dims;

constexpr Precision kAll[] = {Precision::fp32, Precision::bf16, Precision::fp16};

// Runs table case `op` (optionally made deterministic) at `shapes` (none: the case's own) with
// the switches set.
ops::Result run_path(const std::string& op, Precision p, const std::vector<Dims>& shapes,
                     std::initializer_list<std::pair<const char*, const char*>> env,
                     bool deterministic = false) {
  const ops::OpCase* found = ops::find_op(op);
  EXPECT_NE(found, nullptr) << op;
  if (!found) return {};
  ops::OpCase c = *found;
  if (deterministic) c.deterministic = true;
  std::vector<std::unique_ptr<ScopedEnv>> set;
  for (auto [k, v] : env) set.push_back(std::make_unique<ScopedEnv>(k, v));
  return ops::run_test(c, DeviceKind::cuda, p, shapes.empty() ? c.shapes : shapes);
}

void expect_ok(const ops::Result& r) {
  for (const auto& n : r.notes) std::printf("  %s\n", n.c_str());
  for (const auto& f : r.failures) ADD_FAILURE() << f;
}

Dims attn(int64_t B, int64_t T, int64_t NH, int64_t HS, bool causal = true) {
  Dims d;
  d.B = B, d.T = T, d.NH = NH, d.C = NH * HS, d.causal = causal;
  return d;
}
Dims cls(int64_t B, int64_t T, int64_t Vp, int64_t V) {
  Dims d;
  d.B = B, d.T = T, d.Vp = Vp, d.V = V;
  return d;
}

}  // namespace

// Every shape of the table's attention cases (causal or not, with and without per-sample
// lengths, packed samples; padded rows exactly 0 and sample starts exactly their own v are
// the case's own checks) through fittrain's kernels.
TEST(GPU_Attention, FittrainPathMatchesCpuAndRepeats) {
  GPU_SKIP_IF_NONE();
  const std::vector<Dims>& shapes = ops::find_op("attention_fwd")->shapes;
  for (Precision p : kAll) {
    expect_ok(run_path("attention_fwd", p, shapes, {{"FT_ATTENTION", "fittrain"}}));
    expect_ok(run_path("attention_bwd", p, shapes,
                       {{"FT_ATTENTION", "fittrain"}, {"FT_ATTENTION_BACKWARD", "library"}}, true));
  }
}

// cuDNN before 9.16 runs the backward only for key lengths that are multiples of 128; these
// shapes run on every cuDNN 9, causal and not (cuDNN has no padding mask here: varlen shapes
// always take fittrain's kernels). Its backward accumulates dQ with atomics: the two calls
// are each compared with the reference, not with each other bitwise.
TEST(GPU_Attention, CudnnMatchesCpu) {
  GPU_SKIP_IF_NONE();
#ifndef FITTRAIN_HAVE_CUDNN
  GTEST_SKIP() << "this build has no cuDNN";
#endif
  const std::vector<Dims> shapes = {attn(2, 256, 3, 64),        attn(1, 128, 2, 32),
                                    attn(1, 384, 1, 128),       attn(2, 256, 3, 64, false),
                                    attn(1, 128, 2, 32, false)};
  for (Precision p : {Precision::bf16, Precision::fp16}) {
    expect_ok(run_path("attention_fwd", p, shapes, {{"FT_ATTENTION", "cudnn"}}));
    expect_ok(run_path("attention_bwd", p, shapes, {{"FT_ATTENTION", "cudnn"}}));
  }
}

// The one-pass backward (attention_onepass.cu) after either forward: cuDNN's, whose saved
// log-sum-exp is in natural log, and fittrain's tensor-core kernels' (base 2). Its shapes only
// (non-causal, unpadded, T = 64, 128, 256, head size 64): FT_ATTENTION_BACKWARD=onepass fails
// anywhere else, so the path checked is the one named. No atomics: both calls bit-identical.
// Both block layouts (FT_ATTN_ONEPASS_KEYS) run every shape.
TEST(GPU_Attention, OnePassBackwardMatchesCpuAfterEitherForwardAndRepeats) {
  GPU_SKIP_IF_NONE();
  const std::vector<Dims> shapes = {attn(2, 256, 3, 64, false), attn(3, 128, 2, 64, false),
                                    attn(5, 64, 2, 64, false)};
  for (const char* keys : {"16", "32"}) {  // both block layouts: 16 or 32 keys a warp
    ScopedEnv layout("FT_ATTN_ONEPASS_KEYS", keys);
    for (Precision p : {Precision::bf16, Precision::fp16}) {
      expect_ok(run_path("attention_bwd", p, shapes,
                         {{"FT_ATTENTION", "fittrain"}, {"FT_ATTENTION_BACKWARD", "onepass"}}, true));
#ifdef FITTRAIN_HAVE_CUDNN
      // cuDNN before 9.16 runs key lengths that are multiples of 128 only
      expect_ok(run_path("attention_bwd", p, {shapes[0], shapes[1]},
                         {{"FT_ATTENTION", "cudnn"}, {"FT_ATTENTION_BACKWARD", "onepass"}}, true));
#endif
    }
  }
}

// Where the one-pass backward does not fit, FT_ATTENTION_BACKWARD=onepass names the shape
// instead of falling back.
TEST(GPU_Attention, OnePassBackwardRefusesShapesItDoesNotFit) {
  GPU_SKIP_IF_NONE();
  const ops::Result r = run_path("attention_bwd", Precision::bf16, {attn(1, 128, 2, 64, true)},
                                 {{"FT_ATTENTION_BACKWARD", "onepass"}});
  ASSERT_FALSE(r.failures.empty());
  EXPECT_NE(r.failures.front().find("FT_ATTENTION_BACKWARD=onepass"), std::string::npos) << r.failures.front();
}

// The wgmma backward (sm90/attention_wgmma.cu) at the one-pass kernel's shapes, after either
// forward, bit-identical on repeat (no atomics); CDEIT's window layout (8 heads: rows of 3 x 512)
// too. FT_ATTENTION_BACKWARD=wgmma fails where it does not fit, so the path checked is the one
// named; it fits sm_90 only, and other cards skip.
TEST(GPU_Attention, WgmmaBackwardMatchesCpuAfterEitherForwardAndRepeats) {
  GPU_SKIP_IF_NONE();
  if (gpu_compute_capability_major() != 9) GTEST_SKIP() << "the wgmma backward runs on sm_90 only";
  const std::vector<Dims> shapes = {attn(2, 256, 3, 64, false), attn(3, 128, 2, 64, false),
                                    attn(5, 64, 2, 64, false), attn(3, 256, 8, 64, false)};
  for (Precision p : {Precision::bf16, Precision::fp16}) {
    expect_ok(run_path("attention_bwd", p, shapes,
                       {{"FT_ATTENTION", "fittrain"}, {"FT_ATTENTION_BACKWARD", "wgmma"}}, true));
#ifdef FITTRAIN_HAVE_CUDNN
    expect_ok(run_path("attention_bwd", p, {shapes[0], shapes[1], shapes[3]},
                       {{"FT_ATTENTION", "cudnn"}, {"FT_ATTENTION_BACKWARD", "wgmma"}}, true));
#endif
  }
}

// Where the wgmma backward does not fit (causal; T = 384), =wgmma names the shape.
TEST(GPU_Attention, WgmmaBackwardRefusesShapesItDoesNotFit) {
  GPU_SKIP_IF_NONE();
  for (const Dims& d : {attn(1, 128, 2, 64, true), attn(1, 384, 2, 64, false)}) {
    const ops::Result r = run_path("attention_bwd", Precision::bf16, {d}, {{"FT_ATTENTION_BACKWARD", "wgmma"}});
    ASSERT_FALSE(r.failures.empty());
    EXPECT_NE(r.failures.front().find("FT_ATTENTION_BACKWARD=wgmma"), std::string::npos) << r.failures.front();
  }
}

// cuDNN's attention backward keeps an fp32 dQ in the op scratch; the plan holds it only where
// cuDNN runs the backward (CudaBackendBase::cudnn_scratch): with the wgmma backward (auto at
// T = 256 on sm_90) CDEIT's window shape at batch 32 plans at least that dQ (268 MiB) less than
// with cuDNN's (=library); a causal shape, cuDNN's backward either way, plans the same.
TEST(GPU_Attention, CudnnBackwardWorkspacePlannedOnlyWhereCudnnRunsIt) {
  GPU_SKIP_IF_NONE();
#ifndef FITTRAIN_HAVE_CUDNN
  GTEST_SKIP() << "this build has no cuDNN";
#endif
  if (gpu_compute_capability_major() != 9) GTEST_SKIP() << "the wgmma backward runs on sm_90 only";
  const std::vector<OpShape> windows{OpShape::attention(512, 256, 8, 64, false)};
  const std::vector<OpShape> causal{OpShape::attention(8, 1024, 12, 64, true)};
  auto planned = [](const std::vector<OpShape>& ops, const char* backward) {
    ScopedEnv sw("FT_ATTENTION_BACKWARD", backward);  // read when the backend is made
    return make_backend(DeviceKind::cuda)->workspace_bytes(ops, Precision::bf16);
  };
  const size_t own = planned(windows, "auto"), library = planned(windows, "library");
  EXPECT_GE(library, own + size_t{512} * 8 * 256 * 64 * 4) << "own " << own << ", library " << library;
  EXPECT_EQ(planned(causal, "auto"), planned(causal, "library"));
}

// A SiLU MLP's second product both ways: cuDNN's fused plan (FT_SILU_MATMUL=cudnn: the
// SiLU a prologue of the product, so `act`, NaN before the call, is never written) and the
// SiLU pass + cuBLASLt product (=off: `act` holds silu(x)). Shapes of whole packs (the fused
// path's), with and without bias, and CDEIT's second stage at batch 8 (8192 rows of 2048).
TEST(GPU_SiluMatmul, CudnnAndSeparatePathsMatchCpu) {
  GPU_SKIP_IF_NONE();
#ifndef FITTRAIN_HAVE_CUDNN
  GTEST_SKIP() << "this build has no cuDNN";
#endif
  Dims cdeit;
  cdeit.B = 8, cdeit.T = 1024, cdeit.C = 2048, cdeit.OC = 512, cdeit.silu_product = true;
  Dims small = cdeit;
  small.B = 1, small.T = 300, small.C = 256, small.OC = 64;
  Dims nobias = small;
  nobias.bias = false;
  const ops::OpCase* found = ops::find_op("silu_matmul_fwd");
  ASSERT_NE(found, nullptr);
  for (const char* path : {"cudnn", "off"}) {
    ops::OpCase c = *found;
    const bool fused = std::string(path) == "cudnn";
    // which path ran shows in act: untouched (NaN) when fused, silu(x) otherwise
    c.extra = [fused](const Dims&, Precision, const ops::HostSet& in, const ops::Values& got) {
      std::vector<std::string> f;
      const std::vector<double>& act = got.at("act");
      const ops::HostBuf* x = in.find("x");
      size_t nan = 0;
      for (double v : act) nan += std::isnan(v) ? 1 : 0;
      if (fused && nan != act.size()) f.push_back("the fused path wrote act (" + std::to_string(act.size() - nan) + " values)");
      if (!fused) {
        double worst = 0;
        for (size_t i = 0; i < act.size(); ++i) {
          const double xv = x->f[i], s = xv / (1 + std::exp(-xv));
          worst = std::max(worst, std::fabs(act[i] - s) / (1 + std::fabs(s)));
        }
        if (!(worst < 2e-2)) f.push_back("act is not silu(x): worst error " + std::to_string(worst));
      }
      return f;
    };
    ScopedEnv env("FT_SILU_MATMUL", path);
    for (Precision p : {Precision::bf16, Precision::fp16})
      expect_ok(ops::run_test(c, DeviceKind::cuda, p, {small, nobias, cdeit}));
  }
}

// Planning a SiLU product counts cuDNN's workspace cap (CudnnSiluMatmul::kMaxWorkspace) and
// builds no cuDNN plan: building one compiles its kernels (seconds a shape on a fresh
// machine), and the fit asks about shapes training never runs. FT_CUDNN_VERBOSE names every
// SiLU plan built, so a build would show in stderr.
TEST(GPU_SiluMatmul, PlanningBuildsNoCudnnPlan) {
  GPU_SKIP_IF_NONE();
#ifndef FITTRAIN_HAVE_CUDNN
  GTEST_SKIP() << "this build has no cuDNN";
#endif
  ScopedEnv verbose("FT_CUDNN_VERBOSE", "1");
  std::unique_ptr<Backend> be = make_backend(DeviceKind::cuda);
  const size_t none = be->workspace_bytes(std::span<const OpShape>{}, Precision::bf16);
  testing::internal::CaptureStderr();
  size_t with = 0;
  for (int64_t n : {64, 2112, 131072}) {
    const std::vector<OpShape> ops{OpShape::silu_matmul(n, 2048, 512)};
    with = std::max(with, be->workspace_bytes(ops, Precision::bf16));
  }
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(err.find("SiLU product"), std::string::npos) << err;
  // the op scratch is shared, the largest need rather than a sum: `none` already holds the
  // gradient norm's few KiB, which the cap then covers
  EXPECT_GE(with, none + (size_t{7} << 20)) << "none " << none << ", with " << with;
  EXPECT_LE(with, none + (size_t{8} << 20)) << "none " << none << ", with " << with;
  const std::vector<OpShape> small{OpShape::silu_matmul(64, 2048, 512)};
  EXPECT_EQ(be->workspace_bytes(small, Precision::fp32), be->workspace_bytes(std::span<const OpShape>{}, Precision::fp32));
}

// The two-pass kernel (each row read twice) at a short row, GPT-2's width and more rows than SMs.
TEST(GPU_Classifier, TwoPassKernelMatchesCpu) {
  GPU_SKIP_IF_NONE();
  const std::vector<Dims> shapes = {cls(3, 17, 1088, 1050), cls(3, 17, 50304, 50257),
                                    cls(20, 50, 1088, 1050)};
  for (Precision p : kAll)
    expect_ok(run_path("classifier", p, shapes, {{"FT_CLASSIFIER", "twopass"}}));
}

// The staged kernel itself at GPT-2's width (bf16/f16: two rows are 196 KiB of shared
// memory) and with 5 rows per SM.
TEST(GPU_Classifier, StagedKernelMatchesCpu) {
  GPU_SKIP_IF_NONE();
  for (Precision p : {Precision::bf16, Precision::fp16})
    expect_ok(run_path("classifier", p, {cls(3, 17, 50304, 50257)}, {{"FT_CLASSIFIER", "staged"}}));
  for (Precision p : kAll)
    expect_ok(run_path("classifier", p, {cls(5, 150, 8192, 8000)}, {{"FT_CLASSIFIER", "staged"}}));
}

// dbias through the dW product's BGRADB epilogue: it must ADD onto a non-zero dbias (the
// epilogue itself overwrites), with and without dinp, and repeat bitwise. bf16/f16 must have
// the epilogue (strict: the backend throws instead of falling back); fp32 may lack it.
TEST(GPU_Matmul, BiasGradEpilogueMatchesCpu) {
  GPU_SKIP_IF_NONE();
  Dims d;  // N = 518 rows is not a multiple of any tile, OC = 200 not a multiple of 64
  d.B = 2, d.T = 259, d.C = 96, d.OC = 200;
  for (Precision p : kAll)
    for (const char* op : {"matmul_bwd", "matmul_bwd_weights", "matmul_bwd_overwrite"}) {
      const ops::Result r = run_path(op, p, {d},
                                     {{"FT_BGRAD_EPILOGUE_STRICT", "1"}, {"FT_NO_BGRAD_EPILOGUE", "0"}});
      if (p == Precision::fp32 && !r.failures.empty() &&
          r.failures[0].find("threw") != std::string::npos) {
        std::printf("[bgrad epilogue] fp32: cuBLASLt has none here (falls back): %s\n",
                    r.failures[0].c_str());
        continue;
      }
      expect_ok(r);
    }
}

// Operands at 16 bytes past a 256-byte boundary (the least the product takes; a packed
// parameter table or an arena piece can sit there): cuBLASLt is told each pointer's alignment
// and keys its chosen algorithm on it (it assumed 256 bytes, and an algorithm chosen for aligned
// operands was reused for others). The same product, aligned and not, agrees to rounding.
TEST(GPU_Matmul, OperandsAlignedTo16BytesOnlyGiveTheAlignedResult) {
  GPU_SKIP_IF_NONE();
  const int64_t N = 256, C = 512, OC = 384;
  GpuEnv env(OpDims{2, 128, C, 4, OC, OC});  // N = B T = 256 rows, a product to OC = Vp
  Backend& be = env.be();
  for (DType t : {DType::bf16, DType::f32}) {
    std::vector<float> x(N * C), w(OC * C), b(OC);
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i));
    for (size_t i = 0; i < w.size(); ++i) w[i] = 0.05f * std::cos(0.11f * static_cast<float>(i));
    for (size_t i = 0; i < b.size(); ++i) b[i] = 0.01f * static_cast<float>(i % 7);
    const Tensor xa = env.upload(t, {N, C}, x), wa = env.upload(t, {OC, C}, w), ba = env.upload(t, {OC}, b);
    const Tensor outa = env.tensor(t, {N, OC});
    be.matmul_forward(outa, xa, wa, ba);
    const std::vector<float> want = env.get(outa);
    // 16 bytes past the 256-aligned piece the pool hands out
    auto shifted = [&](int64_t rows, int64_t cols, const std::vector<float>* v) {
      const Tensor big = env.tensor(t, {rows * cols + 16 / static_cast<int64_t>(dtype_size(t))});
      const Tensor x16(static_cast<char*>(big.data) + 16, t, {rows, cols});
      if (v) env.put(x16, *v);
      return x16;
    };
    const Tensor xs = shifted(N, C, &x), ws = shifted(OC, C, &w), outs = shifted(N, OC, nullptr);
    be.matmul_forward(outs, xs, ws, ba);
    EXPECT_LT(rel_err(env.get(outs), want), t == DType::f32 ? 1e-5 : 1e-2) << dtype_name(t);
    be.matmul_forward(outa, xa, wa, ba);  // and the aligned call again, after the other was cached
    EXPECT_LT(rel_err(env.get(outa), want), t == DType::f32 ? 1e-6 : 1e-3) << dtype_name(t);
  }
}

// SiLU's backward with the bias gradient in the kernels the default does not take for the
// table's shapes (rows of whole packs, up to 256 of them): rows staged in registers and the
// column tiles.
TEST(GPU_Silu, BiasLayoutsMatchCpu) {
  GPU_SKIP_IF_NONE();
  for (Precision p : kAll)
    for (const char* layout : {"rows", "tiles"})
      for (const char* op : {"silu_bwd_recompute_bias", "silu_bwd_bias"})  // with and without silu's write
        expect_ok(run_path(op, p, {}, {{"FT_SILU_BIAS", layout}}));
}

}  // namespace ft::gputest
