#include "models/gpt2_rec.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "core/error.h"
#include "models/host_transfer.h"

namespace ft {

// ---- configuration ----------------------------------------------------------------------------

void GPT2RecConfig::validate() const {
  FT_USER_CHECK(items >= 1 && items < (1 << 30) - 1, "the recommender's item count must be in [1, 2^30-1], got ",
                items);
  FT_USER_CHECK(negatives >= 1 && negatives <= 1024, "--negatives must be in [1, 1024], got ", negatives);
  FT_USER_CHECK(loss == "bpr" || loss == "ce", "--rec-loss must be bpr or ce, got '", loss, "'");
  backbone().validate();
}

std::string GPT2RecConfig::describe() const {
  std::ostringstream os;
  os << "GPT-2 recommender L=" << n_layer << " H=" << n_head << " C=" << n_embd << " T=" << seq_len
     << " items=" << items << " loss=" << loss;
  if (loss == "bpr") os << " K=" << negatives;
  return os.str();
}

nlohmann::json GPT2RecConfig::to_json() const {
  return {{"arch", "gpt2rec"}, {"n_layer", n_layer}, {"n_head", n_head}, {"n_embd", n_embd}, {"seq_len", seq_len},
          {"items", items}, {"negatives", negatives}, {"loss", loss}};
}

GPT2RecConfig GPT2RecConfig::from_json(const nlohmann::json& j, const std::string& source) {
  FT_USER_CHECK(j.is_object(), source, ": model configuration is not an object");
  GPT2RecConfig c;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    if (k == "arch") continue;
    if (k == "loss") {
      FT_USER_CHECK(it.value().is_string(), source, ": recommender setting 'loss' must be a string");
      c.loss = it.value().get<std::string>();
      continue;
    }
    int* field = k == "n_layer" ? &c.n_layer : k == "n_head" ? &c.n_head : k == "n_embd" ? &c.n_embd
               : k == "seq_len" ? &c.seq_len : k == "items" ? &c.items : k == "negatives" ? &c.negatives : nullptr;
    FT_USER_CHECK(field, source, ": unknown recommender setting '", k,
                  "' (known: n_layer, n_head, n_embd, seq_len, items, negatives, loss)");
    FT_USER_CHECK(it.value().is_number_integer(), source, ": recommender setting '", k, "' must be an integer, got ",
                  it.value().dump());
    *field = it.value().get<int>();
  }
  for (const char* k : {"n_layer", "n_head", "n_embd", "seq_len", "items", "negatives", "loss"})
    FT_USER_CHECK(j.contains(k), source, ": recommender configuration lacks '", k, "'");
  try {
    c.validate();
  } catch (const UserError& e) {
    throw UserError(source + ": " + e.what());
  }
  return c;
}

// ---- model ------------------------------------------------------------------------------------

GPT2Rec::GPT2Rec(const GPT2RecConfig& c) : cfg_(c), backbone_(c.backbone()) {
  cfg_.validate();
  backbone_.set_generation(false);  // a recommender ranks items, it never decodes tokens
  backbone_.add_params(params_);
  const int64_t C = cfg_.n_embd;
  item_w_ = params_.add("item_w", {C, C}, true, false, ParamInit::zeros);  // the identity: init_params
  item_b_ = params_.add("item_b", {C}, false, false, ParamInit::zeros);
}

void GPT2Rec::init_range(uint64_t seed, int64_t begin, int64_t count, float* out) const {
  params_.init_range(seed, begin, count, out);
  const int64_t C = cfg_.n_embd;
  // the padded table rows are zero; the item projection starts as the identity
  ParamTable::for_overlap(params_.at("wte"), (cfg_.items + 1) * C, cfg_.table_rows() * C, begin, count,
                          [&](int64_t a, int64_t b) { std::fill(out + a, out + b, 0.0f); });
  const ParamEntry& w = params_.at(item_w_);
  for (int64_t i = 0; i < C; ++i)
    ParamTable::for_overlap(w, i * C + i, i * C + i + 1, begin, count, [&](int64_t a, int64_t) { out[a] = 1.0f; });
}

std::vector<FieldSpec> GPT2Rec::input_fields() const {
  const int64_t T = cfg_.seq_len;
  std::vector<FieldSpec> f{FieldSpec{"tokens", DType::i32, T}, FieldSpec{"targets", DType::i32, T}};
  if (cfg_.loss == "bpr") f.push_back(FieldSpec{"negatives", DType::i32, T * cfg_.negatives});
  return f;
}

void GPT2Rec::declare(BufferTable& t, const PlanShape& s, const Backend& be, GPT2BackboneIds& bb, HeadIds& h) const {
  const GPT2Schedule sch{cfg_.n_layer};
  const int64_t T = cfg_.seq_len, C = cfg_.n_embd, Np = cfg_.table_rows(), K = cfg_.negatives, V = cfg_.items;
  const bool bpr = cfg_.loss == "bpr";
  const size_t a = dtype_size(activation_dtype(s.precision));
  const size_t table = static_cast<size_t>(Np * C) * a;
  h = HeadIds{};
  if (s.training) {
    const int64_t N = s.micro_batch * T, M = N * (1 + K);
    const int p = sch.head();
    h.targets = t.add("r.targets", BufferClass::inputs, static_cast<size_t>(N) * 4, p, p);
    if (bpr) h.negs = t.add("r.negatives", BufferClass::inputs, static_cast<size_t>(N * K) * 4, p, p);
    h.losses = t.add("r.losses", BufferClass::transient, static_cast<size_t>(N) * 4, p, p);
    if (s.item_cache || !bpr) {
      h.table = t.add("r.item_table", BufferClass::transient, table, p, p);
      h.dtable = t.add("r.item_table_grad", BufferClass::transient, table, p, p);
      if (!bpr) h.logits = t.add("r.logits", BufferClass::transient, static_cast<size_t>(N * Np) * a, p, p);
    } else {
      const size_t rows = static_cast<size_t>(M * C) * a;
      h.ids = t.add("r.item_ids", BufferClass::inputs, static_cast<size_t>(M) * 4, p, p);
      h.gpos = t.add("r.row_pos", BufferClass::inputs, static_cast<size_t>(N) * 4, p, p);
      h.gneg = t.add("r.row_neg", BufferClass::inputs, static_cast<size_t>(N * K) * 4, p, p);
      h.rows = t.add("r.item_rows", BufferClass::transient, rows, p, p);
      h.prow = t.add("r.item_reprs", BufferClass::transient, rows, p, p);
      h.drow = t.add("r.item_reprs_grad", BufferClass::transient, rows, p, p);
    }
  }
  {
    const int64_t eb = s.eval_batch;
    const int e = sch.eval_head();
    h.e_table = t.add("eh.item_table", BufferClass::transient, table, e, e);
    h.e_rows = t.add("eh.rows", BufferClass::inputs, static_cast<size_t>(eb) * 4, e, e);
    h.e_last = t.add("eh.last", BufferClass::transient, static_cast<size_t>(eb * C) * a, e, e);
    h.e_pos = t.add("eh.targets", BufferClass::inputs, static_cast<size_t>(eb) * 4, e, e);
    if (bpr) h.e_negs = t.add("eh.negatives", BufferClass::inputs, static_cast<size_t>(eb * K) * 4, e, e);
    else h.e_logits = t.add("eh.logits", BufferClass::transient, static_cast<size_t>(eb * Np) * a, e, e);
    h.e_losses = t.add("eh.losses", BufferClass::transient, static_cast<size_t>(eb) * 4, e, e);
    h.e_items = t.add("eh.items", BufferClass::inputs, static_cast<size_t>(eb * V) * 4, e, e);
    h.e_scores = t.add("eh.scores", BufferClass::transient, static_cast<size_t>(eb * V) * 4, e, e);
  }
  backbone_.declare(t, s, be, bb);
}

void GPT2Rec::declare_buffers(BufferTable& t, const PlanShape& s, const Backend& be) const {
  GPT2BackboneIds bb;
  HeadIds h;
  declare(t, s, be, bb, h);
}

void GPT2Rec::keep_buffers(BufferTable& t, const PlanShape& s, const Backend& be) {
  declare(t, s, be, bb_ids_, head_ids_);
}

std::vector<OpShape> GPT2Rec::ops(const PlanShape& s) const {
  const int64_t b = std::max(s.training ? s.micro_batch : 1, s.eval_batch), T = cfg_.seq_len, N = b * T;
  const int64_t C = cfg_.n_embd, Np = cfg_.table_rows(), K = cfg_.negatives;
  std::vector<OpShape> o = backbone_.ops(b);
  o.push_back(OpShape::matmul(Np, C, C));     // the item table
  o.push_back(OpShape::embedding(s.eval_batch, C));  // evaluation: each sample's last row
  if (cfg_.loss == "bpr") {
    o.push_back(OpShape::bpr(N, C, K));
    if (s.training && !s.item_cache) {
      o.push_back(OpShape::matmul(N * (1 + K), C, C));
      o.push_back(OpShape::embedding(N * (1 + K), C));
    }
  } else {
    o.push_back(OpShape::matmul(N, C, Np));
    o.push_back(OpShape::classifier(N, cfg_.items + 1, Np));
  }
  return o;
}

void GPT2Rec::check_supported(const Backend& be, Precision p) const {
  check_ops_supported(be, p, "--n-head/--n-embd: ");
}

void GPT2Rec::bind(const ModelBinding& m) {
  be_ = m.backend;
  arena_ = m.arena;
  shape_ = m.shape;
  act_ = activation_dtype(m.shape.precision);
  FT_CHECK(m.params.numel() == params_.total(), "params buffer of ", m.params.numel(), " elements");
  param_buf_ = m.params;
  grad_buf_ = m.grads;
  need_ = m.params_needed;
  const int64_t maxb = std::max(shape_.training ? shape_.micro_batch : 1, shape_.eval_batch);
  losses_.bind(*be_, maxb * cfg_.seq_len);
  const auto T = static_cast<size_t>(cfg_.seq_len), K = static_cast<size_t>(std::max(0, cfg_.negatives));
  const auto V = static_cast<size_t>(cfg_.items), mb = static_cast<size_t>(shape_.training ? shape_.micro_batch : 0);
  const auto eb = static_cast<size_t>(std::max<int64_t>(1, shape_.eval_batch));
  host_ = HostStaging{};
  host_.ids.reserve(mb * T * (1 + K));
  host_.gpos.reserve(mb * T);
  host_.gneg.reserve(mb * T * K);
  host_.rows.reserve(eb);
  host_.pos.reserve(eb);
  host_.negs.reserve(eb * K);
  host_.tokens.reserve(eb * T);
  host_.items.reserve(eb * V);
  host_.scores.reserve(eb * V);
  backbone_.bind(m, &params_, &bb_ids_);
}

Tensor GPT2Rec::item_w(bool grad) const {
  return params_.view(grad ? grad_buf_ : param_buf_, item_w_, {cfg_.n_embd, cfg_.n_embd}, grad);
}

Tensor GPT2Rec::item_b(bool grad) const {
  return params_.view(grad ? grad_buf_ : param_buf_, item_b_, {cfg_.n_embd}, grad);
}

void GPT2Rec::need_item_head() const {
  if (!need_) return;
  const ParamRange r[2] = {{params_.at(item_w_).offset, params_.at(item_w_).count},
                           {params_.at(item_b_).offset, params_.at(item_b_).count}};
  need_(r);
}

void GPT2Rec::project_items(Tensor out, Tensor emb) { be_->matmul_forward(out, emb, item_w(false), item_b(false)); }

double GPT2Rec::forward_backward(const Batch& batch, float dloss, GradWrite gw, const GradReadyFn& ready) {
  const int64_t b = batch.size, T = cfg_.seq_len, N = b * T, K = cfg_.negatives;
  const bool bpr = cfg_.loss == "bpr";
  Arena& ar = *arena_;
  Tensor h = backbone_.forward_train(batch.data<int32_t>("tokens"), b);  // now in the head phase
  need_item_head();
  Tensor losses = ar.tensor(head_ids_.losses, DType::f32, {N});
  if (bpr && !shape_.item_cache) {
    head_train_rows(batch, h, losses, dloss, gw);
  } else {
    Tensor tgt = ar.tensor(head_ids_.targets, DType::i32, {N});
    be_->copy_to_device(tgt.data, batch.data<int32_t>("targets"), tgt.bytes());
    Tensor negs;
    if (bpr) {
      negs = ar.tensor(head_ids_.negs, DType::i32, {N, K});
      be_->copy_to_device(negs.data, batch.data<int32_t>("negatives"), negs.bytes());
    }
    head_train_table(b, h, tgt, negs, losses, dloss, gw);
  }
  if (ready) {
    const ParamRange r[2] = {{params_.at(item_w_).offset, params_.at(item_w_).count},
                             {params_.at(item_b_).offset, params_.at(item_b_).count}};
    ready(r);
  }
  backbone_.backward_train(b, gw, ready);
  return losses_.sum();
}

// Every item's representation once, the loss against it, then the table's gradient back
// through the item head into wte (before the embedding's own gradient is added to it).
void GPT2Rec::head_train_table(int64_t b, Tensor h, Tensor tgt, Tensor negs, Tensor losses, float dloss,
                                 GradWrite gw) {
  const int64_t T = cfg_.seq_len, N = b * T, C = cfg_.n_embd, Np = cfg_.table_rows();
  Arena& ar = *arena_;
  Tensor E = backbone_.wte(false);
  Tensor R = ar.tensor(head_ids_.table, act_, {Np, C});
  Tensor dR = ar.tensor(head_ids_.dtable, act_, {Np, C});
  project_items(R, E);
  Tensor dh = backbone_.hidden_grad(b);
  if (cfg_.loss == "bpr") {
    be_->zero(dR);  // the BPR op adds into the table's rows
    be_->bpr_forward_backward(losses, dh, dR, h, R, tgt, negs, dloss);
  } else {
    Tensor logits = ar.tensor(head_ids_.logits, act_, {b, T, Np});
    be_->matmul_forward(logits.view({N, Np}), h, R, Tensor());
    be_->classifier_forward_backward(losses.view({b, T}), logits, tgt.view({b, T}), cfg_.items + 1, dloss);
    be_->matmul_backward(dh, dR, Tensor(), logits.view({N, Np}), h, R, GradWrite::overwrite);
  }
  losses_.start(losses);  // summed after the backward is queued (LossReadback)
  // dE = dR W goes to a scratch (R's bytes: R is no longer read), then into wte's gradient.
  Tensor dE = R;
  be_->matmul_backward(dE, item_w(true), item_b(true), dR, E, item_w(false), gw);
  Tensor dwte = backbone_.wte(true);
  if (gw == GradWrite::overwrite) be_->zero(dwte);
  be_->residual_forward(dwte, dwte, dE);
}

// Only the batch's items: gathered (positive, then the K negatives, of every position),
// projected, scored; the gradient goes back through the projection and is scattered into wte.
void GPT2Rec::head_train_rows(const Batch& batch, Tensor h, Tensor losses, float dloss, GradWrite gw) {
  const int64_t b = batch.size, T = cfg_.seq_len, N = b * T, C = cfg_.n_embd, K = cfg_.negatives, M = N * (1 + K);
  Arena& ar = *arena_;
  const int32_t* tg = batch.data<int32_t>("targets");
  const int32_t* ng = batch.data<int32_t>("negatives");
  std::vector<int32_t>& ids = host_.ids;
  std::vector<int32_t>& gpos = host_.gpos;
  std::vector<int32_t>& gneg = host_.gneg;
  ids.resize(static_cast<size_t>(M));
  gpos.resize(static_cast<size_t>(N));
  gneg.resize(static_cast<size_t>(N * K));
  for (int64_t n = 0; n < N; ++n) {
    const int64_t base = n * (1 + K);
    const bool real = tg[n] >= 0;
    ids[static_cast<size_t>(base)] = real ? tg[n] : 0;  // a padding row gathers the padding item
    gpos[static_cast<size_t>(n)] = real ? static_cast<int32_t>(base) : -1;
    for (int64_t k = 0; k < K; ++k) {
      ids[static_cast<size_t>(base + 1 + k)] = real ? ng[n * K + k] : 0;
      gneg[static_cast<size_t>(n * K + k)] = static_cast<int32_t>(base + 1 + k);
    }
  }
  Tensor tid = ar.tensor(head_ids_.ids, DType::i32, {1, M});
  Tensor tpos = ar.tensor(head_ids_.gpos, DType::i32, {N});
  Tensor tneg = ar.tensor(head_ids_.gneg, DType::i32, {N, K});
  be_->copy_to_device(tid.data, ids.data(), tid.bytes());
  be_->copy_to_device(tpos.data, gpos.data(), tpos.bytes());
  be_->copy_to_device(tneg.data, gneg.data(), tneg.bytes());
  Tensor G = ar.tensor(head_ids_.rows, act_, {M, C});
  Tensor P = ar.tensor(head_ids_.prow, act_, {M, C});
  Tensor dP = ar.tensor(head_ids_.drow, act_, {M, C});
  be_->embedding_forward(G.view({1, M, C}), tid, backbone_.wte(false), Tensor());
  project_items(P, G);
  be_->zero(dP);
  be_->bpr_forward_backward(losses, backbone_.hidden_grad(b), dP, h, P, tpos, tneg, dloss);
  losses_.start(losses);  // summed after the backward is queued (LossReadback)
  Tensor dG = P;  // P is no longer read
  be_->matmul_backward(dG, item_w(true), item_b(true), dP, G, item_w(false), gw);
  Tensor dwte = backbone_.wte(true);
  if (gw == GradWrite::overwrite) be_->zero(dwte);
  be_->embedding_backward(dwte, Tensor(), dG.view({1, M, C}), tid);
}

Tensor GPT2Rec::gather_last(Tensor hidden, const std::vector<int32_t>& rows) {
  const int64_t n = static_cast<int64_t>(rows.size()), C = cfg_.n_embd;
  Tensor r = arena_->tensor(head_ids_.e_rows, DType::i32, {1, n});
  be_->copy_to_device(r.data, rows.data(), r.bytes());
  Tensor last = arena_->tensor(head_ids_.e_last, act_, {n, C});
  be_->embedding_forward(last.view({1, n, C}), r, hidden, Tensor());
  return last;
}

double GPT2Rec::eval_loss(const Batch& batch) {
  const int64_t b = batch.size, T = cfg_.seq_len, C = cfg_.n_embd, Np = cfg_.table_rows(), K = cfg_.negatives;
  const bool bpr = cfg_.loss == "bpr";
  const int32_t* tg = batch.data<int32_t>("targets");
  const int32_t* ng = bpr ? batch.data<int32_t>("negatives") : nullptr;
  // Each sample's last position with a target (samples without one add nothing).
  std::vector<int32_t>& rows = host_.rows;
  std::vector<int32_t>& pos = host_.pos;
  std::vector<int32_t>& negs = host_.negs;
  rows.clear(), pos.clear(), negs.clear();
  for (int64_t i = 0; i < b; ++i) {
    for (int64_t t = T - 1; t >= 0; --t) {
      const int64_t r = i * T + t;
      if (tg[r] < 0) continue;
      rows.push_back(static_cast<int32_t>(r));
      pos.push_back(tg[r]);
      if (bpr) negs.insert(negs.end(), ng + r * K, ng + (r + 1) * K);
      break;
    }
  }
  Tensor h = backbone_.forward_eval(batch.data<int32_t>("tokens"), b, T);  // eval head phase
  if (rows.empty()) return 0.0;
  need_item_head();
  Arena& ar = *arena_;
  const int64_t n = static_cast<int64_t>(rows.size());
  Tensor R = ar.tensor(head_ids_.e_table, act_, {Np, C});
  project_items(R, backbone_.wte(false));
  Tensor last = gather_last(h, rows);
  Tensor tp = ar.tensor(head_ids_.e_pos, DType::i32, {n});
  be_->copy_to_device(tp.data, pos.data(), tp.bytes());
  Tensor losses = ar.tensor(head_ids_.e_losses, DType::f32, {n});
  if (bpr) {
    Tensor tn = ar.tensor(head_ids_.e_negs, DType::i32, {n, K});
    be_->copy_to_device(tn.data, negs.data(), tn.bytes());
    be_->bpr_forward_backward(losses, Tensor(), Tensor(), last, R, tp, tn, 0.0f);
  } else {
    Tensor logits = ar.tensor(head_ids_.e_logits, act_, {n, 1, Np});
    be_->matmul_forward(logits.view({n, Np}), last, R, Tensor());
    be_->classifier_forward_backward(losses.view({n, 1}), logits, tp.view({n, 1}), cfg_.items + 1, 0.0f);
  }
  return losses_.read(losses);
}

void GPT2Rec::score_next(std::span<const std::span<const uint32_t>> histories, float* out) {
  const int64_t T = cfg_.seq_len, C = cfg_.n_embd, Np = cfg_.table_rows(), V = cfg_.items;
  const int64_t G = std::max<int64_t>(1, shape_.eval_batch);
  Arena& ar = *arena_;
  std::vector<int32_t>& tokens = host_.tokens;
  std::vector<int32_t>& rows = host_.rows;
  std::vector<int32_t>& items = host_.items;
  std::vector<float>& scores = host_.scores;
  for (size_t first = 0; first < histories.size(); first += static_cast<size_t>(G)) {
    const int64_t n = std::min<int64_t>(G, static_cast<int64_t>(histories.size() - first));
    tokens.assign(static_cast<size_t>(n * T), 0);
    rows.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      std::span<const uint32_t> hist = histories[first + static_cast<size_t>(i)];
      FT_CHECK(!hist.empty(), "score_next: an empty history");
      if (static_cast<int64_t>(hist.size()) > T) hist = hist.last(static_cast<size_t>(T));  // the most recent
      for (size_t t = 0; t < hist.size(); ++t) {
        FT_CHECK(hist[t] >= 1 && hist[t] <= static_cast<uint32_t>(V), "score_next: item ", hist[t], " outside 1..", V);
        tokens[static_cast<size_t>(i * T) + t] = static_cast<int32_t>(hist[t]);
      }
      rows[static_cast<size_t>(i)] = static_cast<int32_t>(i * T + static_cast<int64_t>(hist.size()) - 1);
    }
    Tensor h = backbone_.forward_eval(tokens.data(), n, T);
    need_item_head();
    Tensor R = ar.tensor(head_ids_.e_table, act_, {Np, C});
    project_items(R, backbone_.wte(false));
    Tensor last = gather_last(h, rows);
    // Candidates 1..N for every row: fp32 dot products (item_scores), not a bf16 product.
    items.resize(static_cast<size_t>(n * V));
    for (int64_t i = 0; i < n; ++i)
      for (int64_t v = 0; v < V; ++v) items[static_cast<size_t>(i * V + v)] = static_cast<int32_t>(v + 1);
    Tensor ti = ar.tensor(head_ids_.e_items, DType::i32, {n, V});
    be_->copy_to_device(ti.data, items.data(), ti.bytes());
    Tensor ts = ar.tensor(head_ids_.e_scores, DType::f32, {n, V});
    be_->item_scores(ts, last, R, ti);
    scores.resize(static_cast<size_t>(n * V));
    be_->copy_to_host(scores.data(), ts.data, ts.bytes());
    for (int64_t i = 0; i < n; ++i) {
      float* o = out + (static_cast<int64_t>(first) + i) * (V + 1);
      o[0] = -std::numeric_limits<float>::infinity();
      std::copy(scores.begin() + i * V, scores.begin() + (i + 1) * V, o + 1);
    }
  }
}

}  // namespace ft
