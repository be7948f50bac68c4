// The conditional DiT (family "dit"): Peebles & Xie 2023, a transformer over image patches
// whose blocks are modulated by the diffusion timestep and a condition through adaLN-Zero,
// trained to denoise: trained here on EIT data (CDEIT, train/diffusion_task.h).
//
// Per sample the task provides "image" f32 [C*H*W] (x0 in [-1, 1]), "cond" f32 (a vector
// [cond_dim] or a map [cond_channels*H*W]), "t" i32 [1] (0..999) and "noise_key" i32 [1].
// One training step, per micro-batch (models/dit_config.h has the phases):
//   x_t = sqrt(ab_t) x0 + sqrt(1 - ab_t) eps       diffusion_mix, eps drawn on the device from
//                                                  (kDiTNoiseSeed, noise_key, element)
//   h = patchify(x_t) W_x + b_x  [+ patchify(cond map) W_c]  + pos     (the Conv2d patch
//       embedding of x_t concatenated with the condition map, its weight split by channel
//       group into x_embed_w and cond_embed_w; pos is DiT's fixed 2-D sin-cos table)
//   c = MLP_t(timestep_embedding(t)) [+ MLP_y(cond vector)]; s = silu(c)
//   L blocks: (shift, scale, gate) x 2 = s W_ada + b_ada (adaLN-Zero, zero at start)
//     h += gate1 * Attn(modulate(LN(h), shift1, scale1))     (non-causal, LN without affine)
//     h += gate2 * MLP(modulate(LN(h), shift2, scale2))      (GELU-tanh, width mlp_ratio*D)
//   out = Linear(modulate(LN(h), shift, scale)) with (shift, scale) = s W_f + b_f; unpatchify
//   loss_b = mean over the sample's elements of (out - target)^2, target x0 or eps (`predict`)
// The loss unit is an image (one loss value per sample).
//
// Where fittrain differs from the reference DiT (scripts/make_dit_fixture.py writes the same
// model in PyTorch): LayerNorm eps is the backend's 1e-5 (DiT: 1e-6; a relative difference of
// < 5e-6 in rstd for unit-variance rows); no learned sigma (out channels = in channels); the
// unpatchify feature order is (c, py, px) (DiT's is (py, px, c): the same for one channel);
// the condition vector goes through a two-layer MLP where DiT has a class-embedding table.
// Initialisation is DiT's: xavier-uniform linears (init_params draws them uniform, the
// ParamTable has no uniform init), zero biases, timestep MLP normal(0.02), adaLN and final
// linear zero.
//
// Recompute::block keeps only each block's input (and its small modulation is redone too).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "models/adaln.h"
#include "models/dit_config.h"
#include "models/host_transfer.h"
#include "models/model.h"

namespace ft {

// Running the network on given noisy images (DDIM sampling, metrics): no noise is drawn.
class Denoiser {
 public:
  virtual ~Denoiser() = default;
  virtual int64_t image_elems() const = 0;   // C*H*W of x_t and of the prediction
  virtual int64_t cond_elems() const = 0;    // of one condition (0: none)
  virtual int64_t max_predict_batch() const = 0;  // the plan's eval batch
  // out[n, C*H*W] = the network's prediction (x0 or eps, as the model predicts) for x_t[n,
  // C*H*W] at timesteps t[n] (0..999) under cond[n, cond_elems] (null when there is none).
  // Host f32 arrays; any n (processed in chunks of max_predict_batch()).
  virtual void predict(const float* x_t, const float* cond, const int32_t* t, int64_t n, float* out) = 0;
  virtual std::string predicts() const = 0;  // "x0" or "eps"
};

class DiT final : public Model, public Denoiser {
 public:
  explicit DiT(const DiTConfig& c);
  const DiTConfig& dit_config() const { return cfg_; }

  std::string family() const override { return "dit"; }
  nlohmann::json config() const override { return cfg_.to_json(); }
  std::string describe() const override { return cfg_.describe(); }
  const ParamTable& param_table() const override { return params_; }
  bool overwrites_every_grad() const override { return true; }
  // DiT's initialisation: the table's (zeros, normal) then xavier-uniform for the linears.
  void init_range(uint64_t seed, int64_t begin, int64_t count, float* out) const override;

  std::vector<FieldSpec> input_fields() const override;
  int64_t loss_values_per_sample() const override { return 1; }
  int num_phases() const override { return DiTSchedule{cfg_.depth}.num_phases(); }
  int optimizer_phase() const override { return DiTSchedule{cfg_.depth}.optimizer(); }
  void declare_buffers(BufferTable& t, const PlanShape& s, const Backend& be) const override;
  std::vector<OpShape> ops(const PlanShape& s) const override;
  void check_supported(const Backend& be, Precision p) const override;

  void keep_buffers(BufferTable& t, const PlanShape& s, const Backend& be) override;
  void bind(const ModelBinding& m) override;
  double forward_backward(const Batch& batch, float dloss, GradWrite gw, const GradReadyFn& ready) override;
  double eval_loss(const Batch& batch) override;

  // Denoiser
  int64_t image_elems() const override { return cfg_.image_elems(); }
  int64_t cond_elems() const override { return has_cond() ? cfg_.cond_elems() : 0; }
  int64_t max_predict_batch() const override { return shape_.eval_batch; }
  void predict(const float* x_t, const float* cond, const int32_t* t, int64_t n, float* out) override;
  std::string predicts() const override { return cfg_.predict; }

  // The fixed 2-D sin-cos position table [T, D] (DiT's get_2d_sincos_pos_embed), host f32.
  static std::vector<float> position_table(int64_t hidden, int64_t grid);

  // The internals of one block, as buffer ids (dit_blocks.cpp).
  struct BlockIds {
    BufferId mod, ln1_mean, ln1_rstd, m1, qkv, atty, att, ao, mid, ln2_mean, ln2_rstd, m2, fch, fch_gelu,
        mo;
  };
  // The embedding pass's buffers (training or evaluation set).
  struct EmbedIds {
    BufferId image = kNoBuffer, eps = kNoBuffer, xt = kNoBuffer, coef = kNoBuffer, keys = kNoBuffer, t = kNoBuffer,
             cond_map = kNoBuffer, cond_vec = kNoBuffer, xtok = kNoBuffer, ctok = kNoBuffer, tfreq = kNoBuffer,
             t1 = kNoBuffer, t1s = kNoBuffer, ct = kNoBuffer, y1 = kNoBuffer, y1s = kNoBuffer, c = kNoBuffer,
             sc = kNoBuffer;
  };
  struct HeadIds {
    BufferId fmod, lnf_mean, lnf_rstd, mf, otok, pred, losses, dpred = kNoBuffer, dotok = kNoBuffer,
        dmf = kNoBuffer, dfmod = kNoBuffer, tmp = kNoBuffer;
  };
  struct Ids {
    BufferId pos = kNoBuffer;  // [2, T*D]: the position table, then zeros (see embed())
    EmbedIds emb, e_emb;
    std::vector<BufferId> res;        // training residual stream: res[0] embedded, res[l+1] block l's output
    std::vector<BlockIds> saved;      // per layer, without recompute
    BlockIds rf{}, rb{};              // recompute: forward and backward sets
    std::vector<BufferId> d_a, d_b, d3, d4, dmod, dtmp;  // per layer backward scratch
    HeadIds head{}, e_head{};
    BufferId dres = kNoBuffer, dsc = kNoBuffer, d_t1s = kNoBuffer, d_y1s = kNoBuffer;
    BufferId e_res0 = kNoBuffer, e_res1 = kNoBuffer;
    std::vector<BlockIds> eval;
  };

 private:
  enum class Mode { saved, recompute_fwd, recompute_bwd, eval };
  struct Block {  // a block's tensors at batch b
    Tensor mod, ln1_mean, ln1_rstd, m1, qkv, atty, att, ao, mid, ln2_mean, ln2_rstd, m2, fch, fch_gelu, mo;
    int64_t b = 0;
  };
  struct Embed {  // the embedding pass's tensors at batch b
    Tensor image, eps, xt, coef, keys, t, cond_map, cond_vec, xtok, ctok, tfreq, t1, t1s, ct, y1, y1s, c, sc;
    int64_t b = 0;
  };

  bool has_cond() const { return cfg_.cond_channels > 0 || cfg_.cond_dim > 0; }
  void declare(BufferTable& t, const PlanShape& s, const Backend& be, Ids& ids) const;
  void declare_embed(BufferTable& t, int64_t b, size_t a, bool training, EmbedIds& e) const;
  void declare_block(BufferTable& t, const PlanShape& s, const Backend& be, Mode mode, int layer, int64_t b,
                     BufferClass cls, int first, int last, BlockIds& o) const;
  void declare_head(BufferTable& t, int64_t b, size_t a, bool training, HeadIds& h) const;
  Block block_tensors(const BlockIds& ids, int64_t b);
  Embed embed_tensors(const EmbedIds& ids, int64_t b);
  HeadIds head_ids(bool training) const { return training ? ids_.head : ids_.e_head; }

  // Embedding forward into res [b*T, D]; fills e's device inputs from the batch's host fields
  // (x_t given: the Denoiser's noisy images, no mix).
  void embed_forward(const Embed& e, Tensor res, const float* image, const float* cond, const int32_t* t,
                     const int32_t* keys, const float* x_t, int64_t b);
  // The embedding's backward from the tokens' gradient dres [b*T, D] and silu(c)'s dsc [b, D]
  // (dsc is overwritten with c's gradient on the way).
  void embed_backward(const EmbedIds& ids, int64_t b, Tensor dres, Tensor dsc, GradWrite gw);
  // The evaluation forward (image and keys: noise them; x_t: take it as is) to the prediction.
  Tensor eval_forward(const float* image, const float* cond, const int32_t* t, const int32_t* keys,
                      const float* x_t, int64_t b);
  // Whether block l's closing gated residual runs in block l + 1, fused with that block's first
  // norm, each way: every block's activations are saved (a recompute's shared buffers hold one
  // block only).
  bool ended_by_next(int l, Recompute r) const { return r == Recompute::none && l + 1 < cfg_.depth; }
  // x_out empty: the block stops before its closing gated residual (a recompute, or the next
  // block computes it). prev: x_in is not yet written; it is prev's (the block before)
  // closing gated residual, computed here in one pass with this block's first norm + modulate.
  void block_forward(int l, const Block& a, Tensor sc, Tensor x_in, Tensor x_out, const Block* prev = nullptr);
  // prev (saved activations, the block before): its closing gated residual's backward runs
  // here, fused with this block's first norm + modulate backward; prev's d(mo) then overwrites
  // prev.mo and its dgate goes to prev's d_mod. A block ended by the next one (ended_by_next)
  // finds its d(mo) in a.mo.
  void block_backward(int l, const Block& a, Tensor sc, Tensor x_in, Tensor dres, Tensor dsc, GradWrite gw,
                      const Block* prev = nullptr);
  // Final layer into the prediction [b, C, H, W] (head phase).
  FinalLayerBuffers final_buffers(const HeadIds& h, int64_t b);  // backward's only when training
  FinalLayerParams final_params(bool grad) const;
  Tensor head_forward(const HeadIds& h, Tensor sc, Tensor x, int64_t b);
  void head_backward(const HeadIds& h, Tensor sc, Tensor x, Tensor dpred, Tensor dres, Tensor dsc, int64_t b,
                     GradWrite gw);
  // Copies host f32 [n] to a device tensor of any float dtype.
  void upload(Tensor dst, const float* src, int64_t n) { upload_floats(*be_, dst, src, n, host_half_); }

  Tensor param(int entry, std::initializer_list<int64_t> dims, bool grad) const;
  Tensor layer_param(int entry, int layer, std::initializer_list<int64_t> dims, bool grad) const;
  void report(std::initializer_list<int> entries, const GradReadyFn& fn) const;
  void report_layer(int layer, const GradReadyFn& fn) const;

  DiTConfig cfg_;
  DiTSchedule sch_;
  ParamTable params_;
  // parameter entries
  int x_w_ = -1, x_b_ = -1, c_w_ = -1, t_w1_ = -1, t_b1_ = -1, t_w2_ = -1, t_b2_ = -1, y_w1_ = -1, y_b1_ = -1,
      y_w2_ = -1, y_b2_ = -1;
  int ada_w_ = -1, ada_b_ = -1, qkv_w_ = -1, qkv_b_ = -1, proj_w_ = -1, proj_b_ = -1, fc1_w_ = -1, fc1_b_ = -1,
      fc2_w_ = -1, fc2_b_ = -1;
  int f_ada_w_ = -1, f_ada_b_ = -1, out_w_ = -1, out_b_ = -1;
  std::vector<int> embed_entries_, layer_entries_, final_entries_;
  // bound state
  Ids ids_;
  Backend* be_ = nullptr;
  Arena* arena_ = nullptr;
  PlanShape shape_;
  DType act_ = DType::f32;
  Tensor param_buf_, grad_buf_;
  ParamNeededFn need_;
  LossReadback losses_;  // the per-sample losses, read back (models/host_transfer.h)
  std::vector<uint16_t> host_half_;  // bf16/f16 staging of uploads and predictions, sized at bind
};

}  // namespace ft
