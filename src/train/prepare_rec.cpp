#include "train/prepare_rec.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/interactions.h"
#include "data/movielens.h"
#include "data/prepare.h"
#include "train/run_checks.h"

namespace ft {

bool prepares_interactions(const RunConfig& rc) { return !rc.ratings.empty() || !rc.synthetic.empty(); }

namespace {

namespace fs = std::filesystem;

// The flags of text/pair preparation have no meaning here: named, not ignored (--loss-on,
// --prompt-field, --val-fraction were accepted and ignored). run_prepare refuses the
// interaction flags (--users, --items, --ratings-format) beside --input the same way.
void check_flags(const RunConfig& rc) {
  const bool synthetic = !rc.synthetic.empty();
  FT_USER_CHECK(rc.ratings.empty() || !synthetic, "--ratings ", rc.ratings, " and --synthetic ", rc.synthetic,
                ": give one (the ratings to prepare)");
  FT_USER_CHECK(!synthetic || rc.synthetic == "movielens", "--synthetic ", rc.synthetic,
                ": the synthetic data sets are movielens (ML-1M-shaped ratings) and eit");
  const char* what = synthetic ? "--synthetic movielens" : "--ratings";
  FT_USER_CHECK(rc.inputs.empty(), "--input and ", what, ": give one (--input takes text or prompt/response files, ",
                what, " prepares interactions)");
  // The split is fixed by the data: no share or file of validation data to choose.
  const RunConfig d;
  const char* split_flag = first_given({{!rc.val_inputs.empty(), "--val-input"},
                                        {rc.val_fraction != d.val_fraction, "--val-fraction"}});
  FT_USER_CHECK(!split_flag, split_flag ? split_flag : "", " does not apply to ", what,
                ": the split is leave-one-out (each user's last item is the test item, the second-to-last the "
                "validation item, the rest train); leave it out");
  FT_USER_CHECK(rc.input_format == d.input_format, "--input-format does not apply to ", what,
                synthetic ? "" : " (use --ratings-format)");
  const char* text_flag = first_given({{rc.pairs, "--pairs"},
                                       {rc.seq_len != 0, "--seq-len"},
                                       {!rc.tokenizer.empty(), "--tokenizer"}});
  if (!text_flag) text_flag = first_pair_flag(rc);
  FT_USER_CHECK(!text_flag, text_flag ? text_flag : "", " does not apply to ", what,
                ": it applies to text or prompt/response files (--input); interactions are item ids");
  FT_USER_CHECK(synthetic || (rc.synthetic_users == 0 && rc.synthetic_items == 0),
                rc.synthetic_users != 0 ? "--users" : "--items", " applies to --synthetic movielens only");
  FT_USER_CHECK(!synthetic || rc.ratings_format == d.ratings_format, "--ratings-format applies to --ratings only");
  FT_USER_CHECK(!synthetic || rc.synthetic_items == 0 || rc.synthetic_items >= 10, "--items ", rc.synthetic_items,
                ": at least 10 (every user rates at least 5 items, at most half of them)");
  FT_USER_CHECK(!rc.out_dir.empty(), "--out: give the folder for ", kInteractionsRecFile);
}

// The synthetic spec: ML-1M's preset, resized by --users / --items at ML-1M's density
// (ratings per user scale with the items, between 5 and a quarter of them). Under 20 items a
// quarter is below the 5 every user rates, so the mean stays 5: the generator caps a user at
// half the items, 5 or more from --items 10 on (with a quarter as the bound, 10 to 19 items
// asked the generator for a mean under 5, an internal error).
SyntheticSpec synthetic_spec(const RunConfig& rc) {
  SyntheticSpec s = movielens_1m_spec(rc.global_seed);
  const double density = s.mean_len / s.items;
  if (rc.synthetic_users != 0) s.users = rc.synthetic_users;
  if (rc.synthetic_items != 0 && rc.synthetic_items != s.items) {
    s.items = rc.synthetic_items;
    const double lo = s.min_len, hi = std::max(lo, s.items / 4.0);
    s.mean_len = std::clamp(density * s.items, lo, hi);
  }
  // 16 bytes per rating while building: keep it to a few GB
  const double ratings = s.mean_len * s.users;
  FT_USER_CHECK(ratings <= 1e8, "--users ", s.users, " x --items ", s.items, " would give ", ratings,
                " synthetic ratings: at most 100 million");
  return s;
}

std::string human_bytes(uint64_t b) {
  char buf[32];
  if (b < 10000) std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(b));
  else if (b < 1000000) std::snprintf(buf, sizeof buf, "%.1f KB", b / 1e3);
  else std::snprintf(buf, sizeof buf, "%.1f MB", b / 1e6);
  return buf;
}

}  // namespace

int run_prepare_interactions(const RunConfig& rc) {
  check_flags(rc);
  const bool synthetic = !rc.synthetic.empty();
  const std::string rec = (fs::path(rc.out_dir) / kInteractionsRecFile).string();
  const std::string dat = (fs::path(rc.out_dir) / kSyntheticRatingsFile).string();
  // Another preparation's files are replaced only when asked: refused at once, and again
  // under the folder's lock (a preparation finishing meanwhile).
  std::error_code ec;
  auto check_unprepared = [&] {
    check_no_other_preparation(rc.out_dir, PreparedKind::ratings);
    for (const std::string& f : synthetic ? std::vector<std::string>{rec, dat} : std::vector<std::string>{rec})
      FT_USER_CHECK(rc.overwrite || !fs::exists(f, ec), "--out ", rc.out_dir, " already holds ",
                    fs::path(f).filename().string(), ": pass --overwrite to replace it, or another --out");
  };
  check_unprepared();
  std::string source = rc.ratings;
  RatingsFormat format = RatingsFormat::kDat;
  std::optional<SyntheticSpec> spec;
  if (synthetic) {
    spec = synthetic_spec(rc);
    source = dat;
  } else {
    try {
      format = parse_ratings_format(rc.ratings_format);
    } catch (const UserError& e) {
      throw UserError(std::string("--ratings-format: ") + e.what());
    }
    format = resolve_ratings_format(rc.ratings, format);
    FT_USER_CHECK(fs::is_regular_file(rc.ratings, ec), "--ratings ", rc.ratings, ": no such file");
  }
  const PrepareLock lock(rc.out_dir);  // before anything is written there
  check_unprepared();
  if (spec) write_synthetic_ratings(dat, *spec);
  // The file path users take: parse, build, write.
  const Interactions x = load_ratings(source, format);
  // Refused before anything is written: a .rec of no users trains nothing, and with
  // --overwrite it would have replaced a good one.
  FT_USER_CHECK(x.view().num_users() >= 1, synthetic ? "--synthetic" : "--ratings", " ", source, ": no user has ",
                x.min_interactions, " or more ratings (read ", x.report.raw_interactions, " ratings of ",
                x.report.raw_users, " users): nothing to train on; ", rec, " not written");
  write_rec(rec, x);
  const InteractionsView v = x.view();

  // Popularity share of the top 10% items (train counts).
  std::vector<uint32_t> pop(v.popularity().begin() + 1, v.popularity().end());
  std::sort(pop.begin(), pop.end(), std::greater<>());
  const size_t top = (pop.size() + 9) / 10;
  uint64_t total = 0, head = 0;
  for (size_t i = 0; i < pop.size(); ++i) (i < top ? head : total) += pop[i];
  total += head;
  const auto u = [](uint64_t n) { return static_cast<unsigned long long>(n); };
  std::printf("prepared   %llu interactions of %u users and %u items from %s%s\n", u(v.num_interactions()),
              v.num_users(), v.num_items(), source.c_str(),
              synthetic ? " (synthetic MovieLens, written first and parsed back)" : "");
  std::printf("read       %llu ratings of %llu users; dropped %llu user(s) with fewer than %u ratings (%llu "
              "ratings)\n",
              u(x.report.raw_interactions), u(x.report.raw_users), u(x.report.dropped_users), x.min_interactions,
              u(x.report.dropped_interactions));
  std::printf("split      leave-one-out: %llu train, %u validation, %u test interactions\n",
              u(v.num_interactions() - 2ull * v.num_users()), v.num_users(), v.num_users());
  std::printf("popularity top 10%% of items (%zu) hold %.1f%% of the train interactions\n", top,
              total > 0 ? 100.0 * static_cast<double>(head) / static_cast<double>(total) : 0.0);
  if (synthetic) std::printf("wrote      %s (%s)\n", dat.c_str(), human_bytes(fs::file_size(dat)).c_str());
  std::printf("wrote      %s (%s)\n", rec.c_str(), human_bytes(fs::file_size(rec)).c_str());
  return 0;
}

}  // namespace ft
