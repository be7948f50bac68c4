#include "train/rec_task.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <limits>

#include "core/error.h"
#include "data/prepared_folder.h"
#include "train/runtime.h"

namespace ft {

namespace fs = std::filesystem;

std::string rec_data_file(const std::string& data_path, const std::string& flag) {
  FT_USER_CHECK(!data_path.empty(), "--task rec needs ", flag,
                ": prepared interactions (`fittrain prepare --ratings ratings.dat --out DIR`, or "
                "`fittrain prepare --synthetic movielens --out DIR` for a built-in set)");
  std::error_code ec;
  if (fs::is_directory(data_path, ec)) {
    const std::string f = (fs::path(data_path) / kInteractionsRecFile).string();
    if (fs::exists(f, ec)) return f;
    // The command to run, with the ratings file the folder holds when it holds one (the hint
    // named a bare ratings.dat, which is not there when run from elsewhere).
    std::string ratings = "RATINGS_FILE";
    for (const char* name : {"ratings.dat", "ratings.csv"})
      if (fs::is_regular_file(fs::path(data_path) / name, ec)) {
        ratings = (fs::path(data_path) / name).string();
        break;
      }
    throw UserError(detail::concat(flag, " ", data_path, ": the folder has no interactions.rec (make one with ",
                                   "`fittrain prepare --ratings ", ratings, " --out ", data_path, "`)"));
  }
  FT_USER_CHECK(fs::exists(data_path, ec), flag, " ", data_path, ": no such file or folder");
  return data_path;
}

int rec_data_items(const std::string& data_path, const std::string& flag) {
  RecFile f(rec_data_file(data_path, flag));
  return static_cast<int>(f.view().num_items());
}

// ---- samples ----------------------------------------------------------------------------------

RecTrainSource::RecTrainSource(const InteractionsView& v, const PositiveSets& pos, const NegativeSampler& sampler,
                               int seq_len, int negatives)
    : v_(v), pos_(pos), sampler_(sampler), T_(seq_len), K_(negatives) {
  for (uint32_t u = 0; u < v.num_users(); ++u)
    if (v.train(u).size() >= 2) users_.push_back(u);
}

std::vector<FieldSpec> RecTrainSource::fields() const {
  std::vector<FieldSpec> f{FieldSpec{"tokens", DType::i32, T_}, FieldSpec{"targets", DType::i32, T_}};
  if (K_ > 0) f.push_back(FieldSpec{"negatives", DType::i32, static_cast<int64_t>(T_) * K_});
  return f;
}

void RecTrainSource::read_visit(uint64_t idx, uint64_t epoch, std::span<void* const> dst) const {
  FT_CHECK(idx < users_.size(), "rec sample ", idx);
  const uint32_t u = users_[idx];
  std::span<const uint32_t> seq = v_.train(u);
  if (seq.size() > static_cast<size_t>(T_) + 1) seq = seq.last(static_cast<size_t>(T_) + 1);  // the most recent
  auto* tok = static_cast<int32_t*>(dst[0]);
  auto* tgt = static_cast<int32_t*>(dst[1]);
  const size_t n = seq.size() - 1;  // positions with a target
  for (size_t t = 0; t < static_cast<size_t>(T_); ++t) {
    tok[t] = t < n ? static_cast<int32_t>(seq[t]) : 0;
    tgt[t] = t < n ? static_cast<int32_t>(seq[t + 1]) : -1;
  }
  if (K_ == 0) return;
  // Drawn for every position (padding included) so a draw depends on (seed, user, epoch)
  // alone; padding positions' negatives are never scored.
  auto* neg = static_cast<int32_t*>(dst[2]);
  std::span<uint32_t> out(reinterpret_cast<uint32_t*>(neg), static_cast<size_t>(T_) * static_cast<size_t>(K_));
  sampler_.sample(u, epoch, pos_.of(u), out);
}

uint64_t RecTrainSource::positions(std::span<const uint64_t> samples) const {
  uint64_t n = 0;
  for (uint64_t i : samples) n += std::min<uint64_t>(v_.train(users_[i]).size(), static_cast<uint64_t>(T_) + 1) - 1;
  return n;
}

RecEvalSource::RecEvalSource(const InteractionsView& v, const PositiveSets& pos, const NegativeSampler& sampler,
                             int seq_len, int negatives, HeldOut held_out)
    : v_(v), pos_(pos), sampler_(sampler), T_(seq_len), K_(negatives), held_out_(held_out) {}

std::vector<FieldSpec> RecEvalSource::fields() const {
  std::vector<FieldSpec> f{FieldSpec{"tokens", DType::i32, T_}, FieldSpec{"targets", DType::i32, T_}};
  if (K_ > 0) f.push_back(FieldSpec{"negatives", DType::i32, static_cast<int64_t>(T_) * K_});
  return f;
}

std::span<const uint32_t> RecEvalSource::context(uint32_t u) const {
  std::span<const uint32_t> h = v_.history(u);
  return h.first(h.size() - (held_out_ == HeldOut::kValid ? 2 : 1));
}

void RecEvalSource::read(uint64_t idx, std::span<void* const> dst) const {
  FT_CHECK(idx < v_.num_users(), "rec evaluation sample ", idx);
  const auto u = static_cast<uint32_t>(idx);
  std::span<const uint32_t> ctx = context(u);
  if (ctx.size() > static_cast<size_t>(T_)) ctx = ctx.last(static_cast<size_t>(T_));
  auto* tok = static_cast<int32_t*>(dst[0]);
  auto* tgt = static_cast<int32_t*>(dst[1]);
  for (size_t t = 0; t < static_cast<size_t>(T_); ++t) {
    tok[t] = t < ctx.size() ? static_cast<int32_t>(ctx[t]) : 0;
    tgt[t] = -1;
  }
  tgt[ctx.size() - 1] = static_cast<int32_t>(target(u));
  if (K_ == 0) return;
  // The held-out position's negatives: the first K of SASRec's 100 evaluation negatives (the
  // same every evaluation), or a fixed draw when K exceeds them.
  auto* neg = static_cast<int32_t*>(dst[2]);
  std::fill(neg, neg + static_cast<size_t>(T_) * static_cast<size_t>(K_), 1);
  std::span<uint32_t> at(reinterpret_cast<uint32_t*>(neg) + (ctx.size() - 1) * static_cast<size_t>(K_),
                         static_cast<size_t>(K_));
  if (static_cast<size_t>(K_) <= NegativeSampler::kEvalNegatives) {
    uint32_t all[NegativeSampler::kEvalNegatives];
    sampler_.eval_negatives(u, pos_.of(u), all);
    std::copy(all, all + K_, at.begin());
  } else {
    sampler_.sample(u, std::numeric_limits<uint64_t>::max(), pos_.of(u), at);
  }
}

// ---- ranking ----------------------------------------------------------------------------------

namespace {

// Ranks users [0, n) with scores from `score` (chunk of users -> [chunk, N+1] scores): this
// rank's chunks (EvalShard), their metrics summed over the ranks.
template <class ScoreFn>
RankingResult rank_with(const RecEvalSource& src, const PositiveSets& pos, const NegativeSampler& sampler,
                        uint32_t items, int64_t users, int64_t chunk, const EvalShard& shard, const ScoreFn& score) {
  RankingAccumulator sampled, full;
  const uint64_t all = src.num_samples();
  const auto n = static_cast<uint32_t>(users > 0 ? std::min<uint64_t>(static_cast<uint64_t>(users), all) : all);
  std::vector<float> scores;
  std::vector<float> cand(NegativeSampler::kEvalNegatives);
  uint32_t negs[NegativeSampler::kEvalNegatives];
  shard.part([&] {  // out of memory: every rank learns of it in sum() and throws there
    for (uint32_t first = 0; first < n; first += static_cast<uint32_t>(chunk)) {
      if (!shard.mine(first / static_cast<uint64_t>(chunk))) continue;
      const uint32_t m = std::min<uint32_t>(static_cast<uint32_t>(chunk), n - first);
      scores.resize(static_cast<size_t>(m) * (items + 1));
      score(first, m, scores.data());
      for (uint32_t i = 0; i < m; ++i) {
        const uint32_t u = first + i;
        std::span<const float> s(scores.data() + static_cast<size_t>(i) * (items + 1), items + 1);
        const uint32_t target = src.target(u);
        sampler.eval_negatives(u, pos.of(u), negs);
        for (size_t k = 0; k < cand.size(); ++k) cand[k] = s[negs[k]];
        sampled.add(s[target], cand);
        full.add_rank(full_ranking_rank(s, target, pos.of(u)));
      }
    }
  });
  // this rank's hits, NDCG and users, summed over the ranks
  std::array<double, 6> sums{};
  std::ranges::copy(sampled.sums(), sums.begin());
  std::ranges::copy(full.sums(), sums.begin() + 3);
  shard.sum(sums);
  const std::span<const double, 6> summed(sums);
  return {RankingAccumulator::of_sums(summed.first<3>()).result(), RankingAccumulator::of_sums(summed.last<3>()).result()};
}

}  // namespace

RankingResult rank_users(Ranker& ranker, const RecEvalSource& src, const PositiveSets& pos,
                         const NegativeSampler& sampler, int64_t users, const EvalShard& shard) {
  const auto items = static_cast<uint32_t>(ranker.num_items());
  const int64_t chunk = std::max<int64_t>(1, ranker.max_rank_batch()) * 8;
  std::vector<std::span<const uint32_t>> hist;
  return rank_with(src, pos, sampler, items, users, chunk, shard, [&](uint32_t first, uint32_t m, float* out) {
    hist.clear();
    for (uint32_t i = 0; i < m; ++i) hist.push_back(src.context(first + i));
    ranker.score_next(hist, out);
  });
}

RankingResult rank_by_popularity(const InteractionsView& v, const RecEvalSource& src, const PositiveSets& pos,
                                 const NegativeSampler& sampler, int64_t users) {
  const std::vector<float> pop = popularity_scores(v);
  const uint32_t items = v.num_items();
  return rank_with(src, pos, sampler, items, users, 256, EvalShard{}, [&](uint32_t, uint32_t m, float* out) {
    for (uint32_t i = 0; i < m; ++i) std::copy(pop.begin(), pop.end(), out + static_cast<size_t>(i) * (items + 1));
  });
}

// ---- task ---------------------------------------------------------------------------------------

RecTask::RecTask(const RunConfig& rc, int seq_len, int negatives, int model_items, bool need_train)
    : rank_users_(rc.rank_users) {
  const std::string flag = "--data-path";
  const std::string path = rec_data_file(rc.data_path, flag);
  file_ = std::make_unique<RecFile>(path);
  const InteractionsView& v = file_->view();
  FT_USER_CHECK(static_cast<int>(v.num_items()) == model_items, flag, " ", path, ": the data has ", v.num_items(),
                " items but the model's item table has ", model_items,
                " (a checkpoint of another data set, or --data-path changed since training)");
  FT_USER_CHECK(v.num_users() >= 1, flag, " ", path, ": no users with at least ", kMinSplitInteractions, " ratings");
  positives_ = std::make_unique<PositiveSets>(v);
  sampler_ = std::make_unique<NegativeSampler>(v.num_items(), rc.global_seed);
  if (need_train) {
    train_ = std::make_unique<RecTrainSource>(v, *positives_, *sampler_, seq_len, negatives);
    FT_USER_CHECK(train_->num_samples() >= 1, flag, " ", path,
                  ": no user has two train items (nothing to learn a next item from)");
    // Sampled HR@10/NDCG@10 rank each held-out item among kEvalNegatives items the user has
    // not rated: a user with fewer would stop the run at its first evaluation, after training.
    for (uint32_t u = 0; u < v.num_users(); ++u) {
      const size_t rated = positives_->of(u).size();
      FT_USER_CHECK(v.num_items() - rated >= NegativeSampler::kEvalNegatives, flag, " ", path, ": user ",
                    v.user_ids()[u], " has rated ", rated, " of the ", v.num_items(), " items, leaving fewer than the ",
                    NegativeSampler::kEvalNegatives,
                    " unrated ones that sampled evaluation ranks the held-out item among (SASRec's protocol): a "
                    "catalogue this small needs more items, or drop such users from the data");
    }
  }
  eval_ = std::make_unique<RecEvalSource>(v, *positives_, *sampler_, seq_len, negatives,
                                          need_train ? HeldOut::kValid : HeldOut::kTest);
  description_ = path + " (user histories, leave-one-out)";
}

double RecTask::loss_units(const SampleSource& src, std::span<const uint64_t> samples) const {
  if (const auto* t = dynamic_cast<const RecTrainSource*>(&src)) return static_cast<double>(t->positions(samples));
  FT_CHECK(dynamic_cast<const RecEvalSource*>(&src), "rec task: loss units of data that is not user histories");
  return static_cast<double>(samples.size());  // one held-out item each
}

std::vector<Metric> RecTask::metrics(double /*mean_loss*/) const { return {}; }

std::vector<Metric> RecTask::model_metrics(ModelRuntime& rt, const SampleSource& data) const {
  Ranker* ranker = rt.model().ranker();
  FT_USER_CHECK(ranker, "--task rec: model family ", rt.model().family(), " does not rank items");
  const auto* src = dynamic_cast<const RecEvalSource*>(&data);
  FT_CHECK(src, "rec task: evaluation data is not user histories");
  const InteractionsView& v = file_->view();
  const RankingResult r = rank_users(*ranker, *src, *positives_, *sampler_, rank_users_, eval_shard(rt));
  std::call_once(pop_once_, [&] { pop_ = rank_by_popularity(v, *src, *positives_, *sampler_, rank_users_); });
  return {Metric{"hr10", r.sampled.hr10},          Metric{"ndcg10", r.sampled.ndcg10},
          Metric{"full_hr10", r.full.hr10},        Metric{"full_ndcg10", r.full.ndcg10},
          Metric{"pop_hr10", pop_.sampled.hr10},   Metric{"pop_ndcg10", pop_.sampled.ndcg10},
          Metric{"pop_full_hr10", pop_.full.hr10}, Metric{"pop_full_ndcg10", pop_.full.ndcg10}};
}

std::string RecTask::data_summary() const {
  const InteractionsView& v = file_->view();
  char line[320];
  std::snprintf(line, sizeof line,
                "data       %u users, %u items, %llu interactions (leave-one-out: %llu users train, every user "
                "validates and tests on its last items)\n",
                v.num_users(), v.num_items(), static_cast<unsigned long long>(v.num_interactions()),
                static_cast<unsigned long long>(train_ ? train_->num_samples() : 0));
  return line;
}

int RecTask::sample(ModelRuntime& rt, const RunConfig& rc) const {
  Ranker* ranker = rt.model().ranker();
  FT_USER_CHECK(ranker, "--task rec: model family ", rt.model().family(), " does not rank items");
  const InteractionsView& v = file_->view();
  const uint32_t users = std::min<uint32_t>(v.num_users(), rc.prompts.empty() ? 5u : static_cast<uint32_t>(rc.prompts.size()));
  const uint32_t items = v.num_items();
  std::vector<std::span<const uint32_t>> hist;
  std::vector<uint32_t> who;
  for (uint32_t i = 0; i < users; ++i) {
    uint32_t u = i;
    if (!rc.prompts.empty()) {  // --prompt USER_ID: a raw user id of the data
      const std::string& p = rc.prompts[i];
      char* end = nullptr;
      const unsigned long raw = std::strtoul(p.c_str(), &end, 10);
      FT_USER_CHECK(end && *end == '\0' && !p.empty(), "--prompt ", p, ": the recommender takes a user id");
      auto ids = v.user_ids();
      auto it = std::find(ids.begin(), ids.end(), static_cast<uint32_t>(raw));
      FT_USER_CHECK(it != ids.end(), "--prompt ", p, ": no user with that id in ", file_->path());
      u = static_cast<uint32_t>(it - ids.begin());
    }
    who.push_back(u);
    hist.push_back(v.history(u));
  }
  std::vector<float> scores(static_cast<size_t>(users) * (items + 1));
  ranker->score_next(hist, scores.data());
  for (uint32_t i = 0; i < users; ++i) {
    const uint32_t u = who[i];
    float* s = scores.data() + static_cast<size_t>(i) * (items + 1);
    for (uint32_t item : positives_->of(u)) s[item] = -std::numeric_limits<float>::infinity();  // seen
    std::vector<uint32_t> order(items);
    for (uint32_t k = 0; k < items; ++k) order[k] = k + 1;
    const size_t top = std::min<size_t>(10, order.size());
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(top), order.end(),
                      [&](uint32_t a, uint32_t b) { return s[a] > s[b] || (s[a] == s[b] && a < b); });
    std::printf("user %u (%zu rated): top %zu unseen items:", v.raw_user(u), v.history(u).size(), top);
    for (size_t k = 0; k < top; ++k) std::printf(" %u", v.raw_item(order[k]));
    std::printf("\n");
  }
  return 0;
}

}  // namespace ft
