// Internal to the CUDA backend (included by its own files only, never through
// backend/cuda/cuda_backend.h): the part of CudaBackend shared by the files that define its ops.
// CudaBackend (cuda_backend.cu) derives from CudaBackendBase, whose optimizer-step ops are
// defined in cuda_backend_step.cu, its recommender, diffusion and window ops in
// cuda_backend_diffusion.cu and its attention in cuda_backend_attention.cu (split to keep files
// under ~600 lines).
#pragma once
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_ops.cuh"
#include "backend/cuda/switches.h"
#include "backend/window_shapes.h"
#include "core/tensor.h"

namespace ft::cuda {

// Backend::make_host_readback's HostReadback on `stream` (host_readback.cu).
std::unique_ptr<HostReadback> make_pinned_readback(cudaStream_t stream, size_t bytes);

// Backend::copy_to_device's host side (host_staging.cu): the caller's bytes are copied into a
// page-locked ring and uploaded from there, asynchronously in stream order, so the caller may
// reuse its memory at once and the stream is not synchronised. Page-locked memory: `capacity`
// bytes, allocated at the first copy.
class HostStaging {
 public:
  explicit HostStaging(size_t capacity);
  ~HostStaging();
  HostStaging(const HostStaging&) = delete;
  HostStaging& operator=(const HostStaging&) = delete;
  void copy(void* dst, const void* src, size_t bytes, cudaStream_t stream);
  size_t capacity() const { return capacity_; }
  // Page-locked blocks whose owners fence their reuse (Backend::alloc_upload_source): a copy
  // from inside one is queued directly, without the ring.
  void* alloc_direct(size_t bytes);
  void free_direct(void* p);
  // Whether [src, src + bytes) lies inside one of alloc_direct's blocks.
  bool is_direct(const void* src, size_t bytes) const;

 private:
  struct Pending {
    size_t begin, end;  // the ring's bytes the copy reads
    cudaEvent_t done;   // recorded after it
  };
  void retire_front();

  size_t capacity_;
  cudaStream_t stream_ = nullptr;  // the one stream the ring's copies are queued on
  char* ring_ = nullptr;
  size_t head_ = 0;
  std::deque<Pending> pending_;  // in submission order
  std::vector<cudaEvent_t> spare_;
  std::vector<std::pair<const char*, size_t>> direct_;  // alloc_direct's blocks
};

class CudaBackendBase : public Backend {
 public:
  // ---- recommender head (bpr.cu); item ids are device data, not checked here: the kernels
  // never read outside E (see Backend::bpr_forward_backward)
  void bpr_forward_backward(Tensor losses, Tensor dh, Tensor dE, Tensor h, Tensor E, Tensor pos,
                            Tensor neg, float dloss) override;
  void item_scores(Tensor out, Tensor h, Tensor E, Tensor items) override;

  // ---- the optimizer step (cuda_backend_step.cu: sum_squares.cu, adamw.cu) ----
  double sum_squares(Tensor x) override;
  void sum_squares_runs_to(Tensor x, int64_t runs, int64_t stride, Tensor out) override;
  void set_scalars(Tensor dst, std::span<const double> values) override;
  void update_control(Tensor loss, Tensor sum_squares, Tensor control, const UpdateRule& r) override;
  void adamw_update(Tensor params, Tensor master, Tensor grads, Tensor m, Tensor v,
                    std::span<const ParamSlice> slices, const AdamWStep& s) override;
  void ema_update(Tensor out, Tensor src, float decay) override;

  // ---- diffusion (patchify.cu, diffusion.cu, rmsnorm.cu; shapes: diffusion_shapes.h) ----
  void patchify(Tensor out, Tensor img, int p) override;
  void unpatchify(Tensor img, Tensor tokens, int p) override;
  void diffusion_mix(Tensor out, Tensor noise_out, Tensor x, Tensor y, Tensor coef, Tensor keys,
                     uint64_t seed) override;
  void mse_loss(Tensor losses, Tensor dpred, Tensor pred, Tensor target, float dloss) override;
  void timestep_embedding(Tensor out, Tensor t, float max_period) override;
  void rmsnorm_forward(Tensor out, Tensor rstd, Tensor inp) override;
  void rmsnorm_backward(Tensor dinp, Tensor dout, Tensor inp, Tensor rstd) override;
  void patch_embed_forward(Tensor out, Tensor x, Tensor wx, Tensor c, Tensor wc, Tensor bias,
                           Tensor table) override;  // patch_embed.cu
  void patch_embed_backward(Tensor dwx, Tensor dwc, Tensor dbias, Tensor dout, Tensor x, Tensor c,
                            GradWrite gw) override;
  // adaLN's gated residual (gated_residual.cu), y optionally in window order
  using Backend::gated_residual_forward;
  using Backend::gated_residual_backward;
  void gated_residual_forward(Tensor out, Tensor res, Tensor y, Tensor gate, const WindowOrder& yo) override;
  void gated_residual_backward(Tensor dy, Tensor dgate, Tensor dout, Tensor y, Tensor gate, const WindowOrder& yo,
                               Tensor dbias_y, GradWrite gw) override;
  // fused norm + modulate (norm_modulate.cu; shapes: norm_modulate_shapes.h)
  void norm_modulate_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor shift, Tensor scale,
                             const NormModulateOptions& o) override;
  void norm_modulate_backward(Tensor dinp, Tensor dshift, Tensor dscale, Tensor dout, Tensor inp, Tensor mean,
                              Tensor rstd, Tensor scale, const NormModulateOptions& o) override;
  void gated_residual_norm_modulate_forward(Tensor r, Tensor out, Tensor mean, Tensor rstd, Tensor res, Tensor y,
                                            Tensor gate, const WindowOrder& yo, Tensor shift, Tensor scale,
                                            const NormModulateOptions& o) override;
  void norm_modulate_gated_residual_backward(const ResidualNormGrads& g) override;

  // ---- window ops (window_ops.cu; shapes: window_shapes.h) ----
  void window_partition(Tensor o, Tensor x, int h, int w, int win, int s) override;
  void window_reverse(Tensor x, Tensor o, int h, int w, int win, int s) override;
  void patch_merge(Tensor o, Tensor x, int h, int w) override;
  void patch_split(Tensor x, Tensor o, int h, int w) override;
  void upsample_nearest(Tensor o, Tensor x, int h, int w) override;
  void upsample_nearest_backward(Tensor dx, Tensor d, int h, int w) override;
  void grid_transpose(Tensor o, Tensor x, int h, int w) override;
  void window_op(window::Op op, Tensor dst, Tensor src, int h, int w, int win = 1, int s = 0);

  // ---- attention (cuda_backend_attention.cu: cuDNN's engines, attention.cu, attention_tc2.cu,
  // attention_onepass.cu) ----
  void attention_forward(Tensor out, Tensor saved, Tensor qkv, int n_head,
                         const AttentionOptions& opt = {}) override;
  void attention_backward(Tensor dqkv, Tensor dout, Tensor qkv, Tensor out, Tensor saved, int n_head,
                          const AttentionOptions& opt = {}) override;

  // ---- a SiLU MLP's second product, the SiLU fused in where measured faster
  // (cuda_backend_silu.cu, silu_matmul_cudnn.cu) ----
  void silu_matmul_forward(Tensor out, Tensor inp, Tensor w, Tensor bias, Tensor act) override;

 protected:
  Ctx ctx_;  // the stream, op scratch and device shape every launcher gets (set by CudaBackend)
  Switches sw_;  // the environment switches (read by CudaBackend when it is made)
  // Forward and backward of one shape ask the same question, so they always agree on the family
  // whose saved statistics the backward reads (natural-log vs log2 log-sum-exp; the one-pass
  // backward reads either and is told which). Padding masks (seq_lens) and packed samples
  // (positions) always take fittrain's kernels: the cuDNN graphs here have neither a padding
  // mask nor cuDNN's packed (THD) layout.
  bool use_cudnn(DType t, int64_t B, int64_t T, int64_t NH, int64_t HS, const AttentionOptions& opt) const;
  // Which of fittrain's own one-block-a-(sample, head) backwards takes a shape
  // (FT_ATTENTION_BACKWARD), if any: attention_onepass.cu's (mma.sync, sm_80+) or
  // sm90/attention_wgmma.cu's (wgmma, sm_90 only). Both need bf16/f16 (the forward then saved a
  // log-sum-exp they read, cuDNN's or the tensor-core kernels') and T = 64, 128 or 256 with head
  // size 64. By default: the wgmma kernel at T = 256 on sm_90 (H200, session 27: faster than
  // both others at every T = 256 shape of the op table, 0.80 against 0.86 and cuDNN's 0.89 ms at
  // CDEIT's first-stage windows); the one-pass kernel at T = 64 (session 22: 0.011 against
  // cuDNN's 0.021 ms at CDEIT's last stage) and at T = 128 or 256 (off sm_90) where B * NH >= 24
  // x the SMs; elsewhere none (fewer (sample, head)s than that lost, session 22). The choice may
  // depend on B, so a smaller last micro-batch or an evaluation may take another kernel: all
  // read either forward's statistics.
  enum class OwnBackward { none, onepass, wgmma };
  // check = false (planning): a forced switch that cannot take the shape answers none instead
  // of failing, leaving the error to the call.
  OwnBackward own_backward(DType t, int64_t B, int64_t T, int64_t NH, int64_t HS, const AttentionOptions& opt,
                           bool check = true) const;
  // Scratch the cuDNN family needs for a shape: its forward's workspace, and its backward's
  // only where cuDNN runs the backward too (not where own_backward takes it); 0 where cuDNN
  // cannot run the shape. use_cudnn() and the plan (attention_scratch) ask the same.
  size_t cudnn_scratch(DType t, int64_t B, int64_t T, int64_t NH, int64_t HS, const AttentionOptions& opt) const;
  // Scratch of one attention shape: fittrain's backward row sums, or cuDNN's plans (built and
  // cached here for the precision's storage type, so their workspace is planned, not allocated
  // behind the planner's back; use_cudnn() re-checks at run time).
  size_t attention_scratch(const OpShape& o, Precision p) const;
  mutable CudnnAttention cudnn_;  // mutable: workspace_bytes builds (caches) plans
  // cuDNN's fused SiLU products and which path each shape took: -1 the pass and product,
  // i >= 0 cuDNN's plan i (dtype, N, C, OC, bias). The plan counts their workspace cap
  // (CudnnSiluMatmul::kMaxWorkspace) wherever the op runs in 16 bits.
  size_t silu_matmul_scratch(const OpShape& o, Precision p) const;
  mutable CudnnSiluMatmul silu_mm_;
  std::map<std::tuple<int, int64_t, int64_t, int64_t, bool>, int> silu_mm_path_;

 private:
  int choose_silu_matmul(Tensor out, Tensor inp, Tensor w, Tensor bias, Tensor act, int plans);
};

}  // namespace ft::cuda
