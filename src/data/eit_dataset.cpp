// EitDataset: CDEIT's .npz sample folders and normalisation files; see eit_dataset.h.
#include "data/eit_dataset.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "data/npy.h"
#include "data/prepared_folder.h"
#include "data/zip_archive.h"

namespace ft {
namespace fs = std::filesystem;
namespace {

// The names of a zip's members, for "the file has: ..." in errors.
std::string member_list(const ZipArchive& z) {
  std::string s;
  for (const ZipMember& m : z.members()) s += (s.empty() ? "" : ", ") + m.name;
  return s.empty() ? "no members" : s;
}

// Member `key` of a sample file (numpy names it key.npy): its header and data, or false
// when the file has no such member and it is optional.
struct Member {
  NpyHeader h;
  std::span<const uint8_t> data;   // after the header
  std::vector<uint8_t> scratch;    // a DEFLATE member, inflated
};

bool open_member(const ZipArchive& z, const std::string& key, bool required, Member& out) {
  const ZipMember* m = z.find(key + ".npy");
  if (!m) {
    FT_USER_CHECK(!required, z.label(), ": member '", key, "' (", key, ".npy) is missing; the file has: ", member_list(z),
                  " (a CDEIT sample has xs, ys and optionally TR, xs_gn)");
    return false;
  }
  const std::span<const uint8_t> bytes = z.view(*m, out.scratch);
  out.h = parse_npy_header(bytes, z.label() + ": member '" + key + "'");
  out.data = bytes.subspan(out.h.data_offset);
  return true;
}

// An image member: rank 2, and when h/w are known (> 0) exactly h x w.
void check_image(const ZipArchive& z, const std::string& key, const NpyHeader& h, int64_t height, int64_t width) {
  const std::vector<int64_t> want = {height, width};
  FT_USER_CHECK(h.shape.size() == 2 && (height == 0 || h.shape == want), z.label(), ": member '", key, "': shape ",
                shape_str(h.shape), ", expected ", height == 0 ? "an image (H, W)" : shape_str(want));
  FT_USER_CHECK(h.shape[0] > 0 && h.shape[1] > 0, z.label(), ": member '", key, "': empty image ", shape_str(h.shape));
}

// The voltages member: d elements as (d,), (d, 1) or (1, d); any d > 0 when d == 0.
int64_t check_voltages(const ZipArchive& z, const NpyHeader& h, int64_t d) {
  const int64_t n = h.count();
  const auto& s = h.shape;
  const bool vec = s.size() == 1 || (s.size() == 2 && (s[0] == 1 || s[1] == 1));
  FT_USER_CHECK(vec && n > 0 && (d == 0 || n == d), z.label(), ": member 'ys': shape ", shape_str(s), ", expected ",
                d == 0 ? std::string("a vector of voltages (D, 1)") : shape_str(std::vector<int64_t>{d, 1}));
  return n;
}

std::vector<std::string> list_npz(const std::string& folder) {
  std::error_code ec;
  FT_USER_CHECK(fs::is_directory(folder, ec), folder,
                ": split folder not found (a CDEIT data folder has train/, valid/ and test/ subfolders of .npz files)");
  std::vector<std::string> files;
  for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec))
    if (it->path().extension() == ".npz") files.push_back(it->path().string());
  FT_USER_CHECK(!ec, folder, ": cannot list split folder: ", ec.message());
  FT_USER_CHECK(!files.empty(), folder, ": no .npz files in this split folder (a CDEIT split holds one .npz per sample)");
  std::sort(files.begin(), files.end());
  return files;
}

void check_std(const std::string& where, std::span<const float> std) {
  for (size_t i = 0; i < std.size(); ++i)
    FT_USER_CHECK(std::isfinite(std[i]) && std[i] > 0, where, ": std of measurement ", i, " is ", std[i],
                  " (every std must be finite and > 0: voltages are divided by it)");
}

}  // namespace

EitCondMode parse_eit_cond_mode(const std::string& s, const std::string& flag) {
  if (s == "map") return EitCondMode::kMap;
  if (s == "vector") return EitCondMode::kVector;
  throw UserError(flag + ": unknown condition mode '" + s +
                  "' (map: CDEIT's 16 x 16 voltage map upsampled to the image; vector: the voltages as they are)");
}

std::vector<float> read_pth_floats(const std::string& path, int64_t expected_count) {
  const ZipArchive z = [&] {
    try {
      return ZipArchive::open(path, "normalisation (.pth)");
    } catch (const UserError& e) {
      // torch.save wrote a pickle stream, not a zip, before PyTorch 1.6.
      if (std::string(e.what()).find("not a valid zip archive") == std::string::npos) throw;
      throw UserError(std::string(e.what()) +
                      " (a .pth file from PyTorch < 1.6 has the legacy format: re-save it with "
                      "torch.save in a recent PyTorch)");
    }
  }();
  const ZipMember* m = z.find_suffix("data/0");
  FT_USER_CHECK(m, path, ": no member ending in 'data/0' (the tensor's storage in a torch.save file); the file has: ",
                member_list(z));
  const uint64_t want = static_cast<uint64_t>(expected_count) * 4;
  FT_USER_CHECK(m->size == want, path, ": member '", m->name, "' is ", m->size, " bytes, expected ", want, " (",
                expected_count, " float32 values, one per measurement)");
  std::vector<uint8_t> scratch;
  const std::span<const uint8_t> bytes = z.view(*m, scratch);
  std::vector<float> out(static_cast<size_t>(expected_count));
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

EitNormalisation load_eit_normalisation(const std::string& data_dir, int64_t measurements) {
  EitNormalisation n;
  const std::string mean = (fs::path(data_dir) / kEitMeanFile).string(), std = (fs::path(data_dir) / kEitStdFile).string();
  n.mean = read_pth_floats(mean, measurements);
  n.std = read_pth_floats(std, measurements);
  check_std(std, n.std);
  return n;
}

EitNormalisation compute_eit_normalisation(const std::string& split_folder) {
  const std::vector<std::string> files = list_npz(split_folder);
  FT_USER_CHECK(files.size() >= 2, split_folder, ": ", files.size(),
                " sample file; computing a std needs at least 2");
  std::vector<double> mean, m2;  // Welford, per measurement
  std::vector<float> v;
  int64_t d = 0;
  for (size_t i = 0; i < files.size(); ++i) {
    const ZipArchive z = ZipArchive::open(files[i], "npz sample");
    Member ys;
    open_member(z, "ys", true, ys);
    d = check_voltages(z, ys.h, d);
    v.resize(static_cast<size_t>(d));
    mean.resize(v.size(), 0.0);
    m2.resize(v.size(), 0.0);
    npy_copy_c_order(ys.h, ys.data.data(), -1, v.data());
    for (size_t k = 0; k < v.size(); ++k) {
      const double delta = v[k] - mean[k];
      mean[k] += delta / static_cast<double>(i + 1);
      m2[k] += delta * (v[k] - mean[k]);
    }
  }
  EitNormalisation n;
  for (size_t k = 0; k < mean.size(); ++k) {
    n.mean.push_back(static_cast<float>(mean[k]));
    n.std.push_back(static_cast<float>(std::sqrt(m2[k] / static_cast<double>(files.size() - 1))));
  }
  check_std(split_folder + " (normalisation computed from its ys)", n.std);
  return n;
}

int eit_map_column(int k) {
  FT_CHECK(k >= 0 && k < kEitMeasurements, "measurement ", k);
  const int r = k / kEitPerRow;
  int j = k % kEitPerRow;
  for (int c = 0; c < kEitElectrodes; ++c) {
    const bool skipped = c == (r + kEitElectrodes - 1) % kEitElectrodes || c == r || c == (r + 1) % kEitElectrodes;
    if (!skipped && j-- == 0) return c;
  }
  FT_CHECK(false, "unreachable");
  return -1;
}

void eit_condition_map(std::span<const float> v_norm, float* out) {
  FT_CHECK(static_cast<int64_t>(v_norm.size()) == kEitMeasurements, "condition map of ", v_norm.size(), " voltages");
  float grid[kEitElectrodes][kEitElectrodes] = {};
  for (int k = 0; k < kEitMeasurements; ++k) grid[k / kEitPerRow][eit_map_column(k)] = v_norm[k];
  for (int64_t y = 0; y < kEitImageSize; ++y)
    for (int64_t x = 0; x < kEitImageSize; ++x) out[y * kEitImageSize + x] = grid[y / kEitUpsample][x / kEitUpsample];
}

EitDataset::EitDataset(const std::string& data_dir, const EitOptions& options)
    : folder_((fs::path(data_dir) / options.split).string()), opt_(options) {
  FT_USER_CHECK(options.split == "train" || options.split == "valid" || options.split == "test", data_dir,
                ": unknown split '", options.split, "' (train, valid or test)");
  files_ = list_npz(folder_);
  // Shapes from the first file; the other files must match them.
  {
    const ZipArchive z = ZipArchive::open(files_[0], "npz sample");
    Member m;
    open_member(z, "xs", true, m);
    check_image(z, "xs", m.h, 0, 0);
    height_ = m.h.shape[0];
    width_ = m.h.shape[1];
    open_member(z, "ys", true, m);
    measurements_ = check_voltages(z, m.h, 0);
    has_baseline_ = z.find("TR.npy") != nullptr;
    has_gn_ = z.find("xs_gn.npy") != nullptr;
  }
  if (opt_.cond_mode == EitCondMode::kMap)
    FT_USER_CHECK(measurements_ == kEitMeasurements && height_ == kEitImageSize && width_ == kEitImageSize, files_[0],
                  ": cond_mode 'map' (CDEIT's 16 x 16 voltage map upsampled x8) needs ", kEitMeasurements,
                  " measurements and a ", kEitImageSize, " x ", kEitImageSize, " image, this file has ",
                  measurements_, " and ", height_, " x ", width_, " (use cond_mode 'vector')");

  const fs::path mean = fs::path(data_dir) / kEitMeanFile, std = fs::path(data_dir) / kEitStdFile;
  std::error_code ec;
  const bool have_files = fs::exists(mean, ec) && fs::exists(std, ec);
  if (have_files || !opt_.compute_missing_normalisation) {
    // compute_missing_normalisation is a library option (no flag sets it): the message says
    // what a user can do. write_eit_folder writes the statistics last, so a folder of its
    // without them is one whose preparation did not finish.
    FT_USER_CHECK(have_files, (fs::exists(mean, ec) ? std : mean).string(),
                  ": normalisation file not found. A folder written by `fittrain prepare --synthetic eit` gets "
                  "mean.pth and std.pth last, so without them its preparation did not finish: run that prepare "
                  "command again with --out ", data_dir,
                  " --overwrite. A CDEIT data folder from elsewhere needs the mean.pth and std.pth that come with "
                  "it (the per-measurement mean and std of the train split's voltages), next to train/ valid/ test/");
    norm_ = load_eit_normalisation(data_dir, measurements_);
  } else {
    norm_ = compute_eit_normalisation((fs::path(data_dir) / "train").string());
    FT_USER_CHECK(static_cast<int64_t>(norm_.mean.size()) == measurements_, data_dir, ": train/ has ",
                  norm_.mean.size(), " measurements per sample but ", files_[0], " has ", measurements_);
  }
  // The first file, read in full: a broken member fails now rather than at some step.
  std::vector<float> image(static_cast<size_t>(height_ * width_)), base(image.size()), gn(image.size()),
      v(static_cast<size_t>(measurements_));
  read_arrays(0, image.data(), base.data(), gn.data(), v.data());
}

std::vector<FieldSpec> EitDataset::fields() const {
  const int64_t hw = height_ * width_;
  std::vector<FieldSpec> f = {{"image", DType::f32, hw},
                              {"cond", DType::f32, opt_.cond_mode == EitCondMode::kMap ? hw : measurements_}};
  if (has_baseline_) f.push_back({"baseline", DType::f32, hw});
  if (has_gn_) f.push_back({"baseline_gn", DType::f32, hw});
  if (opt_.voltages_field) f.push_back({"voltages", DType::f32, measurements_});
  return f;
}

void EitDataset::read_arrays(uint64_t idx, float* image, float* baseline, float* gn, float* v_norm) const {
  FT_CHECK(idx < files_.size(), "sample ", idx, " of ", files_.size());
  const ZipArchive z = ZipArchive::open(files_[idx], "npz sample");
  Member m;
  if (image) {
    open_member(z, "xs", true, m);
    check_image(z, "xs", m.h, height_, width_);
    npy_copy_c_order(m.h, m.data.data(), -1, image);
  }
  if (baseline && has_baseline_) {
    FT_USER_CHECK(open_member(z, "TR", false, m), z.label(), ": member 'TR' (TR.npy) is missing, but ", files_[0],
                  " has one, so every file of the split needs it; the file has: ", member_list(z));
    check_image(z, "TR", m.h, height_, width_);
    npy_copy_c_order(m.h, m.data.data(), -1, baseline);
  }
  if (gn && has_gn_) {
    FT_USER_CHECK(open_member(z, "xs_gn", false, m), z.label(), ": member 'xs_gn' (xs_gn.npy) is missing, but ",
                  files_[0], " has one, so every file of the split needs it; the file has: ", member_list(z));
    check_image(z, "xs_gn", m.h, height_, width_);
    npy_copy_c_order(m.h, m.data.data(), -1, gn);
  }
  if (v_norm) {
    open_member(z, "ys", true, m);
    check_voltages(z, m.h, measurements_);
    npy_copy_c_order(m.h, m.data.data(), -1, v_norm);
    for (int64_t k = 0; k < measurements_; ++k) v_norm[k] = (v_norm[k] - norm_.mean[k]) / norm_.std[k];
  }
}

void EitDataset::read(uint64_t idx, std::span<void* const> dst) const {
  auto* image = static_cast<float*>(dst[0]);
  auto* cond = static_cast<float*>(dst[1]);
  size_t next = 2;
  float* baseline = has_baseline_ ? static_cast<float*>(dst[next++]) : nullptr;
  float* gn = has_gn_ ? static_cast<float*>(dst[next++]) : nullptr;
  float* voltages = opt_.voltages_field ? static_cast<float*>(dst[next++]) : nullptr;
  FT_CHECK(dst.size() == next, "EitDataset::read: ", dst.size(), " destinations for ", next, " fields");
  if (opt_.cond_mode == EitCondMode::kVector) {
    read_arrays(idx, image, baseline, gn, cond);
    if (voltages) std::copy(cond, cond + measurements_, voltages);
    return;
  }
  std::vector<float> v(static_cast<size_t>(measurements_));
  read_arrays(idx, image, baseline, gn, v.data());
  eit_condition_map(v, cond);
  if (voltages) std::copy(v.begin(), v.end(), voltages);
}

}  // namespace ft
