// Sequential recommendation ("rec"): next-item prediction over each user's time-ordered
// history, with SASRec's leave-one-out protocol (data/interactions.h: the last item is the
// test item, the second-to-last the validation item, the rest is train).
//
// Data: --data-path names a prepared `interactions.rec` (or a folder holding one), made by
// `fittrain prepare --ratings ratings.dat --out DIR` or `--synthetic movielens`.
// Training sample = one user (with at least two train items): the most recent T+1 train items
// give T (input, next item) positions, right-padded; with the BPR loss each position carries
// K negatives drawn on the fly by data/negative_sampler.h from (seed, user, epoch), so every
// epoch sees fresh negatives, reproducibly, never a positive of the user. Loss unit: a
// position with a target.
// Evaluation sample = one user: the history before the held-out item (validation: the train
// part; `fittrain test`: the train part and the validation item) with the held-out item as
// the only target. Its loss is the held-out item's BPR (or cross-entropy) loss; the metrics
// are HR@10 and NDCG@10 of the held-out item among SASRec's 100 sampled negatives and among
// every item (full ranking, the user's other items excluded), beside the same numbers for
// the popularity baseline computed by the same code (train/rec_metrics.h).
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "data/interactions.h"
#include "data/negative_sampler.h"
#include "train/rec_metrics.h"
#include "train/task.h"

namespace ft {

// The prepared interactions file of `data_path` (a `*.rec` file, or a folder holding
// interactions.rec). UserError naming `flag` when there is none.
std::string rec_data_file(const std::string& data_path, const std::string& flag);
// The item count N of that file (the recommender's table is sized from it).
int rec_data_items(const std::string& data_path, const std::string& flag);

// Training samples: users with >= 2 train items, in user order.
class RecTrainSource final : public SampleSource {
 public:
  // negatives 0: no negatives field (the cross-entropy head).
  RecTrainSource(const InteractionsView& v, const PositiveSets& pos, const NegativeSampler& sampler, int seq_len,
                 int negatives);
  uint64_t num_samples() const override { return users_.size(); }
  std::vector<FieldSpec> fields() const override;
  void read(uint64_t idx, std::span<void* const> dst) const override { read_visit(idx, 0, dst); }
  void read_visit(uint64_t idx, uint64_t epoch, std::span<void* const> dst) const override;
  // Positions with a target in these samples.
  uint64_t positions(std::span<const uint64_t> samples) const;

 private:
  const InteractionsView& v_;
  const PositiveSets& pos_;
  const NegativeSampler& sampler_;
  int T_, K_;
  std::vector<uint32_t> users_;
};

// Evaluation samples: every user, the held-out item (validation or test) as the one target.
class RecEvalSource final : public SampleSource {
 public:
  RecEvalSource(const InteractionsView& v, const PositiveSets& pos, const NegativeSampler& sampler, int seq_len,
                int negatives, HeldOut held_out);
  uint64_t num_samples() const override { return v_.num_users(); }
  std::vector<FieldSpec> fields() const override;
  void read(uint64_t idx, std::span<void* const> dst) const override;
  HeldOut held_out() const { return held_out_; }
  // The history before the held-out item of user u (what the model ranks from).
  std::span<const uint32_t> context(uint32_t u) const;
  uint32_t target(uint32_t u) const { return held_out_ == HeldOut::kValid ? v_.valid_item(u) : v_.test_item(u); }

 private:
  const InteractionsView& v_;
  const PositiveSets& pos_;
  const NegativeSampler& sampler_;
  int T_, K_;
  HeldOut held_out_;
};

// Ranks users [0, users) (0 or more than there are: all) of `src` with the ranker: the model's sampled and full
// metrics, each user's history cut to the ranker's max_history(); the users split over the
// ranks of `shard` in chunks, every rank ending with the metrics of all of them.
struct RankingResult {
  RankingMetrics sampled, full;
};
RankingResult rank_users(Ranker& ranker, const RecEvalSource& src, const PositiveSets& pos,
                         const NegativeSampler& sampler, int64_t users, const EvalShard& shard = {});
// The popularity baseline on the same users with the same candidates.
RankingResult rank_by_popularity(const InteractionsView& v, const RecEvalSource& src, const PositiveSets& pos,
                                 const NegativeSampler& sampler, int64_t users);

class RecTask final : public Task {
 public:
  // seq_len and negatives (0 for the cross-entropy head) come from the model.
  RecTask(const RunConfig& rc, int seq_len, int negatives, int model_items, bool need_train);
  std::string name() const override { return "rec"; }
  std::string describe_data() const override { return description_; }
  const SampleSource& train_data() const override { return *train_; }
  const SampleSource* val_data() const override { return eval_.get(); }
  double loss_units(const SampleSource& src, std::span<const uint64_t> samples) const override;
  std::vector<Metric> metrics(double mean_loss) const override;
  std::vector<Metric> model_metrics(ModelRuntime& rt, const SampleSource& data) const override;
  std::string data_summary() const override;
  std::string test_split() const override { return "test items (each user's last)"; }
  const char* unit_name() const override { return "positions"; }
  const char* unit_abbrev() const override { return "pos"; }
  // `fittrain sample`: the top 10 items for the first users (their whole history).
  int sample(ModelRuntime& rt, const RunConfig& rc) const override;

 private:
  std::string description_;
  std::unique_ptr<RecFile> file_;
  std::unique_ptr<PositiveSets> positives_;
  std::unique_ptr<NegativeSampler> sampler_;
  std::unique_ptr<RecTrainSource> train_;
  std::unique_ptr<RecEvalSource> eval_;
  int64_t rank_users_;
  mutable std::once_flag pop_once_;
  mutable RankingResult pop_;
};

}  // namespace ft
