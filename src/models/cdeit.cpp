// CDEIT: parameters, binding and the passes (training step, evaluation, prediction). The
// plan (ops and buffers) is in cdeit_plan.cpp; the embedding, blocks, transitions and final
// layer are in cdeit_blocks.cpp.
#include "models/cdeit.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/half.h"
#include "core/rng.h"

namespace ft {

std::vector<int> CDEIT::RunParams::trans_entries() const {
  std::vector<int> v;
  for (int e : {merge_w, merge_b, up_w, up_b, fuse_a_w, fuse_s_w, fuse_b})
    if (e >= 0) v.push_back(e);
  return v;
}

// ---- parameters ------------------------------------------------------------------------------

CDEIT::CDEIT(const CDEITConfig& c) : cfg_(c), sch_{0} {
  cfg_.validate();
  blocks_ = cdeit_blocks(cfg_);
  sch_ = DiTSchedule{static_cast<int>(blocks_.size())};
  const int S = cfg_.stages(), R = 2 * S - 1;
  run_first_.assign(static_cast<size_t>(R), -1);
  for (size_t k = blocks_.size(); k-- > 0;) run_first_[static_cast<size_t>(blocks_[k].run)] = static_cast<int>(k);
  keep_levels_ = keep_levels(blocks_);
  const int64_t D = cfg_.hidden(), F = cfg_.freq_dim;
  const ParamInit N = ParamInit::normal, Z = ParamInit::zeros;
  // Linears start as zeros in the table; init_params draws the xavier-uniform ones.
  x_w_ = params_.add("x_embed_w", {D, cfg_.patch_in()}, true, false, Z);
  x_b_ = params_.add("x_embed_b", {D}, false, false, Z);
  if (cfg_.cond_channels > 0) c_w_ = params_.add("cond_embed_w", {D, cfg_.patch_cond()}, true, false, Z);
  t_w1_ = params_.add("t_w1", {D, F}, true, false, N, 0.02f);
  t_b1_ = params_.add("t_b1", {D}, false, false, Z);
  t_w2_ = params_.add("t_w2", {D, D}, true, false, N, 0.02f);
  t_b2_ = params_.add("t_b2", {D}, false, false, Z);
  embed_entries_ = {x_w_, x_b_};
  if (c_w_ >= 0) embed_entries_.push_back(c_w_);
  for (int e : {t_w1_, t_b1_, t_w2_, t_b2_}) embed_entries_.push_back(e);
  runs_.resize(static_cast<size_t>(R));
  for (int r = 0; r < R; ++r) {
    const CDEITBlock& k0 = blocks_[static_cast<size_t>(run_first_[static_cast<size_t>(r)])];
    const int64_t L = cfg_.depths[static_cast<size_t>(k0.stage)], W = k0.width, H = k0.hidden_mlp;
    const std::string n = cfg_.run_name(r) + ".";
    RunParams& p = runs_[static_cast<size_t>(r)];
    if (r > 0 && !k0.up) {
      const int64_t Wp = cfg_.widths[static_cast<size_t>(k0.stage - 1)];
      p.merge_w = params_.add(n + "merge_w", {W, 4 * Wp}, true, false, Z);
      p.merge_b = params_.add(n + "merge_b", {W}, false, false, Z);
    } else if (k0.up) {
      const int64_t Wb = cfg_.widths[static_cast<size_t>(k0.stage + 1)];
      p.up_w = params_.add(n + "up_w", {W, Wb}, true, false, Z);
      p.up_b = params_.add(n + "up_b", {W}, false, false, Z);
      p.fuse_a_w = params_.add(n + "fuse_up_w", {W, W}, true, false, Z);
      p.fuse_s_w = params_.add(n + "fuse_skip_w", {W, W}, true, false, Z);
      p.fuse_b = params_.add(n + "fuse_b", {W}, false, false, Z);
    }
    p.ada_w = params_.add(n + "ada_w", {L, 6 * W, D}, true, true, Z);  // adaLN-Zero
    p.ada_b = params_.add(n + "ada_b", {L, 6 * W}, false, true, Z);
    p.qkv_w = params_.add(n + "qkv_w", {L, 3 * W, W}, true, true, Z);
    p.qkv_b = params_.add(n + "qkv_b", {L, 3 * W}, false, true, Z);
    p.proj_w = params_.add(n + "proj_w", {L, W, W}, true, true, Z);
    p.proj_b = params_.add(n + "proj_b", {L, W}, false, true, Z);
    p.fc1_w = params_.add(n + "fc1_w", {L, H, W}, true, true, Z);
    p.fc1_b = params_.add(n + "fc1_b", {L, H}, false, true, Z);
    p.fc2_w = params_.add(n + "fc2_w", {L, W, H}, true, true, Z);
    p.fc2_b = params_.add(n + "fc2_b", {L, W}, false, true, Z);
  }
  const int64_t W0 = cfg_.widths[0];
  f_ada_w_ = params_.add("final_ada_w", {2 * W0, D}, true, false, Z);
  f_ada_b_ = params_.add("final_ada_b", {2 * W0}, false, false, Z);
  out_w_ = params_.add("out_w", {cfg_.patch_in(), W0}, true, false, Z);
  out_b_ = params_.add("out_b", {cfg_.patch_in()}, false, false, Z);
}

void CDEIT::init_range(uint64_t seed, int64_t begin, int64_t count, float* out) const {
  params_.init_range(seed, begin, count, out);
  // xavier_uniform_ per matrix (per layer of a stacked entry: the same fans); the patch
  // embedding's fan_in counts both channel groups of its one Conv2d.
  auto xavier = [&](int entry, int64_t fan_out, int64_t fan_in) {
    if (entry < 0) return;
    const ParamEntry& e = params_.at(entry);
    const double a = std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));
    // one stream for the entry: a range that starts inside it skips the draws before it
    ParamTable::for_overlap(e, 0, e.count, begin, count, [&](int64_t lo, int64_t hi) {
      Rng rng(seed * 1000003ull + 7919ull * static_cast<uint64_t>(entry + 1) + 1);
      for (int64_t k = e.offset; k < begin + lo; ++k) rng.skip_uniform();
      for (int64_t k = lo; k < hi; ++k) out[k] = static_cast<float>((2.0 * rng.uniform() - 1.0) * a);
    });
  };
  const int64_t D = cfg_.hidden(), pf = cfg_.patch_in() + cfg_.patch_cond();
  xavier(x_w_, D, pf);
  xavier(c_w_, D, pf);
  for (size_t r = 0; r < runs_.size(); ++r) {
    const RunParams& p = runs_[r];
    const CDEITBlock& k0 = blocks_[static_cast<size_t>(run_first_[r])];
    const int64_t W = k0.width, H = k0.hidden_mlp;
    if (p.merge_w >= 0) xavier(p.merge_w, W, 4 * cfg_.widths[static_cast<size_t>(k0.stage - 1)]);
    if (p.up_w >= 0) {
      xavier(p.up_w, W, cfg_.widths[static_cast<size_t>(k0.stage + 1)]);
      xavier(p.fuse_a_w, W, 2 * W);  // one Linear(2W, W) over the concatenation
      xavier(p.fuse_s_w, W, 2 * W);
    }
    xavier(p.qkv_w, 3 * W, W);
    xavier(p.proj_w, W, W);
    xavier(p.fc1_w, H, W);
    xavier(p.fc2_w, W, H);
  }
}

std::vector<FieldSpec> CDEIT::input_fields() const {
  std::vector<FieldSpec> f{FieldSpec{"image", DType::f32, cfg_.image_elems()}};
  if (cfg_.cond_channels > 0) f.push_back(FieldSpec{"cond", DType::f32, cfg_.cond_elems()});
  f.push_back(FieldSpec{"t", DType::i32, 1});
  f.push_back(FieldSpec{"noise_key", DType::i32, 1});
  return f;
}

int CDEIT::skip_block(int stage) const {
  return run_first_[static_cast<size_t>(stage)] + cfg_.depths[static_cast<size_t>(stage)] - 1;
}

// ---- binding and parameter views -------------------------------------------------------------------

void CDEIT::bind(const ModelBinding& m) {
  be_ = m.backend;
  arena_ = m.arena;
  shape_ = m.shape;
  act_ = activation_dtype(m.shape.precision);
  FT_CHECK(m.params.numel() >= params_.total(), "params buffer of ", m.params.numel(), " elements");
  param_buf_ = m.params;
  grad_buf_ = m.grads;
  need_ = m.params_needed;
  uploads_ = m.uploads;
  const int64_t maxb = std::max(shape_.training ? shape_.micro_batch : 1, shape_.eval_batch);
  losses_.bind(*be_, maxb);
  // bf16/f16 staging for the position table (below), a batch's conditions and a chunk of
  // predictions read back: sized here, so no step or evaluation allocates
  const int64_t pos_elems = 2 * cfg_.tokens() * cfg_.widths[0];
  host_half_.assign(act_ == DType::f32 ? 0
                                        : static_cast<size_t>(std::max({pos_elems, maxb * cfg_.image_elems(),
                                                                        maxb * cond_elems()})),
                    0);
  const int64_t T = cfg_.tokens(), W0 = cfg_.widths[0];
  std::vector<float> pos = DiT::position_table(W0, cfg_.grid());
  pos.resize(static_cast<size_t>(2 * T * W0), 0.0f);
  upload(arena_->tensor(ids_.pos, act_, {2, T * W0}), pos.data(), 2 * T * W0);
}

Tensor CDEIT::param(int entry, std::initializer_list<int64_t> dims, bool grad) const {
  return params_.view(grad ? grad_buf_ : param_buf_, entry, dims, grad);
}

Tensor CDEIT::layer_param(int entry, int layer, std::initializer_list<int64_t> dims, bool grad) const {
  return params_.layer_view(grad ? grad_buf_ : param_buf_, entry, layer, dims, grad);
}

void CDEIT::report(const std::vector<int>& entries, const GradReadyFn& fn) const {
  if (!fn) return;
  std::vector<ParamRange> r;
  for (int e : entries)
    if (e >= 0) r.push_back({params_.at(e).offset, params_.at(e).count});
  fn(r);
}

void CDEIT::report_block(int k, const GradReadyFn& fn) const {
  if (!fn) return;
  const CDEITBlock& blk = blocks_[static_cast<size_t>(k)];
  std::vector<ParamRange> r;
  for (int e : runs_[static_cast<size_t>(blk.run)].block_entries()) r.push_back(params_.layer_range(e, blk.index));
  fn(r);
}

// ---- passes ------------------------------------------------------------------------------------------

double CDEIT::forward_backward(const Batch& batch, float dloss, GradWrite gw, const GradReadyFn& ready) {
  const int64_t b = batch.size, D = cfg_.hidden();
  FT_CHECK(shape_.training && b >= 1 && b <= shape_.micro_batch, "micro-batch ", b);
  const int K = static_cast<int>(blocks_.size()), R = 2 * cfg_.stages() - 1;
  const bool rc = shape_.recompute == Recompute::block;
  Arena& ar = *arena_;
  auto rows = [&](int k) { return b * blocks_[static_cast<size_t>(k)].grid * blocks_[static_cast<size_t>(k)].grid; };
  auto width = [&](int k) { return blocks_[static_cast<size_t>(k)].width; };
  auto out = [&](int k) { return ar.tensor(ids_.out[static_cast<size_t>(k)], act_, {rows(k), width(k)}); };
  auto x_in = [&](int k) {
    const CDEITBlock& blk = blocks_[static_cast<size_t>(k)];
    if (k == 0) return ar.tensor(ids_.res0, act_, {rows(0), width(0)});
    if (blk.first()) return ar.tensor(ids_.tin[static_cast<size_t>(blk.run)], act_, {rows(k), width(k)});
    return out(k - 1);
  };
  auto skip = [&](int k) {  // the skip into an up run's first block
    const CDEITBlock& blk = blocks_[static_cast<size_t>(k)];
    return blk.up ? out(skip_block(blk.stage)) : Tensor();
  };
  auto dres = [&](int r) {
    const int k = first_block(r);
    return ar.tensor(ids_.dres[static_cast<size_t>(r)], act_, {rows(k), width(k)});
  };
  auto sc = [&] { return ar.tensor(ids_.emb.sc, act_, {b, D}); };

  ar.set_phase(sch_.embed_fwd());
  embed_forward(ids_.emb, x_in(0), batch.data<float>("image"),
                cfg_.cond_channels > 0 ? batch.data<float>("cond") : nullptr, batch.data<int32_t>("t"),
                batch.data<int32_t>("noise_key"), nullptr, b);
  // A block's closing gated residual runs where ended_by_next says, in one pass with the next
  // block's first norm (Backend::gated_residual_norm_modulate_forward): the residual stream is
  // not read back, and the previous block's saved buffers are still alive there.
  Block prev;
  for (int k = 0; k < K; ++k) {
    ar.set_phase(sch_.block_fwd(k));
    const CDEITBlock& blk = blocks_[static_cast<size_t>(k)];
    if (blk.first() && blk.run > 0)
      trans_forward(blk.run, ids_.trans[static_cast<size_t>(blk.run)], out(k - 1), skip(k), x_in(k), b);
    const bool ends_prev = k > 0 && ended_by_next(k - 1, shape_.recompute);
    Block a = block_tensors(rc ? ids_.rf : ids_.saved[static_cast<size_t>(k)], blk, b, true, kept_silu(k, shape_));
    block_forward(k, a, sc(), x_in(k), ended_by_next(k, shape_.recompute) ? Tensor() : out(k),
                  ends_prev ? &prev : nullptr);
    prev = a;
  }

  ar.set_phase(sch_.head());
  Tensor pred = head_forward(ids_.head, sc(), out(K - 1), b);
  const BufferId tgt_id = cfg_.predict == "eps" ? ids_.emb.eps : ids_.emb.image;
  Tensor target = ar.tensor(tgt_id, DType::f32, {b, cfg_.image_elems()});
  Tensor losses = ar.tensor(ids_.head.losses, DType::f32, {b});
  Tensor dpred = ar.tensor(ids_.head.dpred, act_, {b, cfg_.image_elems()});
  be_->mse_loss(losses, dpred, pred, target, dloss);
  if (uploads_) uploads_->inputs_read();  // the last read of the image (and long after the map's)
  losses_.start(losses);  // summed after the backward is queued (LossReadback)
  // dres(R - 1): the final layer writes it (a 128 MiB memset at batch 32 before), the blocks'
  // norm backwards then add to it
  Tensor dsc = ar.tensor(ids_.dsc, act_, {b, D});
  be_->zero(dsc);          // every adaLN adds its part of silu(c)'s gradient
  head_backward(ids_.head, sc(), out(K - 1), dpred, dres(R - 1), dsc, b, gw);
  report({f_ada_w_, f_ada_b_, out_w_, out_b_}, ready);

  for (int k = K - 1; k >= 0; --k) {
    ar.set_phase(sch_.block_bwd(k));
    const CDEITBlock& blk = blocks_[static_cast<size_t>(k)];
    Block a = block_tensors(rc ? ids_.rb : ids_.saved[static_cast<size_t>(k)], blk, b, /*forward=*/rc,
                            kept_silu(k, shape_));
    if (rc) block_forward(k, a, sc(), x_in(k), Tensor());  // the block's internals again
    // as in the forward, a block's end and the next block's first norm in one pass
    const bool ends_prev = k > 0 && ended_by_next(k - 1, shape_.recompute);
    Block prev;
    if (ends_prev)
      // (prev's fchs is not read here: its own backward binds it, kept or not)
      prev = block_tensors(ids_.saved[static_cast<size_t>(k - 1)], blocks_[static_cast<size_t>(k - 1)], b, false);
    block_backward(k, a, sc(), x_in(k), dres(blk.run), ar.tensor(ids_.dsc, act_, {b, D}), gw,
                   ends_prev ? &prev : nullptr);
    report_block(k, ready);
    if (!blk.first() || blk.run == 0) continue;
    const int r = blk.run;
    Tensor dskip = blk.up ? ar.tensor(ids_.dskip[static_cast<size_t>(blk.stage)], act_, {rows(k), width(k)}) : Tensor();
    trans_backward(r, ids_.trans[static_cast<size_t>(r)], out(k - 1), skip(k), dres(r), dres(r - 1), dskip, b, gw);
    report(runs_[static_cast<size_t>(r)].trans_entries(), ready);
    if (!blk.up) {  // stage s-1's output was also the skip of up stage s-1: add that path's gradient
      Tensor ds = ar.tensor(ids_.dskip[static_cast<size_t>(blk.stage - 1)], act_, {rows(k - 1), width(k - 1)});
      be_->residual_forward(dres(r - 1), dres(r - 1), ds);
    }
  }

  ar.set_phase(sch_.embed_bwd());
  embed_backward(ids_.emb, b, dres(0), ar.tensor(ids_.dsc, act_, {b, D}), gw);
  report(embed_entries_, ready);
  return losses_.sum();
}

Tensor CDEIT::eval_forward(const float* image, const float* cond, const int32_t* t, const int32_t* keys,
                           const float* x_t, int64_t b) {
  FT_CHECK(b >= 1 && b <= shape_.eval_batch, "evaluation batch ", b, " (planned ", shape_.eval_batch, ")");
  const int64_t D = cfg_.hidden();
  const int K = static_cast<int>(blocks_.size());
  Arena& ar = *arena_;
  auto rows = [&](int k) { return b * blocks_[static_cast<size_t>(k)].grid * blocks_[static_cast<size_t>(k)].grid; };
  auto width = [&](int k) { return blocks_[static_cast<size_t>(k)].width; };
  auto out = [&](int k) { return ar.tensor(ids_.e_out[static_cast<size_t>(k)], act_, {rows(k), width(k)}); };
  ar.set_phase(sch_.eval_embed());
  embed_forward(ids_.e_emb, ar.tensor(ids_.e_res0, act_, {rows(0), width(0)}), image, cond, t, keys, x_t, b);
  for (int k = 0; k < K; ++k) {
    ar.set_phase(sch_.eval_block(k));
    const CDEITBlock& blk = blocks_[static_cast<size_t>(k)];
    Tensor in;
    if (k == 0) {
      in = ar.tensor(ids_.e_res0, act_, {rows(0), width(0)});
    } else if (blk.first()) {
      in = ar.tensor(ids_.e_tin[static_cast<size_t>(blk.run)], act_, {rows(k), width(k)});
      trans_forward(blk.run, ids_.e_trans[static_cast<size_t>(blk.run)], out(k - 1),
                    blk.up ? out(skip_block(blk.stage)) : Tensor(), in, b);
    } else {
      in = out(k - 1);
    }
    block_forward(k, block_tensors(ids_.eval[static_cast<size_t>(k)], blk, b), ar.tensor(ids_.e_emb.sc, act_, {b, D}),
                  in, out(k));
  }
  ar.set_phase(sch_.eval_head());
  return head_forward(ids_.e_head, ar.tensor(ids_.e_emb.sc, act_, {b, D}), out(K - 1), b);
}

double CDEIT::eval_loss(const Batch& batch) {
  const int64_t b = batch.size;
  Tensor pred = eval_forward(batch.data<float>("image"), cfg_.cond_channels > 0 ? batch.data<float>("cond") : nullptr,
                             batch.data<int32_t>("t"), batch.data<int32_t>("noise_key"), nullptr, b);
  const BufferId tgt_id = cfg_.predict == "eps" ? ids_.e_emb.eps : ids_.e_emb.image;
  Tensor target = arena_->tensor(tgt_id, DType::f32, {b, cfg_.image_elems()});
  Tensor losses = arena_->tensor(ids_.e_head.losses, DType::f32, {b});
  be_->mse_loss(losses, Tensor(), pred, target, 0.0f);
  return losses_.read(losses);
}

void CDEIT::predict(const float* x_t, const float* cond, const int32_t* t, int64_t n, float* out) {
  FT_CHECK(x_t && t && out && (cond || cfg_.cond_channels == 0), "CDEIT::predict: missing input");
  const int64_t G = std::max<int64_t>(1, shape_.eval_batch), E = cfg_.image_elems(), CE = cond_elems();
  for (int64_t first = 0; first < n; first += G) {
    const int64_t b = std::min(G, n - first);
    Tensor pred = eval_forward(nullptr, cond ? cond + first * CE : nullptr, t + first, nullptr, x_t + first * E, b);
    download_floats(*be_, out + first * E, pred, host_half_);
  }
}

}  // namespace ft
