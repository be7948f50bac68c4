// Internal to the CPU backend (included by its own files only, never through
// backend/cpu/cpu_backend.h): the part of CpuBackend shared by the files that define its ops.
// CpuBackend (cpu_backend.cpp) derives from CpuBackendBase, whose diffusion, window and
// recommender ops are defined in cpu_backend_diffusion.cpp (split to keep files under ~600 lines).
#pragma once
#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "backend/backend.h"
#include "core/error.h"
#include "core/tensor.h"

namespace ft::cpu {

// A required fp32 tensor.
inline void check_f32(const Tensor& t, const char* op, const char* name) {
  FT_CHECK(!t.empty(), op, ": ", name, " is empty");
  FT_CHECK(t.dtype == DType::f32, op, ": ", name, " must be f32 on the cpu backend, got ",
           t.shape_str());
}

inline void check_numel(const Tensor& t, int64_t n, const char* op, const char* name) {
  FT_CHECK(t.numel() == n, op, ": ", name, " ", t.shape_str(), " should have ", n,
           " elements");
}

class CpuBackendBase : public Backend {
 public:
  // ---- recommender head (bpr.h) ----
  void bpr_forward_backward(Tensor losses, Tensor dh, Tensor dE, Tensor h, Tensor E, Tensor pos,
                            Tensor neg, float dloss) override;
  void item_scores(Tensor out, Tensor h, Tensor E, Tensor items) override;

  // ---- diffusion (patchify.h, diffusion.h, rmsnorm.h, adamw.h; shapes: diffusion_shapes.h) ----
  void patchify(Tensor out, Tensor img, int p) override;
  void unpatchify(Tensor img, Tensor tokens, int p) override;
  void diffusion_mix(Tensor out, Tensor noise_out, Tensor x, Tensor y, Tensor coef, Tensor keys,
                     uint64_t seed) override;
  void mse_loss(Tensor losses, Tensor dpred, Tensor pred, Tensor target, float dloss) override;
  void timestep_embedding(Tensor out, Tensor t, float max_period) override;
  void rmsnorm_forward(Tensor out, Tensor rstd, Tensor inp) override;
  void rmsnorm_backward(Tensor dinp, Tensor dout, Tensor inp, Tensor rstd) override;
  void patch_embed_forward(Tensor out, Tensor x, Tensor wx, Tensor c, Tensor wc, Tensor bias,
                           Tensor table) override;  // patch_embed.h
  void patch_embed_backward(Tensor dwx, Tensor dwc, Tensor dbias, Tensor dout, Tensor x, Tensor c,
                            GradWrite gw) override;
  void ema_update(Tensor out, Tensor src, float decay) override;
  // fused norm + modulate (norm_modulate.h; shapes: norm_modulate_shapes.h)
  void norm_modulate_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor shift, Tensor scale,
                             const NormModulateOptions& o) override;
  void norm_modulate_backward(Tensor dinp, Tensor dshift, Tensor dscale, Tensor dout, Tensor inp, Tensor mean,
                              Tensor rstd, Tensor scale, const NormModulateOptions& o) override;

  // ---- window ops (window_ops.h) ----
  void window_partition(Tensor o, Tensor x, int h, int w, int win, int s) override;
  void window_reverse(Tensor x, Tensor o, int h, int w, int win, int s) override;
  void patch_merge(Tensor o, Tensor x, int h, int w) override;
  void patch_split(Tensor x, Tensor o, int h, int w) override;
  void upsample_nearest(Tensor o, Tensor x, int h, int w) override;
  void upsample_nearest_backward(Tensor dx, Tensor d, int h, int w) override;
  void grid_transpose(Tensor o, Tensor x, int h, int w) override;

 protected:
  // Element-wise ops: every tensor (output and inputs alike) f32 with n elements.
  struct Named {
    const Tensor& t;
    const char* name;
  };
  static void check_elementwise(const char* op, int64_t n, std::initializer_list<Named> ts) {
    for (const Named& x : ts) check_f32(x.t, op, x.name);
    for (const Named& x : ts) check_numel(x.t, n, op, x.name);
  }

  // dbias[C] (+)= the column sums of d [..., C] (an element-wise backward's fused bias gradient)
  static void add_column_sums(const char* op, Tensor dbias, Tensor d, GradWrite gw);

  void* workspace_ = nullptr;  // set by CpuBackend::set_workspace
  size_t workspace_size_ = 0;
};

}  // namespace ft::cpu
