// The CUDA backend's environment switches, read once when a backend is made: which
// implementation each op family takes (for comparisons, and for tests that must know which
// path they check). Every value is checked: an unknown one is a UserError naming the variable.
#pragma once

namespace ft::cuda {

enum class SiluBiasLayout { async, rows, tiles };
enum class SiluMatmul { automatic, off, cudnn };

struct Switches {
  enum class Attention { automatic, cudnn, fittrain };
  enum class Classifier { automatic, staged, twopass };
  // FT_MATMUL_AUTOTUNE=0: cuBLASLt's first heuristic instead of timing its candidates; =1
  // (default): timed on a drained device, the heuristic's first kept unless another is 1%
  // faster; =plain: timed behind whatever is queued, the fastest kept (as before session 18).
  // FT_MATMUL_TUNE_LOG=1: each tuned product's candidate times and choice on stderr.
  bool matmul_autotune = true, matmul_tune_quiet = true, matmul_tune_log = false;
  // FT_MATMUL_REDUCTION=fp32: only cuBLASLt algorithms whose split-K partials are reduced in
  // fp32 (CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE, or none); =any (default): whatever cuBLASLt
  // ranks, 16-bit reductions too. On an H200 a weight gradient of [8193 rows, C=16] -> 3072 took
  // an algorithm 1.2e-2 off in bf16 and fp16 (session 20, GPU_OpTable.matmul_bwd_weights);
  // with this switch it stayed 1.2e-2 (session 21): not a 16-bit reduction.
  bool matmul_fp32_reduction = false;
  // FT_MATMUL_SPLITK=auto (default): cuBLASLt's algorithms that do not split K go first for
  // products whose K (rows of a weight gradient) is not a multiple of 8; =none: for every
  // product; =any: cuBLASLt's ranking as it is. The same H200 finding: FT_MATMUL_REDUCTION=fp32
  // left that error as it was, the unsplit algorithm removed it (session 21).
  enum class SplitK { automatic, none, any };
  SplitK matmul_split_k = SplitK::automatic;
  // FT_NO_GELU_EPILOGUE=1: the MLP's GELU as separate kernels; FT_GELU_EPILOGUE_STRICT=1:
  // fail instead of falling back where cuBLASLt lacks the epilogue.
  bool gelu_epilogue = true, gelu_strict = false;
  // FT_ATTENTION=auto: cuDNN's fused attention where it runs the shape, else fittrain's
  // kernels; =fittrain: always fittrain's (deterministic backward); =cudnn: cuDNN or fail.
  // Which backward then runs is also FT_ATTENTION_BACKWARD's (below): by default short
  // non-causal rows take one of fittrain's own kernels after either forward.
  Attention attention = Attention::automatic;
  // FT_ATTENTION_BACKWARD: fittrain's own backwards of non-causal, unpadded bf16/f16 attention
  // with T = 64, 128 or 256 and head size 64, one block holding a (sample, head)'s keys:
  // attention_onepass.cu's (mma.sync) and sm90/attention_wgmma.cu's (wgmma, sm_90 only).
  // =onepass / =wgmma take that kernel wherever it fits and fail elsewhere; =library takes the
  // forward's own family (cuDNN's backward, or fittrain's two tensor-core kernels); =auto
  // (default, CudaBackendBase::own_backward): the wgmma kernel at T = 256 on sm_90 (H200,
  // session 27: 0.80 against the one-pass kernel's 0.86 and cuDNN's 0.89 ms at CDEIT's
  // first-stage windows, faster than both at its later stages and DiT-S); the one-pass kernel
  // at T = 64 (session 22: 0.011 against cuDNN's 0.021 ms) and at T = 128/256 with 24 (sample,
  // head)s an SM (with it at every length it fits CDEIT was 0.4-0.9% slower: its later stages
  // have too few); the library elsewhere.
  enum class AttentionBackward { automatic, onepass, wgmma, library };
  AttentionBackward attention_backward = AttentionBackward::automatic;
  // FT_ATTN_ONEPASS_KEYS=16|32: keys a warp of the one-pass backward owns (for measurements and
  // tests); unset (0): 32 from T = 128 on, 16 at T = 64 (H200, session 22: 32 keys 0.855 against
  // 0.920 ms at CDEIT's windows).
  int attention_onepass_keys = 0;
  // FT_CUDNN_ATTN_TUNE=1 (default): each attention shape's first cuDNN call times up to four of
  // cuDNN's ranked plans on a drained device and keeps the fastest (cuDNN's first unless
  // another is 1% faster); =0: cuDNN's first. FT_CUDNN_VERBOSE=1 prints the times.
  bool attention_tune = true;
  // FT_NO_BGRAD_EPILOGUE=1: fittrain's two-kernel column reduction over dout; =0: the dW
  // product's cuBLASLt BGRADB epilogue; unset: the default below. FT_BGRAD_EPILOGUE_STRICT=1:
  // fail where cuBLASLt lacks that epilogue instead of falling back.
  bool bgrad_epilogue = false, bgrad_strict = false;
  // FT_DGELU_BGRAD=1: the fc bias gradient from the DGELU product's DGELU_BGRAD epilogue.
  bool dgelu_bgrad = false;
  // SiLU's backward with the bias gradient (silu.cu) over rows of whole packs: FT_SILU_BIAS=async
  // (default: rows of up to 256 packs staged through shared memory by cp.async, eight in
  // flight a block; wider rows take `rows`), =rows (each thread's packs of four rows in its
  // registers), =tiles (32-pack column tiles, the layout of rows wider than 512 packs). The
  // async kernel runs three blocks an SM (silu.cu).
  SiluBiasLayout silu_bias = SiluBiasLayout::async;
  // FT_CLASSIFIER=auto: the staged shared-memory classifier where two rows fit (sm_90), else
  // the two-pass kernel; =twopass: always the latter; =staged: staged or fail.
  Classifier classifier = Classifier::automatic;
  // A SiLU MLP's second product (Backend::silu_matmul_forward): FT_SILU_MATMUL=auto (default:
  // the first call of a shape times cuDNN's fused plans against the SiLU pass + cuBLASLt product
  // and keeps the fastest), =off (always the pass and product), =cudnn (cuDNN's first plan
  // wherever it makes one, untimed: for tests).
  SiluMatmul silu_matmul = SiluMatmul::automatic;
  // The block's middle and ends (Backend::gated_residual_norm_modulate_forward and
  // norm_modulate_gated_residual_backward): FT_RESIDUAL_NORM=fused (default) runs each way in
  // one pass where the kernels hold the row (H100, session 18: backward 0.394 against 0.437 ms
  // for the two kernels at CDEIT's first stage; session 19, with the block ends' backward too:
  // CDEIT 737.4 / 739.1 images/s against 728.1 / 726.7 with =forward, DiT-S 8,151 against
  // 8,121); =forward only the forward in one pass;
  // =separate the two ops each way (for comparisons).
  bool residual_norm_fused_fwd = true, residual_norm_fused_bwd = true;
  // FT_RESIDUAL_NORM_STAGED=1 (default): the fused backward keeps each warp's next two rows in
  // flight, copied by cp.async into shared memory; =0: each warp loads its row into registers
  // and waits for it. H200 (session 21, fittrain_ops --mode perf): CDEIT's first stage 0.311
  // against 0.334 ms, DiT-S at batch 256 0.156 against 0.178 ms.
  bool residual_norm_staged = true;
  // FT_DEPENDENT_LAUNCH=1 (default): the element-wise and reduction kernels that run most
  // often in a step (cuda_common.cuh `launch`) go out with programmatic stream serialization,
  // each waiting at its start for the kernel before it; =0: plain launches. CDEIT batch 32 on an
  // H200 (session 25, cdeit_ab.sh, two interleaved rounds): 799.5 against 789.3 images/s.
  bool dependent_launch = true;
};

Switches read_switches();

}  // namespace ft::cuda
