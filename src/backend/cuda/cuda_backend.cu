// CudaBackend: implements every Backend op by checking dtypes and shapes, then calling the
// op family's launcher (cuda_ops.cuh) on the backend's one stream. Storage is f32, bf16 or
// f16; math is fp32 everywhere; the environment switches between implementations: switches.h.
// Memory: alloc is one cudaMalloc per arena; nothing else allocates device memory. The planned
// workspace is split into the cuBLASLt workspace (first kCublasWorkspace bytes) and the op
// scratch that the other families share (they run one at a time on the stream).
#include <algorithm>
#include <optional>
#include <string>

#include "backend/cuda/backend_checks.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_ops.cuh"
#include "backend/cuda/process_memory.h"
#include "backend/cuda/switches.h"
#include "backend/kv_shapes.h"

namespace ft {

namespace {

// fault_for_test's kernel (FT_TEST_DEVICE_FAULT_AT): a write the device refuses.
__global__ void write_through_invalid_address(int* p) { *p = 1; }

constexpr size_t kCublasWorkspace = 32ull << 20;
// Kernels that cuBLAS(Lt), cuDNN and fittrain load lazily at their first launch (CUDA's
// default lazy module loading) take device memory after the arena exists: +6 MiB over a
// GPT-2 124M run on an H100 (nvidia-smi, bench/process_memory.sh). Planned with headroom.
constexpr size_t kLazyKernelAllowance = 64ull << 20;
// Their host side: a GPT-2 124M rank's resident set grew 106 MiB anonymous, 16 MiB shared and
// 15 MiB file-backed over its first step on an H200, after the plan was made (session 38,
// VmRSS sampled every 50 ms); GPT-2 XL's about 150-200 MiB. Planned with headroom.
constexpr size_t kLazyHostAllowance = 256ull << 20;

using cuda::Ctx;
using cuda::check_float;
using cuda::check_same;
using cuda::last_dim;
using cuda::rows;

// ctx_ and the recommender, diffusion and window ops: CudaBackendBase (cuda_backend_impl.h).
class CudaBackend final : public cuda::CudaBackendBase {
 public:
  CudaBackend() {
    CUDA_CHECK(cudaGetDevice(&device_));
    CUDA_CHECK(cudaGetDeviceProperties(&prop_, device_));
    stream_ = static_cast<cudaStream_t>(create_stream(StreamPriority::normal).native);
    CUBLAS_CHECK(cublasLtCreate(&mm_.handle));
    ctx_.stream = stream_;
    ctx_.num_sms = prop_.multiProcessorCount;
    ctx_.cc_major = prop_.major;
    ctx_.max_smem_optin = prop_.sharedMemPerBlockOptin;
    sw_ = cuda::read_switches();  // what each switch does: switches.h
    ctx_.dependent_launch = sw_.dependent_launch && prop_.major >= 9;  // programmatic launch: sm_90 on
    mm_.autotune = sw_.matmul_autotune;
    mm_.tune_quiet = sw_.matmul_tune_quiet;
    mm_.tune_log = sw_.matmul_tune_log;
    mm_.fp32_reduction = sw_.matmul_fp32_reduction;
    mm_.split_k = sw_.matmul_split_k == cuda::Switches::SplitK::none  ? cuda::MatmulState::SplitK::none
                  : sw_.matmul_split_k == cuda::Switches::SplitK::any ? cuda::MatmulState::SplitK::any
                                                                      : cuda::MatmulState::SplitK::automatic;
    mm_.bgrad_epilogue = sw_.bgrad_epilogue;
    mm_.bgrad_strict = sw_.bgrad_strict;
    mm_.dgelu_bgrad = sw_.dgelu_bgrad;
    gelu_epilogue_ = sw_.gelu_epilogue;
    gelu_strict_ = sw_.gelu_strict;
    cudnn_.set_tuning(sw_.attention_tune);
    classifier_ = sw_.classifier;
  }
  ~CudaBackend() override {
    if (mm_.handle) cublasLtDestroy(mm_.handle);
    if (stream_) cudaStreamDestroy(stream_);
  }

  DeviceKind device() const override { return DeviceKind::cuda; }
  std::string describe() const override {
    return detail::concat("cuda (", prop_.name, ", sm_", prop_.major, prop_.minor, ", ", prop_.multiProcessorCount,
                          " SMs, ", prop_.totalGlobalMem >> 30, " GiB, cuBLASLt",
                          cudnn_.available() && sw_.attention != cuda::Switches::Attention::fittrain
                              ? detail::concat(", cuDNN ", cudnn_.version(), " attention")
                              : std::string(", fittrain attention"),
                          ")");
  }

  // ---- memory ----
  void* alloc(size_t bytes) override {
    void* p = nullptr;
    cudaError_t err = cudaMalloc(&p, std::max<size_t>(bytes, 256));
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // clear it: the caller re-plans and tries again
      throw OutOfMemoryError(detail::concat("cuda: cannot allocate ", bytes, " bytes of device memory"));
    }
    CUDA_CHECK(err);
    return p;
  }
  void free(void* p) override {
    if (p) CUDA_CHECK_RELEASE(cudaFree(p));
  }
  // Returns before the copy lands (queued on the stream from a page-locked ring: host_staging.cu).
  void copy_to_device(void* dst, const void* src, size_t bytes) override { staging_.copy(dst, src, bytes, stream_); }
  size_t upload_staging_bytes() const override { return staging_.capacity(); }
  size_t first_step_host_allowance() const override { return kLazyHostAllowance; }
  void* alloc_upload_source(size_t bytes) override { return staging_.alloc_direct(bytes); }
  void free_upload_source(void* p) override { staging_.free_direct(p); }
  bool copy_to_device_on(StreamHandle s, void* dst, const void* src, size_t bytes) override {
    if (!staging_.is_direct(src, bytes)) return false;
    if (bytes > 0) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, native(s)));
    return true;
  }
  void copy_to_host(void* dst, const void* src, size_t bytes) override {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void zero(Tensor t) override {
    if (t.empty()) return;
    CUDA_CHECK(cudaMemsetAsync(t.data, 0, t.bytes(), stream_));
  }
  void synchronize() override { CUDA_CHECK(cudaStreamSynchronize(stream_)); }
  void fault_for_test() override {
    write_through_invalid_address<<<1, 1, 0, stream_>>>(reinterpret_cast<int*>(uintptr_t{16}));
    CUDA_CHECK_LAUNCH();
  }
  void mem_info(size_t* free_bytes, size_t* total_bytes) override {
    CUDA_CHECK(cudaMemGetInfo(free_bytes, total_bytes));
  }
  size_t runtime_device_bytes() const override { return runtime_bytes_; }
  // Called once by make_cuda_backend() with the device's used bytes before this backend
  // existed (nullopt without NVML): what it holds now, less that, is the context and the
  // handles; add the allowance for lazily loaded kernels.
  void measure_runtime_again() override { measure_runtime(used_before_); }
  void measure_runtime(std::optional<size_t> used_before) {
    used_before_ = used_before;
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    const std::optional<size_t> used_now = cuda::device_used_bytes(device_);
    size_t held;
    if (used_before && used_now && *used_now >= *used_before) held = *used_now - *used_before;
    else held = total_b - free_b;  // no NVML: everything in use counts (too much, never too little)
    runtime_bytes_ = cuda::align_up(held, 1 << 20) + kLazyKernelAllowance;
  }

  using Backend::workspace_bytes;

  // The cuBLASLt workspace, then the largest op scratch of `ops` (the op families run one at a
  // time on the stream and share it).
  size_t workspace_bytes(std::span<const OpShape> ops, Precision p) const override {
    const int sms = prop_.multiProcessorCount;
    size_t s = cuda::sum_squares_scratch(sms);  // always: every trainer takes a gradient norm
    for (const OpShape& o : ops) {
      const int64_t N = std::max<int64_t>(1, o.rows);
      switch (o.kind) {
        case OpShape::Kind::embedding: s = std::max(s, cuda::embedding_backward_scratch(N)); break;
        case OpShape::Kind::layernorm:
          if (o.cols > 0) s = std::max(s, cuda::layernorm_backward_scratch(N, o.cols, sms));
          break;
        case OpShape::Kind::matmul:
          if (o.out_cols > 0) s = std::max(s, cuda::bias_backward_scratch(o.out_cols, sms));
          break;
        case OpShape::Kind::attention: s = std::max(s, attention_scratch(o, p)); break;
        case OpShape::Kind::bpr:
          s = std::max(s, cuda::bpr_scratch(N, std::max<int64_t>(1, o.out_cols)));
          break;
        case OpShape::Kind::norm_modulate:
          s = std::max(s, cuda::norm_modulate_backward_scratch(o.batch, o.seq, o.cols, sms));
          // the fused backward with the gated residual behind it (the block's middle) needs
          // more; planned only when it is switched on (FT_RESIDUAL_NORM)
          if (sw_.residual_norm_fused_bwd)
            s = std::max(s, cuda::norm_modulate_residual_backward_scratch(o.batch, o.seq, o.cols, sms));
          break;
        case OpShape::Kind::silu_matmul: s = std::max(s, silu_matmul_scratch(o, p)); break;
        case OpShape::Kind::patch_embed:
          s = std::max(s, cuda::patch_embed_backward_scratch(std::max<int64_t>(1, o.out_cols), sms));
          break;
        case OpShape::Kind::elementwise:
          if (o.cols > 0) s = std::max(s, cuda::silu_bias_scratch(N / o.cols, o.cols, sms));
          break;
        default: break;  // classifier, sum_squares (above), AdamW: none
      }
    }
    return kCublasWorkspace + cuda::align_up(s, 256) + 256;
  }
  void set_workspace(void* p, size_t bytes) override {
    FT_CHECK(bytes >= kCublasWorkspace, "CUDA workspace of ", bytes, " bytes is under the ",
             kCublasWorkspace, " cuBLASLt needs");
    mm_.workspace = p;
    mm_.workspace_bytes = kCublasWorkspace;
    mm_.algos.clear();  // algorithms were chosen for the old workspace size
    mm_.unsupported.clear();
    ctx_.scratch = static_cast<char*>(p) + kCublasWorkspace;
    ctx_.scratch_bytes = bytes - kCublasWorkspace;
  }
  std::string unsupported(const OpShape& o, Precision p) const override {
    if (o.kind != OpShape::Kind::attention) return "";
    if (o.heads <= 0 || o.head_size <= 0)
      return detail::concat("attention needs heads and a head size (got ", o.heads, " heads of ",
                            o.head_size, ")");
    const int64_t hs = o.head_size;
    // fittrain's kernels run every mask at these sizes, and forward and backward of a shape
    // must be able to take the same path whichever attention FT_ATTENTION picks, so cuDNN's
    // wider range (multiples of 8) is not offered on its own.
    if (hs == 32 || hs == 64 || hs == 128) return "";
    (void)p;
    return detail::concat("attention head size ", hs, " is not supported by the CUDA attention "
                          "kernels (supported: 32, 64, 128)");
  }
  size_t attention_saved_bytes(const OpShape& a, Precision) const override {
    return static_cast<size_t>(a.batch * a.heads * a.seq) * sizeof(float);
  }

  // ---- ops ----
  void embedding_forward(Tensor out, Tensor tokens, Tensor wte, Tensor wpe, Tensor positions) override {
    check_float(out, "embedding_forward");
    check_same(out, wte, "embedding_forward");
    if (wpe.data) check_same(out, wpe, "embedding_forward");
    FT_CHECK(tokens.dtype == DType::i32, "embedding_forward: tokens must be i32");
    FT_CHECK(out.ndim == 3, "embedding_forward: out must be [B,T,C], got ", out.shape_str());
    const int64_t B = out.dim(0), T = out.dim(1), C = out.dim(2);
    FT_CHECK(tokens.numel() == B * T, "embedding_forward: tokens ", tokens.shape_str());
    FT_CHECK(last_dim(wte) == C && (!wpe.data || (last_dim(wpe) == C && (positions.data || rows(wpe) >= T))),
             "embedding_forward: wte ", wte.shape_str(), " wpe ", wpe.shape_str());
    const int* pos = cuda::positions_of("embedding_forward", positions, B * T);
    cuda::embedding_forward(ctx_, out.dtype, out.data, static_cast<const int*>(tokens.data),
                            wte.data, wpe.data, B, T, C, pos);
  }
  void embedding_backward(Tensor dwte, Tensor dwpe, Tensor dout, Tensor tokens, Tensor positions) override {
    check_float(dout, "embedding_backward");
    check_same(dout, dwte, "embedding_backward");
    if (dwpe.data) check_same(dout, dwpe, "embedding_backward");
    FT_CHECK(tokens.dtype == DType::i32, "embedding_backward: tokens must be i32");
    FT_CHECK(dout.ndim == 3, "embedding_backward: dout must be [B,T,C], got ", dout.shape_str());
    const int64_t B = dout.dim(0), T = dout.dim(1), C = dout.dim(2);
    FT_CHECK(tokens.numel() == B * T && last_dim(dwte) == C &&
                 (!dwpe.data || (last_dim(dwpe) == C && (positions.data || rows(dwpe) >= T))),
             "embedding_backward: shapes");
    const int* pos = cuda::positions_of("embedding_backward", positions, B * T);
    cuda::embedding_backward(ctx_, dout.dtype, dwte.data, dwpe.data, dout.data,
                             static_cast<const int*>(tokens.data), B, T, C, rows(dwte), pos,
                             dwpe.data ? rows(dwpe) : 0);
  }

  void layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor w,
                         Tensor b) override {
    check_float(inp, "layernorm_forward");
    check_same(out, inp, "layernorm_forward");
    const bool affine = !w.empty() || !b.empty();  // both empty: no affine
    if (affine) check_same(w, inp, "layernorm_forward"), check_same(b, inp, "layernorm_forward");
    const int64_t C = last_dim(inp), N = rows(inp);
    FT_CHECK(out.numel() == N * C && (!affine || (w.numel() == C && b.numel() == C)),
             "layernorm_forward: shapes");
    FT_CHECK(mean.dtype == DType::f32 && rstd.dtype == DType::f32 && mean.numel() >= N &&
                 rstd.numel() >= N,
             "layernorm_forward: mean/rstd must be f32 [N]");
    cuda::layernorm_forward(ctx_, inp.dtype, out.data, static_cast<float*>(mean.data),
                            static_cast<float*>(rstd.data), inp.data, w.data, b.data, N, C);
  }
  void layernorm_backward(Tensor dinp, Tensor dw, Tensor db, Tensor dout, Tensor inp, Tensor w,
                          Tensor mean, Tensor rstd) override {
    check_float(inp, "layernorm_backward");
    const bool affine = !w.empty();  // without affine w, dw and db are all empty
    FT_CHECK(dw.empty() != affine && db.empty() != affine, "layernorm_backward: w ", w.shape_str(),
             " dw ", dw.shape_str(), " db ", db.shape_str(), ": all given or all empty (no affine)");
    for (const Tensor* t : {&dinp, &dw, &db, &dout, &w})
      if (affine || !t->empty()) check_same(*t, inp, "layernorm_backward");
    const int64_t C = last_dim(inp), N = rows(inp);
    FT_CHECK(dinp.numel() == N * C && dout.numel() == N * C &&
                 (!affine || (dw.numel() == C && db.numel() == C && w.numel() == C)),
             "layernorm_backward: shapes");
    FT_CHECK(mean.dtype == DType::f32 && rstd.dtype == DType::f32, "layernorm_backward: mean/rstd f32");
    cuda::layernorm_backward(ctx_, inp.dtype, dinp.data, dw.data, db.data, dout.data, inp.data,
                             w.data, static_cast<const float*>(mean.data),
                             static_cast<const float*>(rstd.data), N, C);
  }

  void matmul_forward(Tensor out, Tensor inp, Tensor w, Tensor bias) override {
    const auto [N, C, OC] = cuda::check_forward_product("matmul_forward", inp, w, bias, {&out});
    cuda::matmul_forward(mm_, ctx_, inp.dtype, out.data, inp.data, w.data,
                         bias.empty() ? nullptr : bias.data, N, C, OC);
  }
  void matmul_residual_forward(Tensor out, Tensor inp, Tensor w, Tensor bias,
                               Tensor residual) override {
    const auto [N, C, OC] =
        cuda::check_forward_product("matmul_residual_forward", inp, w, bias, {&out, &residual});
    FT_CHECK(residual.data != out.data, "matmul_residual_forward: residual aliases out");
    cuda::matmul_residual_forward(mm_, ctx_, inp.dtype, out.data, inp.data, w.data,
                                  bias.empty() ? nullptr : bias.data, residual.data, N, C, OC);
  }
  void matmul_backward(Tensor dinp, Tensor dw, Tensor dbias, Tensor dout, Tensor inp, Tensor w,
                       GradWrite gw = GradWrite::add) override {
    if (inp.empty() && dw.empty()) inp = dinp;  // only a shape then (Backend::matmul_backward)
    check_float(inp, "matmul_backward");
    if (!dw.empty()) check_same(dw, inp, "matmul_backward");
    check_same(dout, inp, "matmul_backward");
    check_same(w, inp, "matmul_backward");
    const int64_t C = last_dim(inp), N = rows(inp), OC = w.dim(0);
    FT_CHECK(w.ndim == 2 && w.dim(1) == C && (dw.empty() || dw.numel() == OC * C) && dout.numel() == N * OC,
             "matmul_backward: shapes");
    FT_CHECK(!dw.empty() || dbias.empty(), "matmul_backward: a bias gradient without the weight's");
    if (!dinp.empty()) {
      check_same(dinp, inp, "matmul_backward");
      FT_CHECK(dinp.numel() == N * C, "matmul_backward: dinp ", dinp.shape_str());
    }
    if (!dbias.empty()) {
      check_same(dbias, inp, "matmul_backward");
      FT_CHECK(dbias.numel() == OC, "matmul_backward: dbias ", dbias.shape_str());
    }
    cuda::matmul_backward(mm_, ctx_, inp.dtype, dinp.empty() ? nullptr : dinp.data, dw.empty() ? nullptr : dw.data,
                          dbias.empty() ? nullptr : dbias.data, dout.data, inp.data, w.data, N,
                          C, OC, gw == GradWrite::add);
  }

  void column_sums(Tensor out, Tensor x, int64_t col0, GradWrite gw = GradWrite::add) override {
    check_float(x, "column_sums");
    check_same(out, x, "column_sums");
    const int64_t L = last_dim(x), C = out.numel();
    FT_CHECK(L > 0 && C > 0 && col0 >= 0 && col0 + C <= L, "column_sums: columns ", col0, " .. ", col0 + C - 1,
             " (out ", out.shape_str(), ") outside x ", x.shape_str());
    const char* first = static_cast<const char*>(x.data) + col0 * dtype_size(x.dtype);
    cuda::bias_backward(ctx_, x.dtype, out.data, first, rows(x), C, gw == GradWrite::add ? 1.f : 0.f, L);
  }

  void matmul_gelu_forward(Tensor pre, Tensor out, Tensor inp, Tensor w, Tensor bias) override {
    if (!gelu_epilogue_) return Backend::matmul_gelu_forward(pre, out, inp, w, bias);
    const auto [N, C, OC] = cuda::check_forward_product("matmul_gelu_forward", inp, w, bias, {&pre, &out});
    if (cuda::matmul_gelu_forward(mm_, ctx_, inp.dtype, pre.data, out.data, inp.data, w.data,
                                  bias.empty() ? nullptr : bias.data, N, C, OC))
      return;
    FT_CHECK(!gelu_strict_, "matmul_gelu_forward: no cuBLASLt GELU epilogue for ",
             dtype_name(inp.dtype), " N=", N, " C=", C, " OC=", OC);
    Backend::matmul_gelu_forward(pre, out, inp, w, bias);
  }
  bool matmul_backward_gelu(Tensor dpre, Tensor dw, Tensor dbias, Tensor dout, Tensor inp,
                            Tensor w, Tensor pre, GradWrite gw = GradWrite::add,
                            Tensor dpre_bias = Tensor()) override {
    if (!gelu_epilogue_)
      return Backend::matmul_backward_gelu(dpre, dw, dbias, dout, inp, w, pre, gw, dpre_bias);
    check_float(inp, "matmul_backward_gelu");
    for (const Tensor* t : {&dpre, &dw, &dout, &w, &pre})
      check_same(*t, inp, "matmul_backward_gelu");
    const int64_t C = last_dim(inp), N = rows(inp), OC = w.dim(0);
    FT_CHECK(w.ndim == 2 && w.dim(1) == C && dw.numel() == OC * C && dout.numel() == N * OC &&
                 dpre.numel() == N * C && pre.numel() == N * C,
             "matmul_backward_gelu: shapes");
    if (!dbias.empty()) {
      check_same(dbias, inp, "matmul_backward_gelu");
      FT_CHECK(dbias.numel() == OC, "matmul_backward_gelu: dbias ", dbias.shape_str());
    }
    if (!dpre_bias.empty()) {
      check_same(dpre_bias, inp, "matmul_backward_gelu");
      FT_CHECK(dpre_bias.numel() == C, "matmul_backward_gelu: dpre_bias ", dpre_bias.shape_str());
    }
    bool bias_written = false;
    if (cuda::matmul_backward_gelu(mm_, ctx_, inp.dtype, dpre.data, dw.data,
                                   dbias.empty() ? nullptr : dbias.data, dout.data, inp.data,
                                   w.data, pre.data, N, C, OC, gw == GradWrite::add,
                                   dpre_bias.empty() ? nullptr : dpre_bias.data, &bias_written))
      return bias_written;
    FT_CHECK(!gelu_strict_, "matmul_backward_gelu: no cuBLASLt DGELU epilogue for ",
             dtype_name(inp.dtype), " N=", N, " C=", C, " OC=", OC);
    return Backend::matmul_backward_gelu(dpre, dw, dbias, dout, inp, w, pre, gw, dpre_bias);
  }

  void gelu_forward(Tensor out, Tensor inp) override {
    check_float(inp, "gelu_forward");
    check_same(out, inp, "gelu_forward");
    FT_CHECK(out.numel() == inp.numel(), "gelu_forward: shapes");
    cuda::gelu_forward(ctx_, inp.dtype, out.data, inp.data, inp.numel());
  }
  void gelu_backward(Tensor dinp, Tensor inp, Tensor dout) override {
    check_float(inp, "gelu_backward");
    check_same(dinp, inp, "gelu_backward");
    check_same(dout, inp, "gelu_backward");
    FT_CHECK(dinp.numel() == inp.numel() && dout.numel() == inp.numel(), "gelu_backward: shapes");
    cuda::gelu_backward(ctx_, inp.dtype, dinp.data, inp.data, dout.data, inp.numel());
  }
  void silu_forward(Tensor out, Tensor inp) override {
    cuda::check_elementwise("silu_forward", inp, {&out});
    cuda::silu_forward(ctx_, inp.dtype, out.data, inp.data, inp.numel());
  }
  void silu_backward(Tensor dinp, Tensor inp, Tensor dout) override {
    cuda::check_elementwise("silu_backward", inp, {&dinp, &dout});
    cuda::silu_backward(ctx_, inp.dtype, dinp.data, inp.data, dout.data, inp.numel());
  }
  void silu_backward_recompute(Tensor dinp, Tensor out, Tensor inp, Tensor dout, Tensor dbias,
                               GradWrite gw) override {
    const char* op = "silu_backward_recompute";
    cuda::check_elementwise(op, inp, {&dinp, &dout});
    if (!out.empty()) cuda::check_elementwise(op, inp, {&out});  // empty: the caller kept silu(inp)
    if (dbias.empty()) return cuda::silu_backward(ctx_, inp.dtype, dinp.data, inp.data, dout.data, inp.numel(), out.data);
    const int64_t H = inp.ndim >= 1 ? inp.dim(inp.ndim - 1) : 0;
    check_same(dbias, inp, op);
    FT_CHECK(H > 0 && dbias.numel() == H, op, ": dbias ", dbias.shape_str(), " should hold the ", H, " columns of ",
             inp.shape_str());
    cuda::silu_backward_recompute_bias(ctx_, inp.dtype, dinp.data, out.data, inp.data, dout.data, dbias.data,
                                       inp.numel() / H, H, gw == GradWrite::add ? 1.f : 0.f, sw_.silu_bias);
  }
  void modulate_forward(Tensor out, Tensor x, Tensor shift, Tensor scale) override {
    const auto [B, T, C] = cuda::check_row_broadcast("modulate_forward", x, {&out}, {&shift, &scale});
    cuda::modulate_forward(ctx_, x.dtype, out.data, x.data, shift.data, scale.data, B, T, C);
  }
  void modulate_backward(Tensor dx, Tensor dshift, Tensor dscale, Tensor dout, Tensor x,
                         Tensor scale) override {
    const auto [B, T, C] =
        cuda::check_row_broadcast("modulate_backward", x, {&dx, &dout}, {&dshift, &dscale, &scale});
    cuda::modulate_backward(ctx_, x.dtype, dx.data, dshift.data, dscale.data, dout.data, x.data,
                            scale.data, B, T, C);
  }
  void residual_forward(Tensor out, Tensor a, Tensor b) override {
    check_float(a, "residual_forward");
    check_same(out, a, "residual_forward");
    check_same(b, a, "residual_forward");
    FT_CHECK(out.numel() == a.numel() && b.numel() == a.numel(), "residual_forward: shapes");
    cuda::residual_forward(ctx_, a.dtype, out.data, a.data, b.data, a.numel());
  }

  void classifier_forward_backward(Tensor losses, Tensor logits, Tensor targets, int64_t V,
                                   float dloss) override {
    check_float(logits, "classifier_forward_backward");
    FT_CHECK(losses.dtype == DType::f32 && targets.dtype == DType::i32,
             "classifier_forward_backward: losses f32, targets i32");
    const int64_t Vp = last_dim(logits), BT = rows(logits);
    FT_CHECK(losses.numel() == BT && targets.numel() == BT,
             "classifier_forward_backward: losses ", losses.shape_str(), " targets ",
             targets.shape_str(), " logits ", logits.shape_str());
    FT_CHECK(classifier_ != Cls::staged || cuda::classifier_staged_fits(ctx_, logits.dtype, Vp),
             "FT_CLASSIFIER=staged: two rows of ", Vp, " ", dtype_name(logits.dtype),
             " do not fit this device's shared memory (or it is not sm_90)");
    cuda::classifier_forward_backward(ctx_, logits.dtype, static_cast<float*>(losses.data),
                                      logits.data, static_cast<const int*>(targets.data), BT, Vp,
                                      V, dloss, classifier_ != Cls::twopass);
  }

  // ---- streams and events: a null StreamHandle is the compute stream ----
  StreamHandle compute_stream() override { return {stream_}; }
  StreamHandle create_stream(StreamPriority priority) override {
    int least = 0, greatest = 0;  // numerically lower is higher priority
    CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    // normal (the compute stream's) one step above least, so that `low` ranks below it; on a
    // device with a single level all three are the same
    const int normal = least > greatest ? least - 1 : least;
    const int value = priority == StreamPriority::high ? greatest : priority == StreamPriority::low ? least : normal;
    cudaStream_t s = nullptr;
    CUDA_CHECK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, value));
    return {s};
  }
  void destroy_stream(StreamHandle s) override {
    FT_CHECK(s.native != stream_, "destroy_stream: the compute stream belongs to the backend");
    if (s.native) CUDA_CHECK_RELEASE(cudaStreamDestroy(native(s)));
  }
  EventHandle create_event() override {
    cudaEvent_t e = nullptr;  // no timing: the cheapest event, for ordering only
    CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return {e};
  }
  void destroy_event(EventHandle e) override {
    if (e.native) CUDA_CHECK_RELEASE(cudaEventDestroy(static_cast<cudaEvent_t>(e.native)));
  }
  void record_event(EventHandle e, StreamHandle s) override {
    FT_CHECK(e.native, "record_event: null event");
    CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(e.native), native(s)));
  }
  void stream_wait_event(StreamHandle s, EventHandle e) override {
    FT_CHECK(e.native, "stream_wait_event: null event");
    CUDA_CHECK(cudaStreamWaitEvent(native(s), static_cast<cudaEvent_t>(e.native), 0));
  }
  void synchronize_stream(StreamHandle s) override { CUDA_CHECK(cudaStreamSynchronize(native(s))); }
  void synchronize_event(EventHandle e) override {
    FT_CHECK(e.native, "synchronize_event: null event");
    CUDA_CHECK(cudaSetDevice(device_));  // another thread's current device may be another GPU
    CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(e.native)));
  }
  std::unique_ptr<HostReadback> make_host_readback(size_t bytes) override {
    return cuda::make_pinned_readback(stream_, bytes);
  }

  // ---- generation (kv_attention.cu); lengths and positions are device data, not checked
  // here (reading them would synchronize): the kernels clamp or skip what is out of range
  void kv_cache_store(Tensor kcache, Tensor vcache, Tensor qkv, Tensor start) override {
    int64_t b, t;
    kv::CacheDims cd;
    check_float(qkv, "kv_cache_store");
    kv::check_store(kcache, vcache, qkv, start, &b, &t, &cd);
    cuda::kv_cache_store(ctx_, qkv.dtype, kcache.data, vcache.data, qkv.data,
                         static_cast<const int*>(start.data), b, t, cd.C, cd.Tmax);
  }
  void attention_decode(Tensor out, Tensor qkv, Tensor kcache, Tensor vcache, Tensor lens,
                        int n_head) override {
    kv::CacheDims cd;
    check_float(qkv, "attention_decode");
    const int64_t G = kv::check_decode(out, qkv, kcache, vcache, lens, n_head, &cd);
    cuda::attention_decode(ctx_, qkv.dtype, out.data, qkv.data, kcache.data, vcache.data,
                           static_cast<const int*>(lens.data), G, cd.C, cd.Tmax, n_head);
  }
  void argmax_rows(Tensor out, Tensor logits, int64_t V) override {
    check_float(logits, "argmax_rows");
    const int64_t G = kv::check_argmax(out, logits, V);
    cuda::argmax_rows(ctx_, logits.dtype, static_cast<int*>(out.data), logits.data, G, V,
                      logits.numel() / G);
  }

 private:
  int device_ = 0;
  size_t runtime_bytes_ = 0;  // see measure_runtime()
  std::optional<size_t> used_before_;  // the device's used bytes before this backend existed
  cudaDeviceProp prop_{};
  cudaStream_t stream_ = nullptr;
  // copy_to_device's page-locked ring: 16 MiB holds a few micro-batches of inputs (CDEIT at
  // batch 32 uploads 4 MiB a step); larger copies (parameters at start) pass through in pieces
  cuda::HostStaging staging_{16ull << 20};
  cudaStream_t native(StreamHandle s) const {
    return s.native ? static_cast<cudaStream_t>(s.native) : stream_;
  }

  cuda::MatmulState mm_;
  bool gelu_epilogue_ = true;
  bool gelu_strict_ = false;
  using Cls = cuda::Switches::Classifier;
  Cls classifier_ = Cls::automatic;
};

}  // namespace

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return 0;
  }
  return n;
}

std::unique_ptr<Backend> make_cuda_backend(int ordinal) {
  int device = ordinal;
  if (device < 0) CUDA_CHECK(cudaGetDevice(&device));
  // Measured before cudaSetDevice, which creates the device's context: the context is part
  // of what this process holds outside the arena.
  const std::optional<size_t> before = cuda::device_used_bytes(device);
  CUDA_CHECK(cudaSetDevice(device));
  auto be = std::make_unique<CudaBackend>();
  be->measure_runtime(before);
  return be;
}

}  // namespace ft
