// GPT-2 sequential recommender (family "gpt2rec"): the GPT-2 backbone over a user's item
// history (item + position embeddings, causal blocks, final layernorm) and an item head that
// scores the next item by a dot product with the item's representation
//   r_i = W_item e_i + b_item     (e_i: row i of the input embedding wte, tied; W_item starts
//                                 as the identity, so the untrained head is SASRec's)
// Items are 1..N, 0 is padding (its wte row is never a target). A sample is one history of up
// to T items, right-padded: causal attention never lets a real position see the padding.
//
// Inputs per sample: "tokens" (i32 x T: the items), "targets" (i32 x T: the next item of each
// position, < 0 where nothing is predicted) and, with the BPR loss, "negatives" (i32 x T*K: K
// sampled negatives per position, drawn by the task: train/rec_task.h).
// Losses, one per position:
//   bpr: sum_k -log sigmoid(s(h, r_pos) - s(h, r_neg_k))  (Rendle et al. 2009; K = 1 is BPR)
//   ce:  -log softmax over every item (full cross-entropy, as SASRec-style models are compared)
//
// The item table (PlanShape::item_cache, --item-cache): with it, every item's r_i is computed
// once per micro-batch into an [Np, C] table (and its gradient table), and the head gathers
// from it: memory grows with the catalogue. Without it, only the batch's items are gathered
// and projected ([b*T*(1+K), C] rows): memory grows with the batch. The planner counts both;
// the fitter picks (plan/fit.h). The full cross-entropy head needs the table.
//
// Evaluation: eval_loss scores, for each sample, its LAST position with a target >= 0 (the
// held-out item of leave-one-out evaluation); the Ranker scores every item as the next one.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "models/gpt2_backbone.h"
#include "models/host_transfer.h"
#include "models/model.h"

namespace ft {

struct GPT2RecConfig {
  int n_layer = 2;
  int n_head = 2;
  int n_embd = 64;
  int seq_len = 200;   // T: the longest history read (older items are dropped by the task)
  int items = 3706;    // N: items 1..N (the data's count replaces it: train/session.cpp)
  int negatives = 1;   // K sampled negatives per position (bpr)
  std::string loss = "bpr";  // bpr | ce
  GPT2Config backbone() const { return GPT2Config{n_layer, n_head, n_embd, seq_len, items + 1}; }
  int64_t table_rows() const { return backbone().padded_vocab_size(); }  // Np
  void validate() const;
  std::string describe() const;
  nlohmann::json to_json() const;  // {"arch": "gpt2rec", ...}
  static GPT2RecConfig from_json(const nlohmann::json& j, const std::string& source);
};

class GPT2Rec final : public Model, public Ranker {
 public:
  explicit GPT2Rec(const GPT2RecConfig& c);
  const GPT2RecConfig& rec_config() const { return cfg_; }

  std::string family() const override { return "gpt2rec"; }
  nlohmann::json config() const override { return cfg_.to_json(); }
  std::string describe() const override { return cfg_.describe(); }
  const ParamTable& param_table() const override { return params_; }
  // GPT-2's initialisation for the backbone (padded item rows zero), the item head the identity.
  void init_range(uint64_t seed, int64_t begin, int64_t count, float* out) const override;

  std::vector<FieldSpec> input_fields() const override;
  // Only BPR can score without the table (the full cross-entropy needs every item).
  bool has_item_cache() const override { return cfg_.loss == "bpr"; }
  int64_t loss_values_per_sample() const override { return cfg_.seq_len; }
  int num_phases() const override { return GPT2Schedule{cfg_.n_layer}.num_phases(); }
  int optimizer_phase() const override { return GPT2Schedule{cfg_.n_layer}.optimizer(); }
  void declare_buffers(BufferTable& t, const PlanShape& s, const Backend& be) const override;
  std::vector<OpShape> ops(const PlanShape& s) const override;
  void check_supported(const Backend& be, Precision p) const override;

  void keep_buffers(BufferTable& t, const PlanShape& s, const Backend& be) override;
  void bind(const ModelBinding& m) override;
  double forward_backward(const Batch& batch, float dloss, GradWrite gw, const GradReadyFn& ready) override;
  double eval_loss(const Batch& batch) override;
  Ranker* ranker() override { return this; }

  // Ranker
  int64_t num_items() const override { return cfg_.items; }
  int64_t max_history() const override { return cfg_.seq_len; }
  int64_t max_rank_batch() const override { return shape_.eval_batch; }
  void score_next(std::span<const std::span<const uint32_t>> histories, float* out) override;

 private:
  struct HeadIds {
    // training (head phase)
    BufferId targets = kNoBuffer, negs = kNoBuffer, losses = kNoBuffer;
    BufferId table = kNoBuffer, dtable = kNoBuffer, logits = kNoBuffer;   // item table (+ ce)
    BufferId ids = kNoBuffer, gpos = kNoBuffer, gneg = kNoBuffer, rows = kNoBuffer, prow = kNoBuffer,
             drow = kNoBuffer;  // no table: the batch's gathered items and their projections
    // evaluation (eval head phase)
    BufferId e_table = kNoBuffer, e_rows = kNoBuffer, e_last = kNoBuffer, e_pos = kNoBuffer, e_negs = kNoBuffer,
             e_losses = kNoBuffer, e_logits = kNoBuffer, e_items = kNoBuffer, e_scores = kNoBuffer;
  };
  void declare(BufferTable& t, const PlanShape& s, const Backend& be, GPT2BackboneIds& bb, HeadIds& h) const;
  Tensor item_w(bool grad) const;
  Tensor item_b(bool grad) const;
  void need_item_head() const;
  // r = W e + b for the given rows of embeddings [n, C] into out [n, C].
  void project_items(Tensor out, Tensor emb);
  // The eval head: rows (host, indices into hidden [b*T, C]) gathered into e_last [n, C].
  Tensor gather_last(Tensor hidden, const std::vector<int32_t>& rows);
  void head_train_table(int64_t b, Tensor h, Tensor tgt, Tensor negs, Tensor losses, float dloss, GradWrite gw);
  void head_train_rows(const Batch& batch, Tensor h, Tensor losses, float dloss, GradWrite gw);

  GPT2RecConfig cfg_;
  GPT2Backbone backbone_;
  ParamTable params_;
  int item_w_ = -1, item_b_ = -1;
  GPT2BackboneIds bb_ids_;
  HeadIds head_ids_;
  Backend* be_ = nullptr;
  Arena* arena_ = nullptr;
  PlanShape shape_;
  DType act_ = DType::f32;
  Tensor param_buf_, grad_buf_;
  ParamNeededFn need_;
  LossReadback losses_;  // the per-position losses, read back (models/host_transfer.h)
  // Host staging of the head's index and score uploads, sized at bind for the largest batch
  // of each pass (training rows, evaluation rows, score_next's chunks): no allocation per step.
  struct HostStaging {
    std::vector<int32_t> ids, gpos, gneg;        // head_train_rows: [N(1+K)], [N], [N*K]
    std::vector<int32_t> rows, pos, negs;        // eval_loss: [b], [b], [b*K]; rows also gather_last's
    std::vector<int32_t> tokens, items;          // score_next: [G*T], [G*V]
    std::vector<float> scores;                   // score_next: [G*V]
  } host_;
};

}  // namespace ft
