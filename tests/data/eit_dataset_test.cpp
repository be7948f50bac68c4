// EitDataset, write_eit_folder and NpyArrayDataset: the synthetic folder read back (the
// Fortran-order path), the 16 x 16 condition map and its x8 upsampling, normalisation files,
// savez_compressed (DEFLATE) and float64 members, every error naming the file and the member
// or key, and reads from several threads.
#include "data/eit_dataset.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <thread>

#include "data/npy.h"
#include "data/npy_dataset.h"
#include "data/prepared_folder.h"
#include "data/zip_archive.h"
#include "npz_rewrite.h"
#include "test_util.h"
#include "zip_test_util.h"

namespace ft {
namespace {

namespace fs = std::filesystem;
using test::byte_span;
using test::expect_user_error;
using test::make_zip;
using test::TempDir;

// A deterministic sample: x-y asymmetric (a transposed image would differ), distinct per
// split and index.
void fill_pattern(int split, int64_t index, EitSampleArrays& a, int64_t size = kEitImageSize) {
  for (int64_t y = 0; y < size; ++y)
    for (int64_t x = 0; x < size; ++x)
      a.xs[y * size + x] = static_cast<float>(split * 100 + index) + 0.01f * static_cast<float>(y) - 0.0001f * x;
  for (size_t k = 0; k < a.ys.size(); ++k)
    a.ys[k] = std::sin(0.1f * static_cast<float>(k) + static_cast<float>(index)) + 0.01f * static_cast<float>(k);
  for (size_t i = 0; i < a.tr.size(); ++i) a.tr[i] = -a.xs[i];
}

EitWriteSpec small_spec() {
  EitWriteSpec s;
  s.train = 3;
  s.valid = 2;
  s.test = 1;
  return s;
}

// Mean and unbiased std over the train split's ys, computed here independently.
void train_stats(const EitWriteSpec& s, std::vector<double>& mean, std::vector<double>& std) {
  EitSampleArrays a;
  const auto d = static_cast<size_t>(s.measurements);
  mean.assign(d, 0);
  std.assign(d, 0);
  std::vector<std::vector<float>> ys;
  for (int64_t i = 0; i < s.train; ++i) {
    a.xs.assign(static_cast<size_t>(s.image_size * s.image_size), 0);
    a.ys.assign(d, 0);
    fill_pattern(0, i, a, s.image_size);
    ys.push_back(a.ys);
  }
  for (size_t k = 0; k < d; ++k) {
    for (const auto& y : ys) mean[k] += y[k] / static_cast<double>(ys.size());
    for (const auto& y : ys) std[k] += (y[k] - mean[k]) * (y[k] - mean[k]);
    std[k] = std::sqrt(std[k] / static_cast<double>(ys.size() - 1));
  }
}

void write_small(const std::string& dir, const EitWriteSpec& s = small_spec()) {
  write_eit_folder(dir, s, [&](int split, int64_t i, EitSampleArrays& a) { fill_pattern(split, i, a, s.image_size); });
}

// A rewrite cut short (an error or an interruption in its samples) leaves no statistics: the
// folder is then refused for training, never read as the earlier set's statistics over a mix
// of old and new samples (they stayed, and the folder still looked whole).
TEST(EitDataset, ARewriteCutShortLeavesNoStatistics) {
  TempDir dir;
  const EitWriteSpec spec = small_spec();
  write_small(dir.str(), spec);
  ASSERT_TRUE(fs::exists(dir.file("mean.pth")));
  expect_user_error(
      [&] {
        write_eit_folder(dir.str(), spec, [&](int split, int64_t i, EitSampleArrays& a) {
          FT_USER_CHECK(split == 0 && i < 2, "cut short");
          fill_pattern(split, i, a, spec.image_size);
        });
      },
      {"cut short"});
  EXPECT_FALSE(fs::exists(dir.file("mean.pth")));
  EXPECT_FALSE(fs::exists(dir.file("std.pth")));
  EitOptions opt;
  opt.split = "train";
  expect_user_error([&] { EitDataset ds(dir.str(), opt); }, {"mean.pth"});
}

// The names in a folder, sorted ("" when it does not exist).
std::string listing(const std::string& folder) {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec))
    names.push_back(it->path().filename().string());
  std::sort(names.begin(), names.end());
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : " ") + n;
  return s;
}

// A smaller set over a larger one: refused without replace_earlier (--overwrite), changing
// nothing; with it the folder holds exactly the smaller set (the earlier set's numbered
// samples beyond it removed, an unfinished one too), and nothing else is removed. An .npz
// named otherwise is refused either way. (--overwrite used to be refused as well, naming the
// first extra sample, so prepare's hint to pass it led nowhere.)
TEST(EitDataset, AnEarlierSetIsReplacedOnlyWhenAsked) {
  TempDir dir;
  EitWriteSpec big;
  big.train = 5;
  big.valid = 3;
  big.test = 2;
  big.image_size = 8;
  big.measurements = 10;
  big.write_tr = false;
  write_small(dir.str(), big);
  test::write_bytes(dir.file("valid/00007.npz.tmp"), "an unfinished sample of a run cut short");
  test::write_bytes(dir.file("train/notes.txt"), "the user's");
  fs::create_directories(dir.file("test/keep"));
  EitWriteSpec small = big;
  small.train = 2;
  small.valid = 0;
  small.test = 1;
  const std::string mean_before = test::read_bytes(dir.file("mean.pth"));
  expect_user_error([&] { write_small(dir.str(), small); },
                    {dir.file("train/0000"), "earlier set", "(2 train samples)", "--overwrite"});
  EXPECT_EQ(test::read_bytes(dir.file("mean.pth")), mean_before);  // refused before any change
  EXPECT_EQ(listing(dir.file("train")), "00000.npz 00001.npz 00002.npz 00003.npz 00004.npz notes.txt");

  small.replace_earlier = true;
  write_small(dir.str(), small);
  EXPECT_EQ(listing(dir.file("train")), "00000.npz 00001.npz notes.txt");
  EXPECT_EQ(listing(dir.file("valid")), "");
  EXPECT_EQ(listing(dir.file("test")), "00000.npz keep");
  EitOptions opt;
  opt.cond_mode = EitCondMode::kVector;
  const EitDataset ds(dir.str(), opt);
  EXPECT_EQ(ds.num_samples(), 2u);
  std::vector<double> mean, sd;
  train_stats(small, mean, sd);
  for (int k = 0; k < 10; ++k) EXPECT_NEAR(ds.normalisation().std[k], sd[k], 1e-5) << k;  // of 2, not 5

  // Not one of the writer's names: never removed, so refused with or without replace_earlier.
  test::write_bytes(dir.file("train/scan_7.npz"), "a sample from elsewhere");
  for (const bool replace : {false, true}) {
    small.replace_earlier = replace;
    expect_user_error([&] { write_small(dir.str(), small); },
                      {"train/scan_7.npz", "not one of fittrain's numbered samples", "--overwrite does not remove"});
    EXPECT_TRUE(fs::exists(dir.file("mean.pth")));
  }
}

TEST(EitDataset, SampleIndexReadsOnlyTheWritersNames) {
  bool temp = true;
  EXPECT_EQ(eit_sample_index("00042.npz", &temp), 42);
  EXPECT_FALSE(temp);
  EXPECT_EQ(eit_sample_index("00042.npz.tmp", &temp), 42);
  EXPECT_TRUE(temp);
  EXPECT_EQ(eit_sample_index("123456.npz"), 123456);  // %05lld of 100000 and up
  for (const char* other : {"0042.npz", "012345.npz", "00042.npy", "00042.npz.bak", "abcde.npz", "0004a.npz",
                            ".npz", "00042", "1234567890123456789.npz"})
    EXPECT_EQ(eit_sample_index(other), -1) << other;
}

TEST(EitMap, ColumnsSkipTheDrivingElectrodes) {
  EXPECT_EQ(eit_map_column(0), 2);    // row 0 skips 15, 0, 1
  EXPECT_EQ(eit_map_column(12), 14);  // and ends at 14
  EXPECT_EQ(eit_map_column(13), 3);   // row 1 skips 0, 1, 2
  EXPECT_EQ(eit_map_column(65), 0);   // row 5 skips 4, 5, 6
  EXPECT_EQ(eit_map_column(68), 3);
  EXPECT_EQ(eit_map_column(69), 7);
  EXPECT_EQ(eit_map_column(195), 1);  // row 15 skips 14, 15, 0
  EXPECT_EQ(eit_map_column(207), 13);
  for (int r = 0; r < 16; ++r)  // 13 increasing columns per row
    for (int j = 1; j < 13; ++j) EXPECT_LT(eit_map_column(13 * r + j - 1), eit_map_column(13 * r + j));
}

TEST(EitMap, UpsampledByEightNearest) {
  std::vector<float> v(208);
  for (int k = 0; k < 208; ++k) v[k] = static_cast<float>(k + 1);
  std::vector<float> map(128 * 128, -1.f);
  eit_condition_map(v, map.data());
  auto at = [&](int y, int x) { return map[y * 128 + x]; };
  EXPECT_EQ(at(0, 16), 1.f);        // v'[0] at grid (0, 2)
  EXPECT_EQ(at(7, 23), 1.f);        // the whole 8 x 8 block
  EXPECT_EQ(at(0, 24), 2.f);        // v'[1] at (0, 3)
  EXPECT_EQ(at(40, 0), 66.f);       // v'[65] at (5, 0)
  EXPECT_EQ(at(47, 7), 66.f);
  EXPECT_EQ(at(40, 56), 70.f);      // v'[69] at (5, 7)
  EXPECT_EQ(at(127, 111), 208.f);   // v'[207] at (15, 13)
  for (int y : {0, 3, 7}) {
    EXPECT_EQ(at(y, 0), 0.f);       // skipped (0, 0), (0, 1), (0, 15)
    EXPECT_EQ(at(y, 15), 0.f);
    EXPECT_EQ(at(y, 127), 0.f);
    EXPECT_EQ(at(40 + y, 32 + 2 * y), 0.f);  // skipped (5, 4), (5, 5)
  }
  for (int y = 0; y < 128; ++y)  // nearest neighbour: constant over each block
    for (int x = 0; x < 128; ++x) ASSERT_EQ(at(y, x), at(y / 8 * 8, x / 8 * 8)) << y << "," << x;
}

TEST(EitDataset, SyntheticFolderReadsBack) {
  TempDir dir;
  const EitWriteSpec spec = small_spec();
  write_small(dir.str(), spec);
  for (const char* f : {"train/00000.npz", "train/00002.npz", "valid/00001.npz", "test/00000.npz", "mean.pth", "std.pth"})
    EXPECT_TRUE(fs::exists(dir.file(f))) << f;
  EXPECT_FALSE(fs::exists(dir.file("train/00003.npz")));
  write_small(dir.str());  // the same set again: every file replaced
  EitWriteSpec fewer = spec;
  fewer.train = 2;
  expect_user_error([&] { write_small(dir.str(), fewer); }, {"train/00002.npz", "would not replace"});
  // xs is stored Fortran-order, as CDEIT's files have it.
  const ZipArchive z = ZipArchive::open(dir.file("train/00001.npz"));
  EXPECT_TRUE(parse_npy_header(z.read(*z.find("xs.npy")), "xs").fortran_order);
  EXPECT_EQ(parse_npy_header(z.read(*z.find("ys.npy")), "ys").shape, (std::vector<int64_t>{208, 1}));

  std::vector<double> mean, sd;
  train_stats(spec, mean, sd);
  const std::vector<float> file_mean = read_pth_floats(dir.file("mean.pth"), 208);
  for (int k = 0; k < 208; ++k) EXPECT_NEAR(file_mean[k], mean[k], 1e-6);
  const EitNormalisation computed = compute_eit_normalisation(dir.file("train"));
  for (int k = 0; k < 208; ++k) EXPECT_NEAR(computed.std[k], sd[k], 1e-5);

  EitOptions opt;
  opt.split = "valid";
  opt.voltages_field = true;
  const EitDataset ds(dir.str(), opt);
  EXPECT_EQ(ds.num_samples(), 2u);
  EXPECT_TRUE(ds.has_baseline());
  EXPECT_EQ(ds.height(), 128);
  EXPECT_EQ(ds.measurements(), 208);
  const auto fields = ds.fields();
  ASSERT_EQ(fields.size(), 4u);
  EXPECT_EQ(fields[0].name, "image");
  EXPECT_EQ(fields[1].name, "cond");
  EXPECT_EQ(fields[1].per_sample, 128 * 128);
  EXPECT_EQ(fields[2].name, "baseline");
  EXPECT_EQ(fields[3].name, "voltages");

  std::vector<float> image(128 * 128), cond(128 * 128), base(128 * 128), volt(208);
  void* dst[] = {image.data(), cond.data(), base.data(), volt.data()};
  ds.read(1, dst);
  EitSampleArrays want;
  want.xs.resize(128 * 128);
  want.ys.resize(208);
  want.tr.resize(128 * 128);
  fill_pattern(1, 1, want);
  EXPECT_EQ(image, want.xs);
  EXPECT_EQ(base, want.tr);
  for (int k = 0; k < 208; ++k) EXPECT_NEAR(volt[k], (want.ys[k] - mean[k]) / sd[k], 1e-4) << k;
  std::vector<float> map(128 * 128);
  eit_condition_map(volt, map.data());
  EXPECT_EQ(cond, map);
  EXPECT_EQ(cond[16], volt[0]);  // (0, 2) of the grid

  opt.cond_mode = EitCondMode::kVector;
  opt.voltages_field = false;
  const EitDataset vec(dir.str(), opt);
  ASSERT_EQ(vec.fields()[1].per_sample, 208);
  std::vector<float> cv(208);
  void* dst2[] = {image.data(), cv.data(), base.data()};
  vec.read(1, dst2);
  EXPECT_EQ(cv, volt);
}

TEST(EitDataset, GaussNewtonBaselineIsAFieldWhenTheFilesHaveIt) {
  TempDir dir;
  EitWriteSpec spec = small_spec();
  spec.write_gn = true;
  write_eit_folder(dir.str(), spec, [](int split, int64_t i, EitSampleArrays& a) {
    fill_pattern(split, i, a);
    for (size_t k = 0; k < a.gn.size(); ++k) a.gn[k] = 0.5f * a.xs[k] + static_cast<float>(k % 7);
  });
  const ZipArchive z = ZipArchive::open(dir.file("valid/00000.npz"));
  ASSERT_NE(z.find("xs_gn.npy"), nullptr);
  EXPECT_TRUE(parse_npy_header(z.read(*z.find("xs_gn.npy")), "xs_gn").fortran_order);
  EitOptions opt;
  opt.split = "valid";
  opt.cond_mode = EitCondMode::kVector;
  const EitDataset ds(dir.str(), opt);
  EXPECT_TRUE(ds.has_baseline());
  EXPECT_TRUE(ds.has_gn_baseline());
  const auto fields = ds.fields();
  ASSERT_EQ(fields.size(), 4u);
  EXPECT_EQ(fields[2].name, "baseline");
  EXPECT_EQ(fields[3].name, "baseline_gn");
  EXPECT_EQ(fields[3].per_sample, 128 * 128);
  std::vector<float> image(128 * 128), cond(208), base(128 * 128), gn(128 * 128);
  void* dst[] = {image.data(), cond.data(), base.data(), gn.data()};
  ds.read(1, dst);
  for (size_t k = 0; k < gn.size(); ++k) ASSERT_EQ(gn[k], 0.5f * image[k] + static_cast<float>(k % 7)) << k;

  // A later file without xs_gn: named, with what it has.
  test::rewrite_npz(dir.file("valid/00000.npz"), dir.file("valid/00001.npz"), {"xs.npy", "ys.npy", "TR.npy"});
  const EitDataset again(dir.str(), opt);
  expect_user_error([&] { again.read(1, dst); }, {"00001.npz", "xs_gn", "xs.npy"});
}

TEST(EitDataset, CompressedFloat64AndNoBaseline) {
  // np.savez_compressed of float64 arrays, C order, ys as (208,), without TR.
  TempDir dir;
  fs::create_directories(dir.file("test"));
  std::vector<double> xs(128 * 128), ys(208);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = 0.25 * static_cast<double>(i % 1000);
  for (size_t k = 0; k < ys.size(); ++k) ys[k] = 2.0 + static_cast<double>(k);
  const auto xs_npy = test::npy_raw("{'descr': '<f8', 'fortran_order': False, 'shape': (128, 128), }", byte_span(xs));
  const auto ys_npy = test::npy_raw("{'descr': '<f8', 'fortran_order': False, 'shape': (208,), }", byte_span(ys));
  test::write_vec(dir.file("test/a.npz"), make_zip({{"xs.npy", xs_npy, true}, {"ys.npy", ys_npy, true}}));
  const std::vector<float> mean(208, 2.f), sd(208, 4.f);
  write_zip(dir.file("mean.pth"), std::vector<ZipEntry>{{"archive/data.pkl", byte_span(mean)}, {"archive/data/0", byte_span(mean)}});
  write_zip(dir.file("std.pth"), std::vector<ZipEntry>{{"x/data/0", byte_span(sd)}});
  EitOptions opt;
  opt.split = "test";
  opt.cond_mode = EitCondMode::kVector;
  const EitDataset ds(dir.str(), opt);
  EXPECT_FALSE(ds.has_baseline());
  ASSERT_EQ(ds.fields().size(), 2u);
  std::vector<float> image(128 * 128), cond(208);
  void* dst[] = {image.data(), cond.data()};
  ds.read(0, dst);
  for (size_t i = 0; i < xs.size(); ++i) ASSERT_EQ(image[i], static_cast<float>(xs[i]));
  for (int k = 0; k < 208; ++k) EXPECT_FLOAT_EQ(cond[k], static_cast<float>(k) / 4.f);
}

TEST(EitDataset, FolderAndNormalisationErrors) {
  TempDir dir;
  expect_user_error([&] { EitDataset ds(dir.str()); }, {dir.file("train"), "split folder not found"});
  fs::create_directories(dir.file("train"));
  expect_user_error([&] { EitDataset ds(dir.str()); }, {dir.file("train"), "no .npz files"});
  EitOptions bad;
  bad.split = "val";
  expect_user_error([&] { EitDataset ds(dir.str(), bad); }, {dir.str(), "unknown split 'val'"});
  expect_user_error([&] { parse_eit_cond_mode("grid", "--cond-mode"); }, {"--cond-mode", "'grid'"});

  write_small(dir.str());
  fs::remove(dir.file("mean.pth"));
  expect_user_error([&] { EitDataset ds(dir.str()); }, {dir.file("mean.pth"), "not found"});
  EitOptions compute;
  compute.compute_missing_normalisation = true;
  const EitDataset computed(dir.str(), compute);
  std::vector<double> mean, sd;
  train_stats(small_spec(), mean, sd);
  for (int k = 0; k < 208; ++k) EXPECT_NEAR(computed.normalisation().mean[k], mean[k], 1e-6);

  const std::vector<float> short_mean(207, 0.f), zero_std(208, 0.f);
  write_zip(dir.file("mean.pth"), std::vector<ZipEntry>{{"mean/data/0", byte_span(short_mean)}});
  expect_user_error([&] { EitDataset ds(dir.str()); }, {dir.file("mean.pth"), "'mean/data/0'", "828 bytes", "expected 832"});
  write_zip(dir.file("mean.pth"), std::vector<ZipEntry>{{"mean/data.pkl", byte_span(short_mean)}});
  expect_user_error([&] { EitDataset ds(dir.str()); }, {dir.file("mean.pth"), "data/0", "mean/data.pkl"});
  write_zip(dir.file("mean.pth"), std::vector<ZipEntry>{{"mean/data/0", byte_span(zero_std)}});
  write_zip(dir.file("std.pth"), std::vector<ZipEntry>{{"std/data/0", byte_span(zero_std)}});
  expect_user_error([&] { EitDataset ds(dir.str()); }, {dir.file("std.pth"), "measurement 0", "> 0"});
  test::write_bytes(dir.file("std.pth"), "not a zip at all, just text");
  expect_user_error([&] { EitDataset ds(dir.str()); }, {dir.file("std.pth"), "not a valid zip archive", "PyTorch < 1.6"});
}

TEST(EitDataset, SampleErrorsNameFileAndMember) {
  TempDir dir;
  write_small(dir.str());
  const std::vector<float> img(128 * 127, 1.f), ys(208, 1.f);
  const auto good_ys = npy_bytes(std::vector<int64_t>{208, 1}, ys);
  // A later file with a wrong shape: found when read, not at open.
  test::write_vec(dir.file("train/00001.npz"),
                  make_zip({{"xs.npy", npy_bytes(std::vector<int64_t>{128, 127}, img)}, {"ys.npy", good_ys}}));
  const EitDataset ds(dir.str());
  std::vector<float> a(128 * 128), b(128 * 128), c(128 * 128);
  void* dst[] = {a.data(), b.data(), c.data()};
  ds.read(0, dst);
  expect_user_error([&] { ds.read(1, dst); },
                    {"train/00001.npz", "member 'xs'", "shape (128, 127), expected (128, 128)"});
  // TR missing in a later file although the first has it.
  const std::vector<float> full(128 * 128, 1.f);
  test::write_vec(dir.file("train/00001.npz"),
                  make_zip({{"xs.npy", npy_bytes(std::vector<int64_t>{128, 128}, full)}, {"ys.npy", good_ys}}));
  expect_user_error([&] { ds.read(1, dst); }, {"train/00001.npz", "member 'TR'", "00000.npz"});
  test::write_bytes(dir.file("train/00002.npz"), "garbage");
  expect_user_error([&] { ds.read(2, dst); }, {"train/00002.npz", "not a valid zip archive"});
  // The first file is checked at open: missing ys, wrong ys length, wrong dtype.
  test::write_vec(dir.file("train/00000.npz"), make_zip({{"xs.npy", npy_bytes(std::vector<int64_t>{128, 128}, full)}}));
  expect_user_error([&] { EitDataset d(dir.str()); }, {"train/00000.npz", "member 'ys'", "missing", "xs.npy"});
  test::write_vec(dir.file("train/00000.npz"),
                  make_zip({{"xs.npy", npy_bytes(std::vector<int64_t>{128, 128}, full)},
                            {"ys.npy", npy_bytes(std::vector<int64_t>{100, 2}, std::vector<float>(200))}}));
  expect_user_error([&] { EitDataset d(dir.str()); }, {"train/00000.npz", "member 'ys'", "(100, 2)"});
  const std::vector<int32_t> ints(208);
  test::write_vec(dir.file("train/00000.npz"),
                  make_zip({{"xs.npy", npy_bytes(std::vector<int64_t>{128, 128}, full)},
                            {"ys.npy", test::npy_raw("{'descr': '<i4', 'fortran_order': False, 'shape': (208,), }",
                                                     byte_span(ints))}}));
  expect_user_error([&] { EitDataset d(dir.str()); }, {"train/00000.npz", "member 'ys'", "'descr'", "'<i4'"});
}

TEST(EitDataset, MapModeNeeds208And128) {
  TempDir dir;
  EitWriteSpec s = small_spec();
  s.image_size = 16;
  s.measurements = 100;
  s.write_tr = false;
  write_small(dir.str(), s);
  expect_user_error([&] { EitDataset ds(dir.str()); }, {"train/00000.npz", "cond_mode 'map'", "208", "vector"});
  EitOptions opt;
  opt.cond_mode = EitCondMode::kVector;
  const EitDataset ds(dir.str(), opt);
  EXPECT_FALSE(ds.has_baseline());
  EXPECT_EQ(ds.fields()[0].per_sample, 256);
  EXPECT_EQ(ds.fields()[1].per_sample, 100);
}

TEST(EitDataset, ReadsFromSeveralThreads) {
  TempDir dir;
  EitWriteSpec s = small_spec();
  s.train = 8;
  write_small(dir.str(), s);
  const EitDataset ds(dir.str());
  const size_t n = 128 * 128;
  std::vector<std::vector<float>> want(ds.num_samples(), std::vector<float>(3 * n));
  for (uint64_t i = 0; i < ds.num_samples(); ++i) {
    void* dst[] = {want[i].data(), want[i].data() + n, want[i].data() + 2 * n};
    ds.read(i, dst);
  }
  std::vector<int> bad(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      std::vector<float> got(3 * n);
      for (int rep = 0; rep < 5; ++rep)
        for (uint64_t i = 0; i < ds.num_samples(); ++i) {
          const uint64_t j = (i + static_cast<uint64_t>(t)) % ds.num_samples();
          void* dst[] = {got.data(), got.data() + n, got.data() + 2 * n};
          ds.read(j, dst);
          bad[t] += got != want[j];
        }
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(bad[t], 0) << "thread " << t;
}

TEST(NpyArrayDataset, ReadsSamplesInAnyLayout) {
  TempDir dir;
  const int64_t N = 5, C = 2, H = 3, W = 4, D = 7;
  std::vector<float> images(N * C * H * W), conds(N * D);
  for (size_t i = 0; i < images.size(); ++i) images[i] = static_cast<float>(i) * 0.5f;
  for (size_t i = 0; i < conds.size(); ++i) conds[i] = -static_cast<float>(i);
  write_npy(dir.file("img.npy"), std::vector<int64_t>{N, C, H, W}, images);
  write_npy(dir.file("cond.npy"), std::vector<int64_t>{N, D}, conds, /*fortran_order=*/true);
  // The same images as float64 in Fortran order.
  const auto f32 = npy_bytes(std::vector<int64_t>{N, C, H, W}, images, true);
  const NpyHeader fh = parse_npy_header(f32, "f");
  std::vector<double> f64(images.size());
  for (size_t i = 0; i < f64.size(); ++i) {
    float v;
    std::memcpy(&v, f32.data() + fh.data_offset + 4 * i, 4);
    f64[i] = v;
  }
  test::write_vec(dir.file("img64.npy"),
                  test::npy_raw("{'descr': '<f8', 'fortran_order': True, 'shape': (5, 2, 3, 4), }", byte_span(f64)));
  for (const char* name : {"img.npy", "img64.npy"}) {
    const NpyArrayDataset ds(dir.file(name), dir.file("cond.npy"));
    ASSERT_EQ(ds.num_samples(), 5u);
    EXPECT_EQ(ds.channels(), 2);
    EXPECT_EQ(ds.fields()[0].per_sample, C * H * W);
    EXPECT_EQ(ds.fields()[1].per_sample, D);
    std::vector<float> img(C * H * W), cond(D);
    void* dst[] = {img.data(), cond.data()};
    for (int64_t i = 0; i < N; ++i) {
      ds.read(static_cast<uint64_t>(i), dst);
      EXPECT_TRUE(std::equal(img.begin(), img.end(), images.begin() + i * C * H * W)) << name << " sample " << i;
      EXPECT_TRUE(std::equal(cond.begin(), cond.end(), conds.begin() + i * D)) << name << " sample " << i;
    }
  }
  // Several threads at once.
  const NpyArrayDataset ds(dir.file("img64.npy"), dir.file("cond.npy"));
  std::vector<int> bad(3, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t)
    threads.emplace_back([&, t] {
      std::vector<float> img(C * H * W), cond(D);
      void* dst[] = {img.data(), cond.data()};
      for (int rep = 0; rep < 200; ++rep) {
        const int64_t i = (rep + t) % N;
        ds.read(static_cast<uint64_t>(i), dst);
        bad[t] += !std::equal(img.begin(), img.end(), images.begin() + i * C * H * W);
      }
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < 3; ++t) EXPECT_EQ(bad[t], 0);
}

TEST(NpyArrayDataset, Errors) {
  TempDir dir;
  write_npy(dir.file("img.npy"), std::vector<int64_t>{4, 2, 2}, std::vector<float>(16));
  write_npy(dir.file("cond.npy"), std::vector<int64_t>{3, 5}, std::vector<float>(15));
  write_npy(dir.file("flat.npy"), std::vector<int64_t>{16}, std::vector<float>(16));
  expect_user_error([&] { NpyArrayDataset ds(dir.file("img.npy"), dir.file("cond.npy")); },
                    {dir.file("img.npy"), "4 images", dir.file("cond.npy"), "3 conditions", "'shape'"});
  expect_user_error([&] { NpyArrayDataset ds(dir.file("flat.npy"), dir.file("cond.npy")); },
                    {dir.file("flat.npy"), "'shape'", "(16,)", "(N, H, W)"});
  expect_user_error([&] { NpyArrayDataset ds(dir.file("img.npy"), dir.file("flat.npy")); },
                    {dir.file("flat.npy"), "'shape'", "(N, D)"});
  expect_user_error([&] { NpyArrayDataset ds(dir.file("img.npy"), dir.file("none.npy")); },
                    {dir.file("none.npy"), "cannot open"});
}

}  // namespace
}  // namespace ft
