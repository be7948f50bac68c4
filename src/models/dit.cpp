// DiT: parameters, buffers, binding and the passes (training step, evaluation, prediction).
// The per-block, head and embedding computations are in dit_blocks.cpp.
#include "models/dit.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/half.h"
#include "core/rng.h"

namespace ft {

// ---- parameters --------------------------------------------------------------------------

DiT::DiT(const DiTConfig& c) : cfg_(c), sch_{c.depth} {
  cfg_.validate();
  const int64_t L = cfg_.depth, D = cfg_.hidden, R = int64_t{cfg_.mlp_ratio} * D, F = cfg_.freq_dim;
  const ParamInit N = ParamInit::normal, Z = ParamInit::zeros;
  // Linears start as zeros in the table; init_params draws the xavier-uniform ones (the
  // table cannot say uniform). Matrices decay, biases do not.
  x_w_ = params_.add("x_embed_w", {D, cfg_.patch_in()}, true, false, Z);
  x_b_ = params_.add("x_embed_b", {D}, false, false, Z);
  if (cfg_.cond_channels > 0) c_w_ = params_.add("cond_embed_w", {D, cfg_.patch_cond()}, true, false, Z);
  t_w1_ = params_.add("t_w1", {D, F}, true, false, N, 0.02f);
  t_b1_ = params_.add("t_b1", {D}, false, false, Z);
  t_w2_ = params_.add("t_w2", {D, D}, true, false, N, 0.02f);
  t_b2_ = params_.add("t_b2", {D}, false, false, Z);
  if (cfg_.cond_dim > 0) {
    y_w1_ = params_.add("y_w1", {D, cfg_.cond_dim}, true, false, Z);
    y_b1_ = params_.add("y_b1", {D}, false, false, Z);
    y_w2_ = params_.add("y_w2", {D, D}, true, false, Z);
    y_b2_ = params_.add("y_b2", {D}, false, false, Z);
  }
  for (int e : {x_w_, x_b_, c_w_, t_w1_, t_b1_, t_w2_, t_b2_, y_w1_, y_b1_, y_w2_, y_b2_})
    if (e >= 0) embed_entries_.push_back(e);
  ada_w_ = params_.add("ada_w", {L, 6 * D, D}, true, true, Z);  // adaLN-Zero: zero at start
  ada_b_ = params_.add("ada_b", {L, 6 * D}, false, true, Z);
  qkv_w_ = params_.add("qkv_w", {L, 3 * D, D}, true, true, Z);
  qkv_b_ = params_.add("qkv_b", {L, 3 * D}, false, true, Z);
  proj_w_ = params_.add("proj_w", {L, D, D}, true, true, Z);
  proj_b_ = params_.add("proj_b", {L, D}, false, true, Z);
  fc1_w_ = params_.add("fc1_w", {L, R, D}, true, true, Z);
  fc1_b_ = params_.add("fc1_b", {L, R}, false, true, Z);
  fc2_w_ = params_.add("fc2_w", {L, D, R}, true, true, Z);
  fc2_b_ = params_.add("fc2_b", {L, D}, false, true, Z);
  layer_entries_ = {ada_w_, ada_b_, qkv_w_, qkv_b_, proj_w_, proj_b_, fc1_w_, fc1_b_, fc2_w_, fc2_b_};
  f_ada_w_ = params_.add("final_ada_w", {2 * D, D}, true, false, Z);  // zero (adaLN-Zero)
  f_ada_b_ = params_.add("final_ada_b", {2 * D}, false, false, Z);
  out_w_ = params_.add("out_w", {cfg_.patch_in(), D}, true, false, Z);  // zero: DiT's final linear
  out_b_ = params_.add("out_b", {cfg_.patch_in()}, false, false, Z);
  final_entries_ = {f_ada_w_, f_ada_b_, out_w_, out_b_};
}

void DiT::init_range(uint64_t seed, int64_t begin, int64_t count, float* out) const {
  params_.init_range(seed, begin, count, out);
  // xavier_uniform_ (DiT's _basic_init): U(-a, a), a = sqrt(6 / (fan_in + fan_out)) per layer's
  // matrix. The patch embedding is one Conv2d over x_t and the condition map: its fan_in counts
  // both channel groups, though its weight is stored as two entries.
  const int64_t D = cfg_.hidden, R = int64_t{cfg_.mlp_ratio} * D;
  const int64_t patch_fan_in = cfg_.patch_in() + cfg_.patch_cond();
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
  xavier(x_w_, D, patch_fan_in);
  xavier(c_w_, D, patch_fan_in);
  xavier(y_w1_, D, cfg_.cond_dim);
  xavier(y_w2_, D, D);
  // stacked per layer: each layer's matrix has the same fans, one stream for the stack
  xavier(qkv_w_, 3 * D, D);
  xavier(proj_w_, D, D);
  xavier(fc1_w_, R, D);
  xavier(fc2_w_, D, R);
}

std::vector<float> DiT::position_table(int64_t D, int64_t grid) {
  // DiT's get_2d_sincos_pos_embed: token t = row i * grid + column j; the first D/2 features
  // encode the column j, the last D/2 the row i, each as [sin(pos w_k), cos(pos w_k)] with
  // w_k = 10000^(-k / (D/4)), k < D/4, computed in double (numpy's float64) and rounded once.
  const int64_t q = D / 4;
  std::vector<float> pe(static_cast<size_t>(grid * grid * D));
  for (int64_t i = 0; i < grid; ++i)
    for (int64_t j = 0; j < grid; ++j) {
      float* row = pe.data() + (i * grid + j) * D;
      for (int half = 0; half < 2; ++half) {
        const double pos = static_cast<double>(half == 0 ? j : i);
        for (int64_t k = 0; k < q; ++k) {
          const double w = 1.0 / std::pow(10000.0, static_cast<double>(k) / static_cast<double>(q));
          row[half * 2 * q + k] = static_cast<float>(std::sin(pos * w));
          row[half * 2 * q + q + k] = static_cast<float>(std::cos(pos * w));
        }
      }
    }
  return pe;
}

std::vector<FieldSpec> DiT::input_fields() const {
  std::vector<FieldSpec> f{FieldSpec{"image", DType::f32, cfg_.image_elems()}};
  if (has_cond()) f.push_back(FieldSpec{"cond", DType::f32, cfg_.cond_elems()});
  f.push_back(FieldSpec{"t", DType::i32, 1});
  f.push_back(FieldSpec{"noise_key", DType::i32, 1});
  return f;
}

// ---- plan ----------------------------------------------------------------------------------

std::vector<OpShape> DiT::ops(const PlanShape& s) const {
  const int64_t b = std::max(s.training ? s.micro_batch : 1, s.eval_batch), T = cfg_.tokens(), N = b * T;
  const int64_t D = cfg_.hidden, R = int64_t{cfg_.mlp_ratio} * D;
  std::vector<OpShape> o{OpShape::sum_squares(0), OpShape::layernorm(N, D), OpShape::matmul(b, D, D),
                         OpShape::matmul(b, D, 6 * D), OpShape::matmul(b, D, 2 * D),  // adaLN (models/adaln.h)
                         OpShape::norm_modulate(b, T, D),
                         OpShape::matmul(b, cfg_.freq_dim, D), OpShape::patch_embed(N, cfg_.patch_in() + cfg_.patch_cond(), D),
                         OpShape::matmul(N, D, 3 * D), OpShape::matmul(N, D, D), OpShape::matmul(N, D, R),
                         OpShape::matmul(N, R, D), OpShape::matmul(N, D, cfg_.patch_in()),
                         OpShape::attention(b, T, cfg_.heads, D / cfg_.heads, /*causal=*/false),
                         OpShape::elementwise(N * D)};
  if (cfg_.cond_dim > 0) o.push_back(OpShape::matmul(b, cfg_.cond_dim, D));
  return o;
}

void DiT::check_supported(const Backend& be, Precision p) const {
  check_ops_supported(be, p, "--n-head/--n-embd/--patch-size/--image-size (model " + describe() + "): ");
}

void DiT::declare_embed(BufferTable& t, int64_t b, size_t a, bool training, EmbedIds& e) const {
  const int f = training ? sch_.embed_fwd() : sch_.eval_embed();
  const int keep = training ? sch_.embed_bwd() : f;                         // read by the backward
  const int target = training ? sch_.head() : sch_.eval_head();             // the loss's target
  const int sc_last = training ? sch_.embed_bwd() : sch_.eval_head();       // every block's adaLN
  const std::string pre = training ? "" : "e.";
  const int64_t T = cfg_.tokens(), D = cfg_.hidden, N = b * T;
  const auto img = static_cast<size_t>(b * cfg_.image_elems()) * 4;
  const auto bd = static_cast<size_t>(b * D) * a;
  auto add = [&](const char* name, BufferClass cls, size_t bytes, int first, int last) {
    return t.add(pre + name, cls, bytes, first, last);
  };
  e = EmbedIds{};
  e.image = add("image", BufferClass::inputs, img, f, target);
  if (cfg_.predict == "eps") e.eps = add("eps", BufferClass::activations, img, f, target);
  e.xt = add("x_t", BufferClass::transient, img, f, f);
  e.coef = add("coef", BufferClass::inputs, static_cast<size_t>(b) * 12, f, f);
  e.keys = add("noise_keys", BufferClass::inputs, static_cast<size_t>(b) * 4, f, f);
  e.t = add("t", BufferClass::inputs, static_cast<size_t>(b) * 4, f, f);
  e.xtok = add("x_tokens", BufferClass::activations, static_cast<size_t>(N * cfg_.patch_in()) * a, f, keep);
  if (cfg_.cond_channels > 0) {
    e.cond_map = add("cond_map", BufferClass::inputs, static_cast<size_t>(b * cfg_.cond_elems()) * 4, f, f);
    e.ctok = add("cond_tokens", BufferClass::activations, static_cast<size_t>(N * cfg_.patch_cond()) * a, f, keep);
  }
  e.tfreq = add("t_freq", BufferClass::activations, static_cast<size_t>(b * cfg_.freq_dim) * a, f, keep);
  e.t1 = add("t_h", BufferClass::activations, bd, f, keep);
  e.t1s = add("t_h_silu", BufferClass::activations, bd, f, keep);
  if (cfg_.cond_dim > 0) {
    e.cond_vec = add("cond_vec", BufferClass::inputs, static_cast<size_t>(b * cfg_.cond_dim) * a, f, keep);
    e.ct = add("t_emb", BufferClass::transient, bd, f, f);
    e.y1 = add("y_h", BufferClass::activations, bd, f, keep);
    e.y1s = add("y_h_silu", BufferClass::activations, bd, f, keep);
  }
  e.c = add("c", BufferClass::activations, bd, f, keep);
  e.sc = add("c_silu", BufferClass::activations, bd, f, sc_last);
}

void DiT::declare_head(BufferTable& t, int64_t b, size_t a, bool training, HeadIds& h) const {
  const int p = training ? sch_.head() : sch_.eval_head();
  const std::string pre = training ? "h." : "eh.";
  const int64_t N = b * cfg_.tokens(), D = cfg_.hidden;
  const auto nd = static_cast<size_t>(N * D) * a, n4 = static_cast<size_t>(N) * 4;
  const auto img = static_cast<size_t>(b * cfg_.image_elems()) * a;
  const auto tok = static_cast<size_t>(N * cfg_.patch_in()) * a;
  auto add = [&](const char* name, size_t bytes) { return t.add(pre + name, BufferClass::transient, bytes, p, p); };
  h = HeadIds{};
  h.fmod = add("mod", static_cast<size_t>(2 * b * D) * a);
  h.lnf_mean = add("ln_mean", n4);
  h.lnf_rstd = add("ln_rstd", n4);
  h.mf = add("modulated", nd);
  h.otok = add("out_tokens", tok);
  h.pred = add("pred", img);
  h.losses = add("losses", static_cast<size_t>(b) * 4);
  if (!training) return;
  h.dpred = add("dpred", img);
  h.dotok = add("dout_tokens", tok);
  h.dmf = add("dmodulated", nd);
  h.dfmod = add("dmod", static_cast<size_t>(2 * b * D) * a);
  h.tmp = add("dc_part", static_cast<size_t>(b * D) * a);
}

void DiT::declare(BufferTable& t, const PlanShape& s, const Backend& be, Ids& ids) const {
  FT_CHECK(s.micro_batch >= 1 && s.eval_batch >= 1, "batch sizes must be >= 1");
  const int L = cfg_.depth;
  const int64_t T = cfg_.tokens(), D = cfg_.hidden, R = int64_t{cfg_.mlp_ratio} * D;
  const size_t a = dtype_size(activation_dtype(s.precision));
  ids = Ids{};
  // The fixed position table (and a row of zeros: see embed_forward), filled at bind and read
  // by every embedding pass: alive in every phase, never shared.
  ids.pos = t.add("pos_embed", BufferClass::inputs, static_cast<size_t>(2 * T * D) * a, 0, t.last_phase());
  if (s.training) {
    const int64_t B = s.micro_batch, N = B * T;
    const auto nd = static_cast<size_t>(N * D) * a, bd = static_cast<size_t>(B * D) * a;
    declare_embed(t, B, a, true, ids.emb);
    ids.res.push_back(t.add("res0", BufferClass::activations, nd, sch_.embed_fwd(), sch_.block_bwd(0)));
    for (int l = 0; l < L; ++l) {
      const std::string n = "l" + std::to_string(l) + ".";
      const int res_last = l == L - 1 ? sch_.head() : sch_.block_bwd(l + 1);
      ids.res.push_back(t.add(n + "out", BufferClass::activations, nd, sch_.block_fwd(l), res_last));
      if (s.recompute == Recompute::none) {
        ids.saved.emplace_back();
        declare_block(t, s, be, Mode::saved, l, B, BufferClass::activations, sch_.block_fwd(l), sch_.block_bwd(l),
                      ids.saved.back());
      }
      // backward scratch of block l; same-sized scratch of other layers shares its bytes
      const std::string g = "g" + std::to_string(l) + ".";
      const int p = sch_.block_bwd(l);
      ids.d_a.push_back(t.add(g + "d_a", BufferClass::transient, nd, p, p));
      ids.d_b.push_back(t.add(g + "d_b", BufferClass::transient, nd, p, p));
      ids.d3.push_back(t.add(g + "d_qkv", BufferClass::transient, 3 * nd, p, p));
      ids.d4.push_back(t.add(g + "d_fc", BufferClass::transient, static_cast<size_t>(N * R) * a, p, p));
      // ended by the next block: that block's backward writes this block's dgate here
      ids.dmod.push_back(t.add(g + "d_mod", BufferClass::transient, 6 * bd,
                               ended_by_next(l, s.recompute) ? sch_.block_bwd(l + 1) : p, p));
      ids.dtmp.push_back(t.add(g + "dc_part", BufferClass::transient, bd, p, p));
    }
    if (s.recompute == Recompute::block) {
      declare_block(t, s, be, Mode::recompute_fwd, 0, B, BufferClass::transient, sch_.block_fwd(0),
                    sch_.block_fwd(L - 1), ids.rf);
      declare_block(t, s, be, Mode::recompute_bwd, 0, B, BufferClass::transient, sch_.block_bwd(L - 1),
                    sch_.block_bwd(0), ids.rb);
    }
    declare_head(t, B, a, true, ids.head);
    ids.dres = t.add("dres", BufferClass::transient, nd, sch_.head(), sch_.embed_bwd());
    ids.dsc = t.add("dc_silu", BufferClass::transient, bd, sch_.head(), sch_.embed_bwd());
    ids.d_t1s = t.add("eb.dt_h", BufferClass::transient, bd, sch_.embed_bwd(), sch_.embed_bwd());
    if (cfg_.cond_dim > 0)
      ids.d_y1s = t.add("eb.dy_h", BufferClass::transient, bd, sch_.embed_bwd(), sch_.embed_bwd());
  }
  {
    const int64_t B = s.eval_batch;
    const auto nd = static_cast<size_t>(B * T * D) * a;
    declare_embed(t, B, a, false, ids.e_emb);
    ids.e_res0 = t.add("e.res0", BufferClass::transient, nd, sch_.eval_embed(), sch_.eval_head());
    ids.e_res1 = t.add("e.res1", BufferClass::transient, nd, sch_.eval_embed(), sch_.eval_head());
    for (int l = 0; l < L; ++l) {
      ids.eval.emplace_back();
      declare_block(t, s, be, Mode::eval, l, B, BufferClass::transient, sch_.eval_block(l), sch_.eval_block(l),
                    ids.eval.back());
    }
    declare_head(t, B, a, false, ids.e_head);
  }
}

void DiT::declare_buffers(BufferTable& t, const PlanShape& s, const Backend& be) const {
  Ids ids;  // dropped: the planner is only trying this shape
  declare(t, s, be, ids);
}

void DiT::keep_buffers(BufferTable& t, const PlanShape& s, const Backend& be) { declare(t, s, be, ids_); }

// ---- binding and parameter views -------------------------------------------------------------

void DiT::bind(const ModelBinding& m) {
  be_ = m.backend;
  arena_ = m.arena;
  shape_ = m.shape;
  act_ = activation_dtype(m.shape.precision);
  FT_CHECK(m.params.numel() >= params_.total(), "params buffer of ", m.params.numel(), " elements");
  param_buf_ = m.params;
  grad_buf_ = m.grads;
  need_ = m.params_needed;
  const int64_t maxb = std::max(shape_.training ? shape_.micro_batch : 1, shape_.eval_batch);
  losses_.bind(*be_, maxb);
  // bf16/f16 staging for the position table (below), a batch's conditions and a chunk of
  // predictions read back: sized here, so no step or evaluation allocates
  const int64_t pos_elems = 2 * cfg_.tokens() * cfg_.hidden;
  host_half_.assign(act_ == DType::f32 ? 0
                                        : static_cast<size_t>(std::max({pos_elems, maxb * cfg_.image_elems(),
                                                                        maxb * cond_elems()})),
                    0);
  // The position table, once: row 0 the table, row 1 zeros (the "scale" of the broadcast add).
  const int64_t T = cfg_.tokens(), D = cfg_.hidden;
  std::vector<float> pos = position_table(D, cfg_.grid());
  pos.resize(static_cast<size_t>(2 * T * D), 0.0f);
  upload(arena_->tensor(ids_.pos, act_, {2, T * D}), pos.data(), 2 * T * D);
}

Tensor DiT::param(int entry, std::initializer_list<int64_t> dims, bool grad) const {
  return params_.view(grad ? grad_buf_ : param_buf_, entry, dims, grad);
}

Tensor DiT::layer_param(int entry, int layer, std::initializer_list<int64_t> dims, bool grad) const {
  return params_.layer_view(grad ? grad_buf_ : param_buf_, entry, layer, dims, grad);
}

void DiT::report(std::initializer_list<int> entries, const GradReadyFn& fn) const {
  if (!fn) return;
  std::vector<ParamRange> r;
  for (int e : entries)
    if (e >= 0) r.push_back({params_.at(e).offset, params_.at(e).count});
  fn(r);
}

void DiT::report_layer(int l, const GradReadyFn& fn) const {
  if (!fn) return;
  std::vector<ParamRange> r;
  for (int e : layer_entries_) r.push_back(params_.layer_range(e, l));
  fn(r);
}

// ---- passes ---------------------------------------------------------------------------------------

double DiT::forward_backward(const Batch& batch, float dloss, GradWrite gw, const GradReadyFn& ready) {
  const int64_t b = batch.size, N = b * cfg_.tokens(), D = cfg_.hidden;
  FT_CHECK(shape_.training && b >= 1 && b <= shape_.micro_batch, "micro-batch ", b);
  const int L = cfg_.depth;
  const bool rc = shape_.recompute == Recompute::block;
  Arena& ar = *arena_;
  auto res = [&](int l) { return ar.tensor(ids_.res[static_cast<size_t>(l)], act_, {N, D}); };
  auto sc = [&] { return ar.tensor(ids_.emb.sc, act_, {b, D}); };

  ar.set_phase(sch_.embed_fwd());
  embed_forward(embed_tensors(ids_.emb, b), res(0), batch.data<float>("image"),
                has_cond() ? batch.data<float>("cond") : nullptr, batch.data<int32_t>("t"),
                batch.data<int32_t>("noise_key"), nullptr, b);
  // A block's closing gated residual runs where ended_by_next says, fused with the next
  // block's first norm (the residual stream is not read back).
  Block prev;
  for (int l = 0; l < L; ++l) {
    ar.set_phase(sch_.block_fwd(l));
    Block a = block_tensors(rc ? ids_.rf : ids_.saved[static_cast<size_t>(l)], b);
    const bool ends_prev = l > 0 && ended_by_next(l - 1, shape_.recompute);
    block_forward(l, a, sc(), res(l), ended_by_next(l, shape_.recompute) ? Tensor() : res(l + 1),
                  ends_prev ? &prev : nullptr);
    prev = a;
  }

  ar.set_phase(sch_.head());
  Tensor pred = head_forward(ids_.head, sc(), res(L), b);
  const BufferId tgt_id = cfg_.predict == "eps" ? ids_.emb.eps : ids_.emb.image;
  Tensor target = ar.tensor(tgt_id, DType::f32, {b, cfg_.image_elems()});
  Tensor losses = ar.tensor(ids_.head.losses, DType::f32, {b});
  Tensor dpred = ar.tensor(ids_.head.dpred, act_, {b, cfg_.image_elems()});
  be_->mse_loss(losses, dpred, pred, target, dloss);
  losses_.start(losses);  // summed after the backward is queued (LossReadback)
  Tensor dres = ar.tensor(ids_.dres, act_, {N, D});
  Tensor dsc = ar.tensor(ids_.dsc, act_, {b, D});
  // dres: the final layer writes it, the blocks' LayerNorm backwards then add to it
  be_->zero(dsc);  // every block's adaLN adds its part of silu(c)'s gradient
  head_backward(ids_.head, sc(), res(L), dpred, dres, dsc, b, gw);
  report({f_ada_w_, f_ada_b_, out_w_, out_b_}, ready);

  for (int l = L - 1; l >= 0; --l) {
    ar.set_phase(sch_.block_bwd(l));
    Tensor x_in = res(l);
    Block a = block_tensors(rc ? ids_.rb : ids_.saved[static_cast<size_t>(l)], b);
    if (rc) block_forward(l, a, sc(), x_in, Tensor());  // the block's internals again
    // as in the forward, a block's end and the next block's first norm in one pass
    const bool ends_prev = l > 0 && ended_by_next(l - 1, shape_.recompute);
    Block prev;
    if (ends_prev) prev = block_tensors(ids_.saved[static_cast<size_t>(l - 1)], b);
    block_backward(l, a, sc(), x_in, ar.tensor(ids_.dres, act_, {N, D}), ar.tensor(ids_.dsc, act_, {b, D}), gw,
                   ends_prev ? &prev : nullptr);
    report_layer(l, ready);
  }

  ar.set_phase(sch_.embed_bwd());
  embed_backward(ids_.emb, b, ar.tensor(ids_.dres, act_, {N, D}), ar.tensor(ids_.dsc, act_, {b, D}), gw);
  if (ready) {
    std::vector<ParamRange> r;
    for (int e : embed_entries_) r.push_back({params_.at(e).offset, params_.at(e).count});
    ready(r);
  }
  return losses_.sum();
}

Tensor DiT::eval_forward(const float* image, const float* cond, const int32_t* t, const int32_t* keys,
                         const float* x_t, int64_t b) {
  FT_CHECK(b >= 1 && b <= shape_.eval_batch, "evaluation batch ", b, " (planned ", shape_.eval_batch, ")");
  const int64_t N = b * cfg_.tokens(), D = cfg_.hidden;
  Arena& ar = *arena_;
  ar.set_phase(sch_.eval_embed());
  Tensor res[2] = {ar.tensor(ids_.e_res0, act_, {N, D}), ar.tensor(ids_.e_res1, act_, {N, D})};
  embed_forward(embed_tensors(ids_.e_emb, b), res[0], image, cond, t, keys, x_t, b);
  for (int l = 0; l < cfg_.depth; ++l) {
    ar.set_phase(sch_.eval_block(l));
    block_forward(l, block_tensors(ids_.eval[static_cast<size_t>(l)], b), ar.tensor(ids_.e_emb.sc, act_, {b, D}),
                  res[l % 2], res[(l + 1) % 2]);
  }
  ar.set_phase(sch_.eval_head());
  return head_forward(ids_.e_head, ar.tensor(ids_.e_emb.sc, act_, {b, D}), res[cfg_.depth % 2], b);
}

double DiT::eval_loss(const Batch& batch) {
  const int64_t b = batch.size;
  Tensor pred = eval_forward(batch.data<float>("image"), has_cond() ? batch.data<float>("cond") : nullptr,
                             batch.data<int32_t>("t"), batch.data<int32_t>("noise_key"), nullptr, b);
  const BufferId tgt_id = cfg_.predict == "eps" ? ids_.e_emb.eps : ids_.e_emb.image;
  Tensor target = arena_->tensor(tgt_id, DType::f32, {b, cfg_.image_elems()});
  Tensor losses = arena_->tensor(ids_.e_head.losses, DType::f32, {b});
  be_->mse_loss(losses, Tensor(), pred, target, 0.0f);
  return losses_.read(losses);
}

void DiT::predict(const float* x_t, const float* cond, const int32_t* t, int64_t n, float* out) {
  FT_CHECK(x_t && t && out && (cond || !has_cond()), "DiT::predict: missing input");
  const int64_t G = std::max<int64_t>(1, shape_.eval_batch), E = cfg_.image_elems(), CE = cond_elems();
  for (int64_t first = 0; first < n; first += G) {
    const int64_t b = std::min(G, n - first);
    Tensor pred = eval_forward(nullptr, cond ? cond + first * CE : nullptr, t + first, nullptr, x_t + first * E, b);
    download_floats(*be_, out + first * E, pred, host_half_);
  }
}

}  // namespace ft
