// write_eit_folder: a CDEIT-layout data folder from a sample callback; see eit_dataset.h. The
// files look like CDEIT's own (Fortran-order images, ys as D x 1), so that the synthetic set
// goes through the same reader paths as real data.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "core/error.h"
#include "data/eit_dataset.h"
#include "data/npy.h"
#include "data/prepared_folder.h"
#include "data/zip_archive.h"

namespace ft {
namespace fs = std::filesystem;
namespace {

void write_pth(const std::string& path, const std::string& top, const std::vector<float>& values) {
  const std::string version = "3\n";  // what torch.save writes in <top>/version
  const ZipEntry entries[] = {
      {top + "/version", {reinterpret_cast<const uint8_t*>(version.data()), version.size()}},
      {top + "/data/0", {reinterpret_cast<const uint8_t*>(values.data()), values.size() * sizeof(float)}}};
  write_zip(path, entries);
}

}  // namespace

void write_eit_folder(const std::string& dir, const EitWriteSpec& spec, const EitSampleFn& fill) {
  FT_USER_CHECK(spec.train >= 2 && spec.valid >= 0 && spec.test >= 0, dir, ": synthetic EIT set of ", spec.train,
                "/", spec.valid, "/", spec.test,
                " train/valid/test samples: train needs at least 2 (its voltages' std normalises them)");
  FT_USER_CHECK(spec.image_size > 0 && spec.image_size <= 8192 && spec.measurements > 0 &&
                    spec.measurements <= (int64_t{1} << 24),
                dir, ": image size ", spec.image_size, " and ", spec.measurements,
                " measurements: each must be > 0 (and at most 8192 and 2^24)");
  const int64_t hw = spec.image_size * spec.image_size, d = spec.measurements;
  const std::vector<int64_t> image_shape = {spec.image_size, spec.image_size}, ys_shape = {d, 1};
  const char* names[3] = {"train", "valid", "test"};
  const int64_t counts[3] = {spec.train, spec.valid, spec.test};
  std::vector<double> mean(static_cast<size_t>(d), 0.0), m2(mean.size(), 0.0);  // Welford over train ys
  // Every .npz already in a split folder is checked before anything changes: one this run would
  // not overwrite would join the set unnoticed. An earlier set's numbered samples beyond this
  // set's counts are removed when asked (spec.replace_earlier, prepare's --overwrite), refused
  // otherwise; any other .npz is never touched, so it is always refused.
  std::vector<fs::path> stale;
  for (int split = 0; split < 3; ++split) {
    const fs::path folder = fs::path(dir) / names[split];
    std::error_code ec;
    // A split folder that links elsewhere (a data set shared by its path) would have that
    // set's samples rewritten, and with --overwrite removed: the writer owns only real folders.
    FT_USER_CHECK(!fs::is_symlink(folder, ec), folder.string(), ": a symbolic link (to ", fs::read_symlink(folder, ec).string(),
                  "); a synthetic set is written only into folders of its own: write into a new or empty --out");
    for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      bool temp = false;
      const int64_t index = eit_sample_index(name, &temp);
      if (index < 0) {
        FT_USER_CHECK(it->path().extension() != ".npz", it->path().string(),
                      ": an .npz that is not one of fittrain's numbered samples (NNNNN.npz), which this synthetic "
                      "set would not replace and --overwrite does not remove; move it away or write into a new or "
                      "empty folder");
        continue;
      }
      if (index < counts[split]) continue;  // rewritten below (a temporary one is replaced too)
      // An unfinished one (.tmp) is never read as a sample: left alone unless replacing.
      FT_USER_CHECK(spec.replace_earlier || temp, it->path().string(), ": a sample of an earlier set that this set (",
                    counts[split], " ", names[split],
                    " samples) would not replace: pass --overwrite to remove the earlier set's samples, or write "
                    "into a new or empty folder");
      if (!spec.replace_earlier) continue;
      std::error_code tec;
      FT_USER_CHECK(it->is_regular_file(tec) || it->is_symlink(tec), it->path().string(),
                    ": named like a sample but not a file, so --overwrite does not remove it; move it away or write "
                    "into a new or empty folder");
      stale.push_back(it->path());
    }
    FT_USER_CHECK(!ec || ec == std::errc::no_such_file_or_directory, folder.string(), ": cannot list: ", ec.message());
  }
  // A set being rewritten has no statistics until it is whole again (they are written last):
  // an interrupted run leaves a folder that training refuses (no mean.pth), never an earlier
  // set's statistics over a mix of its samples and new ones. The earlier set's extra samples
  // go after them, so a run cut short while removing them is refused for training the same way.
  for (const char* f : {kEitMeanFile, kEitStdFile}) fs::remove(fs::path(dir) / f);
  for (const fs::path& p : stale) {
    std::error_code ec;
    fs::remove(p, ec);
    FT_USER_CHECK(!ec, p.string(), ": cannot remove this sample of the earlier set (--overwrite): ", ec.message());
  }
  EitSampleArrays a;
  for (int split = 0; split < 3; ++split) {
    const fs::path folder = fs::path(dir) / names[split];
    std::error_code ec;
    fs::create_directories(folder, ec);
    FT_USER_CHECK(!ec, folder.string(), ": cannot create folder: ", ec.message());
    for (int64_t i = 0; i < counts[split]; ++i) {
      a.xs.assign(static_cast<size_t>(hw), 0.f);
      a.ys.assign(static_cast<size_t>(d), 0.f);
      a.tr.assign(spec.write_tr ? static_cast<size_t>(hw) : 0, 0.f);
      a.gn.assign(spec.write_gn ? static_cast<size_t>(hw) : 0, 0.f);
      fill(split, i, a);
      FT_CHECK(static_cast<int64_t>(a.xs.size()) == hw && static_cast<int64_t>(a.ys.size()) == d &&
                   a.tr.size() == (spec.write_tr ? static_cast<size_t>(hw) : 0) &&
                   a.gn.size() == (spec.write_gn ? static_cast<size_t>(hw) : 0),
               "EIT sample callback changed the array sizes (", a.xs.size(), ", ", a.ys.size(), ", ", a.tr.size(),
               ", ", a.gn.size(), ")");
      if (split == 0) {
        for (size_t k = 0; k < mean.size(); ++k) {
          const double delta = a.ys[k] - mean[k];
          mean[k] += delta / static_cast<double>(i + 1);
          m2[k] += delta * (a.ys[k] - mean[k]);
        }
      }
      const std::vector<uint8_t> xs = npy_bytes(image_shape, a.xs, true), ys = npy_bytes(ys_shape, a.ys);
      std::vector<uint8_t> tr, gn;
      std::vector<ZipEntry> entries = {{"xs.npy", xs}, {"ys.npy", ys}};
      if (spec.write_tr) {
        tr = npy_bytes(image_shape, a.tr, true);
        entries.push_back({"TR.npy", tr});
      }
      if (spec.write_gn) {
        gn = npy_bytes(image_shape, a.gn, true);
        entries.push_back({"xs_gn.npy", gn});
      }
      char name[32];
      std::snprintf(name, sizeof name, "%05lld.npz", static_cast<long long>(i));
      write_zip((folder / name).string(), entries);
    }
  }
  std::vector<float> mean_f(mean.size()), std_f(mean.size());
  for (size_t k = 0; k < mean.size(); ++k) {
    mean_f[k] = static_cast<float>(mean[k]);
    std_f[k] = static_cast<float>(std::sqrt(m2[k] / static_cast<double>(spec.train - 1)));
  }
  write_pth((fs::path(dir) / kEitMeanFile).string(), "mean", mean_f);
  write_pth((fs::path(dir) / kEitStdFile).string(), "std", std_f);
}

}  // namespace ft
