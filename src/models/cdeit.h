// CDEIT (family "cdeit"): a U-shaped diffusion transformer for EIT reconstruction (Shi, Kang,
// Liatsis, IEEE TIM 2025), trained by --task diffusion like the DiT (models/dit.h): the task
// gives "image" (x0), "cond" (the voltage map, concatenated to x_t as input channels), "t" and
// "noise_key"; x_t is drawn on the device, the network predicts x0 (or eps), MSE per image.
// The architecture and its reading of the paper: models/cdeit_config.h.
//
// Code shared with the DiT: the noise (diffusion_mix under kDiTNoiseSeed), the beta schedule,
// the position table (DiT::position_table over the first stage's grid and width), the
// timestep embedding and the Denoiser interface. Differences from the DiT's blocks: RMSNorm
// (no affine, eps 1e-6) instead of LayerNorm, SiLU instead of GELU in the MLP, attention in
// windows (the modulated tokens written in window order by norm_modulate, the projection's
// output read in window order by the gated residual: both products are per token, so they run
// in window order, and no window copy is left), widths
// per stage, and the final layer's norm is RMSNorm too.
//
// Buffers: every block's saved activations live from its forward to its backward; a stage's
// output that is a skip lives until the up stage's fusion backward (which comes before the
// next down block's backward, so the ordinary "until the next block's backward" covers it);
// the gradient of each stage run (dres per run) lives from where the run above writes it to
// the run's first block's backward; the skip's gradient from the fusion backward to the merge
// backward of the stage above. Recompute::block: one shared set of block internals, sized for
// the largest block, forward and backward, as the DiT does; transitions keep their inputs.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "models/adaln.h"
#include "models/cdeit_config.h"
#include "models/dit.h"
#include "models/host_transfer.h"
#include "models/model.h"

namespace ft {

class CDEIT final : public Model, public Denoiser {
 public:
  explicit CDEIT(const CDEITConfig& c);
  const CDEITConfig& cdeit_config() const { return cfg_; }

  std::string family() const override { return "cdeit"; }
  nlohmann::json config() const override { return cfg_.to_json(); }
  std::string describe() const override { return cfg_.describe(); }
  const ParamTable& param_table() const override { return params_; }
  void init_range(uint64_t seed, int64_t begin, int64_t count, float* out) const override;

  std::vector<FieldSpec> input_fields() const override;
  int64_t loss_values_per_sample() const override { return 1; }
  int num_phases() const override { return sch_.num_phases(); }
  int optimizer_phase() const override { return sch_.optimizer(); }
  // silu(h) of the MLP kept from the forward: in keep_levels_[level]'s blocks (kept_silu)
  int max_keep_level() const override { return static_cast<int>(keep_levels_.size()) - 1; }
  int kept_blocks(int level) const override;
  bool overwrites_every_grad() const override { return true; }
  void declare_buffers(BufferTable& t, const PlanShape& s, const Backend& be) const override;
  std::vector<OpShape> ops(const PlanShape& s) const override;
  void check_supported(const Backend& be, Precision p) const override;

  void keep_buffers(BufferTable& t, const PlanShape& s, const Backend& be) override;
  void bind(const ModelBinding& m) override;
  double forward_backward(const Batch& batch, float dloss, GradWrite gw, const GradReadyFn& ready) override;
  double eval_loss(const Batch& batch) override;

  // Denoiser
  int64_t image_elems() const override { return cfg_.image_elems(); }
  int64_t cond_elems() const override { return cfg_.cond_channels > 0 ? cfg_.cond_elems() : 0; }
  int64_t max_predict_batch() const override { return shape_.eval_batch; }
  void predict(const float* x_t, const float* cond, const int32_t* t, int64_t n, float* out) override;
  std::string predicts() const override { return cfg_.predict; }

  const std::vector<CDEITBlock>& blocks() const { return blocks_; }
  // The keep levels, computed once with the blocks: level l keeps silu(fch) in set l's blocks.
  // A kept block saves its backward the write of its [N, H] (a larger block, more time) and
  // holds that [N, H] from its forward to its backward, so the levels are every total of kept
  // [N, H] the blocks can make, in increasing order (level 0 none, the last every block), each
  // by the most blocks that make it (a pass also has a fixed cost), blocks of one size taken
  // last first: a kept block's backward needs no [N, H] of its own for d(fch) (it reuses the
  // kept bytes), and the last block's backward, the first, is where the step's memory peaks.
  // Session 27's rule (the k largest, the earliest first) left what 3 first-stage blocks did
  // not use of CDEIT's budget idle: a fourth needed 512 MiB, while the later stages' blocks
  // take 128, 32 and 8 MiB at batch 32 and save about as much a byte (PERFORMANCE, session 28).
  static std::vector<std::vector<bool>> keep_levels(const std::vector<CDEITBlock>& blocks);

  struct BlockIds {
    BufferId mod, rstd1, m1w, qkv, atty, att, ao, mid, rstd2, m2, fch, fchs, mo;
  };
  // The transition into a run. Down: merged. Up, all products at the low resolution (a
  // product of rows commutes with nearest upsampling): lo = 1x1 conv(prev), lo_a = lo fuse_a_wᵀ,
  // up = upsample(lo_a), the residual input of the skip's product.
  struct TransIds {
    BufferId merged = kNoBuffer, lo = kNoBuffer, lo_a = kNoBuffer, up = kNoBuffer;
  };
  struct EmbedIds {
    BufferId image = kNoBuffer, eps = kNoBuffer, xt = kNoBuffer, coef = kNoBuffer, keys = kNoBuffer, t = kNoBuffer,
             cond_map = kNoBuffer, xtok = kNoBuffer, ctok = kNoBuffer, tfreq = kNoBuffer,
             t1 = kNoBuffer, t1s = kNoBuffer, c = kNoBuffer, sc = kNoBuffer;
  };
  struct HeadIds {
    BufferId fmod, rstdf, mf, otok, pred, losses, dpred = kNoBuffer, dotok = kNoBuffer, dmf = kNoBuffer,
        dfmod = kNoBuffer, tmp = kNoBuffer;
  };
  struct Ids {
    BufferId pos = kNoBuffer;
    EmbedIds emb, e_emb;
    BufferId res0 = kNoBuffer, e_res0 = kNoBuffer;
    std::vector<BufferId> out, e_out;     // per block: its output
    std::vector<BufferId> tin, e_tin;     // per run: the transition's output (run 0: none)
    std::vector<TransIds> trans, e_trans; // per run
    std::vector<BlockIds> saved, eval;    // per block
    BlockIds rf{}, rb{};                  // recompute sets
    // backward scratch per block
    std::vector<BufferId> d_a, d_b, d3, d4, dmod, dtmp;
    std::vector<BufferId> dres;           // per run: the gradient of its residual stream
    std::vector<BufferId> dskip;          // per stage s < S-1: the skip's gradient from the fusion
    std::vector<BufferId> dtr_a, dtr_b;   // per run: transition backward scratch
    HeadIds head{}, e_head{};
    BufferId dsc = kNoBuffer, d_t1s = kNoBuffer;
  };

 private:
  enum class Mode { saved, recompute_fwd, recompute_bwd, eval };
  struct Block {
    Tensor mod, rstd1, m1w, qkv, atty, att, ao, mid, rstd2, m2, fch, fchs, mo;
    int64_t b = 0;
    bool silu_kept = false;  // fchs holds silu(fch) from the forward to the backward
  };
  struct Sizes;  // a block's buffer sizes (cdeit_plan.cpp)

  void declare(BufferTable& t, const PlanShape& s, const Backend& be, Ids& ids) const;
  void declare_embed(BufferTable& t, int64_t b, size_t a, bool training, EmbedIds& e) const;
  void declare_block(BufferTable& t, const Sizes& z, const std::string& pre, BufferClass cls, int first, int last,
                     BlockIds& o, bool keep_silu = false) const;
  // Whether block k keeps silu(fch) from its forward under shape s (PlanShape::keep_level): a
  // block of keep_levels_[s.keep_level], every block's activations saved.
  bool kept_silu(int k, const PlanShape& s) const;
  const std::vector<bool>& keep_set(int level) const;  // keep_levels_[level], the level checked
  void declare_head(BufferTable& t, int64_t b, size_t a, bool training, HeadIds& h) const;
  Sizes block_sizes(const CDEITBlock& k, int64_t b, Precision p, const Backend& be) const;
  // forward = false: without the forward-only scratch (a saved block's backward, whose
  // scratch's bytes belong to others by then)
  Block block_tensors(const BlockIds& ids, const CDEITBlock& k, int64_t b, bool forward = true,
                      bool silu_kept = false);
  int first_block(int run) const { return run_first_[static_cast<size_t>(run)]; }
  int skip_block(int stage) const;  // the last block of down stage `stage`
  int run_of_up(int stage) const { return cfg_.stages() + (cfg_.stages() - 2 - stage); }

  // passes (cdeit_blocks.cpp)
  void embed_forward(const EmbedIds& ids, Tensor res, const float* image, const float* cond, const int32_t* t,
                     const int32_t* keys, const float* x_t, int64_t b);
  void embed_backward(const EmbedIds& ids, int64_t b, Tensor dres, Tensor dsc, GradWrite gw);
  // Whether block k's closing gated residual runs in block k + 1, fused with that block's first
  // norm, each way: the next block is of the same run and every block's activations are saved
  // (a recompute's shared buffers hold one block only).
  bool ended_by_next(int k, Recompute r) const {
    return r == Recompute::none && k + 1 < static_cast<int>(blocks_.size()) &&
           !blocks_[static_cast<size_t>(k + 1)].first();
  }
  // x_out empty: the block stops before its closing gated residual (a recompute, or the next
  // block computes it). prev: x_in is not yet written; it is prev's closing gated residual
  // (prev: the block before, in the same run), computed here in one pass with this block's
  // first RMSNorm + modulate.
  void block_forward(int k, const Block& a, Tensor sc, Tensor x_in, Tensor x_out, const Block* prev = nullptr);
  // prev (saved activations, the block before in the same run): its closing gated residual's
  // backward runs here, fused with this block's first norm + modulate backward; prev's d(mo)
  // then overwrites prev.mo and its dgate goes to prev's d_mod. A block ended by the next one
  // (ended_by_next) finds its d(mo) in a.mo.
  void block_backward(int k, const Block& a, Tensor sc, Tensor x_in, Tensor dres, Tensor dsc, GradWrite gw,
                      const Block* prev = nullptr);
  // the transition into run r (r > 0) from the previous block's output (and the skip)
  void trans_forward(int r, const TransIds& ids, Tensor prev, Tensor skip, Tensor out, int64_t b);
  // dx_in: the run's dres; dprev: the previous run's dres (overwritten); dskip (up runs)
  void trans_backward(int r, const TransIds& ids, Tensor prev, Tensor skip, Tensor dx_in, Tensor dprev, Tensor dskip,
                      int64_t b, GradWrite gw);
  FinalLayerBuffers final_buffers(const HeadIds& h, int64_t b);  // backward's only when training
  FinalLayerParams final_params(bool grad) const;
  Tensor head_forward(const HeadIds& h, Tensor sc, Tensor x, int64_t b);
  void head_backward(const HeadIds& h, Tensor sc, Tensor x, Tensor dpred, Tensor dres, Tensor dsc, int64_t b,
                     GradWrite gw);
  Tensor eval_forward(const float* image, const float* cond, const int32_t* t, const int32_t* keys,
                      const float* x_t, int64_t b);
  void upload(Tensor dst, const float* src, int64_t n) { upload_floats(*be_, dst, src, n, host_half_); }

  Tensor param(int entry, std::initializer_list<int64_t> dims, bool grad) const;
  Tensor layer_param(int entry, int layer, std::initializer_list<int64_t> dims, bool grad) const;
  void report(const std::vector<int>& entries, const GradReadyFn& fn) const;
  void report_block(int k, const GradReadyFn& fn) const;

  CDEITConfig cfg_;
  std::vector<CDEITBlock> blocks_;
  std::vector<int> run_first_;  // per run: its first block
  std::vector<std::vector<bool>> keep_levels_;  // per level, per block: kept (keep_levels)
  DiTSchedule sch_;
  ParamTable params_;
  // parameter entries
  int x_w_ = -1, x_b_ = -1, c_w_ = -1, t_w1_ = -1, t_b1_ = -1, t_w2_ = -1, t_b2_ = -1;
  struct RunParams {  // per run: stacked over its blocks
    int ada_w = -1, ada_b = -1, qkv_w = -1, qkv_b = -1, proj_w = -1, proj_b = -1, fc1_w = -1, fc1_b = -1,
        fc2_w = -1, fc2_b = -1;
    // transition: down merge_w [W, 4 W_prev], merge_b; up: up_w [W, W_below], up_b, fuse_a_w [W, W] (the
    // upsampled half of the concatenation), fuse_b_w [W, W] (the skip half), fuse_b [W]
    int merge_w = -1, merge_b = -1, up_w = -1, up_b = -1, fuse_a_w = -1, fuse_s_w = -1, fuse_b = -1;
    std::vector<int> block_entries() const {
      return {ada_w, ada_b, qkv_w, qkv_b, proj_w, proj_b, fc1_w, fc1_b, fc2_w, fc2_b};
    }
    std::vector<int> trans_entries() const;
  };
  std::vector<RunParams> runs_;
  int f_ada_w_ = -1, f_ada_b_ = -1, out_w_ = -1, out_b_ = -1;
  std::vector<int> embed_entries_;
  // bound state
  Ids ids_;
  Backend* be_ = nullptr;
  Arena* arena_ = nullptr;
  PlanShape shape_;
  DType act_ = DType::f32;
  Tensor param_buf_, grad_buf_;
  ParamNeededFn need_;
  InputUploads* uploads_ = nullptr;  // training's image and map uploads (ModelBinding::uploads)
  LossReadback losses_;  // the per-sample losses, read back (models/host_transfer.h)
  std::vector<uint16_t> host_half_;  // bf16/f16 staging of uploads and predictions, sized at bind
};

}  // namespace ft
