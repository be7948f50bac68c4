// CudaBackendBase's attention (cuda_backend_impl.h): which family runs a shape (cuDNN's fused
// engines, or fittrain's kernels in attention.cu / attention_tc2.cu), which backward (also
// attention_onepass.cu's one-pass kernel, FT_ATTENTION_BACKWARD), and the scratch a shape plans.
#include <algorithm>

#include "backend/cuda/backend_checks.h"
#include "backend/cuda/cuda_backend_impl.h"

namespace ft::cuda {

using Attn = Switches::Attention;

void CudaBackendBase::attention_forward(Tensor out, Tensor saved, Tensor qkv, int n_head,
                                        const AttentionOptions& opt) {
  check_float(qkv, "attention_forward");
  check_same(out, qkv, "attention_forward");
  FT_CHECK(qkv.ndim == 3 && qkv.dim(2) % 3 == 0, "attention_forward: qkv ", qkv.shape_str());
  const int64_t B = qkv.dim(0), T = qkv.dim(1), C = qkv.dim(2) / 3;
  FT_CHECK(n_head > 0 && C % n_head == 0, "attention_forward: C=", C, " n_head=", n_head);
  FT_CHECK(out.numel() == B * T * C, "attention_forward: out ", out.shape_str());
  FT_CHECK(saved.bytes() >= static_cast<size_t>(B * n_head * T) * sizeof(float),
           "attention_forward: saved holds ", saved.bytes(), " bytes");
  const int* lens = seq_lens_of("attention_forward", opt, B);
  const int* pos = attention_positions_of("attention_forward", opt, B, T);
  if (use_cudnn(qkv.dtype, B, T, n_head, C / n_head, opt))
    cudnn_.forward(ctx_, qkv.dtype, out.data, static_cast<float*>(saved.data), qkv.data, B, T, n_head,
                   C / n_head, opt.causal);
  else
    cuda::attention_forward(ctx_, qkv.dtype, out.data, static_cast<float*>(saved.data), qkv.data, B, T,
                            n_head, C / n_head, opt.causal, lens, pos);
}

void CudaBackendBase::attention_backward(Tensor dqkv, Tensor dout, Tensor qkv, Tensor out, Tensor saved,
                                         int n_head, const AttentionOptions& opt) {
  check_float(qkv, "attention_backward");
  for (const Tensor* t : {&dqkv, &dout, &out}) check_same(*t, qkv, "attention_backward");
  FT_CHECK(qkv.ndim == 3 && qkv.dim(2) % 3 == 0, "attention_backward: qkv ", qkv.shape_str());
  const int64_t B = qkv.dim(0), T = qkv.dim(1), C = qkv.dim(2) / 3;
  FT_CHECK(n_head > 0 && C % n_head == 0, "attention_backward: C=", C, " n_head=", n_head);
  FT_CHECK(dqkv.numel() == qkv.numel() && dout.numel() == B * T * C && out.numel() == B * T * C,
           "attention_backward: shapes");
  FT_CHECK(saved.bytes() >= static_cast<size_t>(B * n_head * T) * sizeof(float),
           "attention_backward: saved too small");
  const int* lens = seq_lens_of("attention_backward", opt, B);
  const int* pos = attention_positions_of("attention_backward", opt, B, T);
  const float* stats = static_cast<const float*>(saved.data);
  const bool cudnn = use_cudnn(qkv.dtype, B, T, n_head, C / n_head, opt);
  const float to_log2 = cudnn ? 1.4426950408889634f : 1.f;  // cuDNN's natural-log lse, or base 2 already
  const OwnBackward own = own_backward(qkv.dtype, B, T, n_head, C / n_head, opt);  // read either forward's lse
  if (own == OwnBackward::wgmma)
    attention_backward_wgmma(ctx_, qkv.dtype, dqkv.data, dout.data, qkv.data, out.data, stats, to_log2, B, T, n_head);
  else if (own == OwnBackward::onepass)
    attention_backward_onepass(ctx_, qkv.dtype, dqkv.data, dout.data, qkv.data, out.data, stats, to_log2, B, T,
                               n_head, sw_.attention_onepass_keys);
  else if (cudnn)
    cudnn_.backward(ctx_, qkv.dtype, dqkv.data, dout.data, qkv.data, out.data, stats, B, T, n_head, C / n_head,
                    opt.causal);
  else
    cuda::attention_backward(ctx_, qkv.dtype, dqkv.data, dout.data, qkv.data, out.data, stats, B, T, n_head,
                             C / n_head, opt.causal, lens, pos);
}

bool CudaBackendBase::use_cudnn(DType t, int64_t B, int64_t T, int64_t NH, int64_t HS,
                                const AttentionOptions& opt) const {
  if (sw_.attention == Attn::fittrain) return false;
  const bool varlen = !opt.seq_lens.empty(), packed = !opt.positions.empty();
  const size_t ws = varlen || packed ? 0 : cudnn_scratch(t, B, T, NH, HS, opt);
  const bool ok = ws > 0 && ws <= ctx_.scratch_bytes;
  FT_CHECK(ok || sw_.attention != Attn::cudnn, "FT_ATTENTION=cudnn: cuDNN cannot run ",
           opt.causal ? "causal" : "non-causal", varlen ? " padded" : "", packed ? " packed" : "",
           " attention for ", dtype_name(t), " B=", B, " T=", T, " heads=", NH, " head size=", HS,
           " in a scratch of ", ctx_.scratch_bytes, " bytes");
  return ok;
}

size_t CudaBackendBase::cudnn_scratch(DType t, int64_t B, int64_t T, int64_t NH, int64_t HS,
                                      const AttentionOptions& opt) const {
  const bool own = own_backward(t, B, T, NH, HS, opt, /*check=*/false) != OwnBackward::none;
  return cudnn_.workspace_bytes(t, B, T, NH, HS, opt.causal, /*backward=*/!own);
}

// auto: T = 256 on sm_90: the wgmma kernel (H200, session 27, fittrain_ops perf in one call,
// ms: CDEIT's windows at batch 32, 4,096 (sample, head)s, 0.801 against the one-pass kernel's
// 0.860 and cuDNN's 0.890; its second stage, 1,024: 0.217 / 0.236 / 0.235; its third, 256:
// 0.062 / 0.067 / 0.068; DiT-S at 256, 1,536: 0.318 / 0.347 / 0.346). Otherwise T = 64: the
// one-pass kernel (0.011 against cuDNN's 0.020); T = 128 or 256 where B * NH >= 24 x the SMs:
// the one-pass kernel (session 22), below that cuDNN's (or fittrain's tensor-core) backward.
CudaBackendBase::OwnBackward CudaBackendBase::own_backward(DType t, int64_t B, int64_t T, int64_t NH, int64_t HS,
                                                           const AttentionOptions& opt, bool check) const {
  using AB = Switches::AttentionBackward;
  if (sw_.attention_backward == AB::library) return OwnBackward::none;
  const bool plain = (t == DType::bf16 || t == DType::f16) && opt.seq_lens.empty() && opt.positions.empty();
  auto got = [&] {  // the shape and card, for the forced switches' refusals
    return detail::concat(dtype_name(t), opt.causal ? " causal" : "", opt.seq_lens.empty() ? "" : " padded",
                          opt.positions.empty() ? "" : " packed", " T=", T, " head size=", HS, " on sm_", ctx_.cc_major,
                          "x");
  };
  if (sw_.attention_backward == AB::wgmma) {
    const bool fits = plain && attention_backward_wgmma_fits(ctx_, T, HS, opt.causal);
    FT_CHECK(fits || !check, "FT_ATTENTION_BACKWARD=wgmma: the wgmma backward needs bf16/f16, non-causal attention "
             "without lengths or positions, T = 64, 128 or 256 and head size 64, on an sm_90 device; got ", got());
    return fits ? OwnBackward::wgmma : OwnBackward::none;
  }
  const bool automatic = sw_.attention_backward == AB::automatic;
  if (automatic && T == 256 && plain && attention_backward_wgmma_fits(ctx_, T, HS, opt.causal))
    return OwnBackward::wgmma;
  constexpr int64_t kWavesForLongRows = 24;
  if (automatic && T != 64 && B * NH < kWavesForLongRows * ctx_.num_sms) return OwnBackward::none;
  const bool fits = plain && attention_backward_onepass_fits(ctx_, T, HS, opt.causal);
  FT_CHECK(fits || !check || sw_.attention_backward != AB::onepass, "FT_ATTENTION_BACKWARD=onepass: the one-pass "
           "backward needs bf16/f16, non-causal attention without lengths or positions, T = 64, 128 or "
           "256 and head size 64, on sm_80+ with the block's shared memory; got ", got(), " with ",
           ctx_.max_smem_optin, " bytes a block");
  return fits ? OwnBackward::onepass : OwnBackward::none;
}

size_t CudaBackendBase::attention_scratch(const OpShape& o, Precision p) const {
  if (o.heads <= 0) return 0;
  size_t s = attention_backward_scratch(o.batch, o.seq, o.heads);
  if (o.head_size > 0 && !o.varlen && !o.packed && p != Precision::fp32 && sw_.attention != Attn::fittrain) {
    AttentionOptions opt;
    opt.causal = o.causal;
    s = std::max(s, cudnn_scratch(p == Precision::fp16 ? DType::f16 : DType::bf16, o.batch, o.seq, o.heads,
                                  o.head_size, opt));
  }
  return s;
}

}  // namespace ft::cuda
