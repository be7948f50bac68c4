#include "train/prepare_eit.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "core/error.h"
#include "data/eit_dataset.h"
#include "data/prepare.h"
#include "data/synthetic_eit.h"
#include "train/run_checks.h"

namespace ft {

namespace {

namespace fs = std::filesystem;

// Samples simulated at once (in parallel) before write_eit_folder, which asks for them one by
// one, writes them: the simulator is thread-safe and each sample a pure function of (seed,
// split, index), so the files are the same whatever the thread count.
constexpr int64_t kChunk = 64;

// The prepare flags of text, pair and ratings data have no meaning here: named, not ignored
// (--val-fraction was accepted and the splits came from --valid/--test all the same). A flag
// with a default counts as given when its value differs from the default.
void check_flags(const RunConfig& rc) {
  const RunConfig d;
  FT_USER_CHECK(rc.ratings.empty(), "--ratings and --synthetic eit: give one");
  FT_USER_CHECK(rc.inputs.empty(), "--input and --synthetic eit: give one (--synthetic eit simulates its data)");
  FT_USER_CHECK(rc.val_inputs.empty(), "--val-input does not apply to --synthetic eit (use --valid N)");
  FT_USER_CHECK(rc.val_fraction == d.val_fraction, "--val-fraction does not apply to --synthetic eit: its splits are "
                "sample counts, --train N --valid N --test N (default 1000, 100, 100)");
  FT_USER_CHECK(!rc.pairs, "--pairs does not apply to --synthetic eit (it simulates images and voltages)");
  FT_USER_CHECK(rc.seq_len == 0, "--seq-len does not apply to --synthetic eit (its samples are images: --image-size)");
  FT_USER_CHECK(rc.tokenizer.empty(), "--tokenizer does not apply to --synthetic eit (its samples are not tokens)");
  const char* pair_flag = rc.input_format != d.input_format ? "--input-format" : first_pair_flag(rc);
  FT_USER_CHECK(!pair_flag, pair_flag ? pair_flag : "", " applies to prompt/response data (--input), not to "
                "--synthetic eit (it simulates images and voltages)");
  FT_USER_CHECK(rc.ratings_format == d.ratings_format, "--ratings-format applies to --ratings only, not to "
                "--synthetic eit");
  FT_USER_CHECK(rc.synthetic_users == 0 && rc.synthetic_items == 0, rc.synthetic_users ? "--users" : "--items",
                " applies to --synthetic movielens only");
  FT_USER_CHECK(!rc.out_dir.empty(), "--out: give the folder for the EIT set");
  FT_USER_CHECK(rc.synthetic_train == -1 || rc.synthetic_train >= 2, "--train ", rc.synthetic_train,
                ": at least 2 (the voltages' std over the train split normalises them)");
  FT_USER_CHECK(rc.synthetic_valid >= -1 && rc.synthetic_test >= -1, "--valid and --test must be >= 0");
  FT_USER_CHECK(rc.image_size == 0 || (rc.image_size >= 8 && rc.image_size <= 1024), "--image-size ", rc.image_size,
                ": the simulator takes 8 to 1024");
}

}  // namespace

int run_prepare_eit(const RunConfig& rc) {
  check_flags(rc);
  EitWriteSpec spec;
  spec.train = rc.synthetic_train >= 0 ? rc.synthetic_train : 1000;
  spec.valid = rc.synthetic_valid >= 0 ? rc.synthetic_valid : 100;
  spec.test = rc.synthetic_test >= 0 ? rc.synthetic_test : 100;
  spec.image_size = rc.image_size > 0 ? rc.image_size : kEitImageSize;
  spec.replace_earlier = rc.overwrite;  // the earlier set's samples beyond this one's go too
  std::error_code ec;
  // Another set is replaced only when asked: refused at once, and again under the lock.
  auto check_unprepared = [&] {
    check_no_other_preparation(rc.out_dir, PreparedKind::eit);
    FT_USER_CHECK(rc.overwrite || !fs::exists(fs::path(rc.out_dir) / kEitMeanFile, ec), "--out ", rc.out_dir,
                  " already holds an EIT set (mean.pth): pass --overwrite to replace it, or another --out");
  };
  check_unprepared();
  const PrepareLock lock(rc.out_dir);  // two runs into one folder would mix their samples
  check_unprepared();
  const auto start = std::chrono::steady_clock::now();
  EitSimConfig sc;
  sc.image = static_cast<int>(spec.image_size);
  sc.seed = rc.global_seed;
  EitSimulator sim(sc);
  spec.measurements = sim.measurements();
  const int64_t counts[3] = {spec.train, spec.valid, spec.test};
  struct {
    int split = -1;
    int64_t first = 0;
    std::vector<EitSampleArrays> a;
  } cache;
  auto fill = [&](int split, int64_t i, EitSampleArrays& out) {
    if (split != cache.split || i < cache.first || i >= cache.first + static_cast<int64_t>(cache.a.size())) {
      const int64_t n = std::min(kChunk, counts[split] - i);
      cache.split = split;
      cache.first = i;
      cache.a.resize(static_cast<size_t>(n));
#pragma omp parallel for schedule(dynamic)
      for (int64_t k = 0; k < n; ++k) {
        EitSampleArrays& s = cache.a[static_cast<size_t>(k)];
        sim.sample(split, i + k, s.xs, s.ys, s.tr);
      }
    }
    const EitSampleArrays& s = cache.a[static_cast<size_t>(i - cache.first)];
    std::copy(s.xs.begin(), s.xs.end(), out.xs.begin());
    std::copy(s.ys.begin(), s.ys.end(), out.ys.begin());
    std::copy(s.tr.begin(), s.tr.end(), out.tr.begin());
  };
  write_eit_folder(rc.out_dir, spec, fill);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("prepared   synthetic EIT: %lld train, %lld valid, %lld test samples of %lldx%lld images and %lld "
              "voltages (seed %llu) in %.1f s\n",
              static_cast<long long>(spec.train), static_cast<long long>(spec.valid),
              static_cast<long long>(spec.test), static_cast<long long>(spec.image_size),
              static_cast<long long>(spec.image_size), static_cast<long long>(spec.measurements),
              static_cast<unsigned long long>(rc.global_seed), s);
  std::printf("wrote      %s/{train,valid,test}/*.npz, mean.pth, std.pth (CDEIT's layout)\n", rc.out_dir.c_str());
  return 0;
}

}  // namespace ft
