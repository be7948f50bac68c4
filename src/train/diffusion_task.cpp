#include "train/diffusion_task.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "core/rng.h"
#include "data/eit_dataset.h"
#include "data/npy_dataset.h"
#include "models/dit_config.h"

namespace ft {

namespace fs = std::filesystem;

// ---- the diffusion fields ------------------------------------------------------------------------

DiffusionSource::DiffusionSource(std::unique_ptr<SampleSource> base, bool with_cond, bool train, uint64_t seed)
    : base_(std::move(base)), base_fields_(base_->fields()), train_(train), seed_(seed) {
  for (const FieldSpec& f : base_fields_) {
    const bool keep = f.name == "image" || (with_cond && f.name == "cond");
    out_of_base_.push_back(keep ? static_cast<int>(fields_.size()) : -1);
    if (keep) fields_.push_back(f);
  }
  FT_CHECK(!fields_.empty() && fields_[0].name == "image", "diffusion data without an image field");
  fields_.push_back(FieldSpec{"t", DType::i32, 1});
  fields_.push_back(FieldSpec{"noise_key", DType::i32, 1});
}

void DiffusionSource::draw(uint64_t idx, uint64_t epoch, int32_t* t, int32_t* key) const {
  // splitmix64 chained over (seed, sample, epoch): independent draws per visit, from any thread
  uint64_t x = train_ ? seed_ : kEvalSeed;
  uint64_t h = splitmix64(x);
  x = h ^ (idx * 0xD1B54A32D192ED03ull);
  h = splitmix64(x);
  x = h ^ ((train_ ? epoch : 0) * 0xABC98388FB8FAC03ull);
  const uint64_t r = splitmix64(x);
  *t = static_cast<int32_t>(r % static_cast<uint64_t>(kDiffusionSteps));  // bias ~1e-16
  *key = static_cast<int32_t>(static_cast<uint32_t>(r >> 32));
}

void DiffusionSource::read_visit(uint64_t idx, uint64_t epoch, std::span<void* const> dst) const {
  FT_CHECK(dst.size() == fields_.size(), "diffusion sample with ", dst.size(), " fields");
  // Fields the model does not read land in scratch (a sample is small: one image).
  std::vector<std::vector<uint8_t>> scratch;
  std::vector<void*> base_dst(base_fields_.size());
  for (size_t i = 0; i < base_fields_.size(); ++i) {
    if (out_of_base_[i] >= 0) {
      base_dst[i] = dst[static_cast<size_t>(out_of_base_[i])];
    } else {
      scratch.emplace_back(static_cast<size_t>(base_fields_[i].per_sample) * dtype_size(base_fields_[i].dtype));
      base_dst[i] = scratch.back().data();
    }
  }
  base_->read(idx, base_dst);
  draw(idx, epoch, static_cast<int32_t*>(dst[dst.size() - 2]), static_cast<int32_t*>(dst[dst.size() - 1]));
}

// ---- the task ------------------------------------------------------------------------------------

namespace {

struct ModelShape {
  int64_t image = 0, channels = 1, cond_channels = 0, cond_dim = 0;
};

// "IMAGES.npy,CONDS.npy" -> the two paths; empty when `path` is not that.
std::vector<std::string> npy_pair(const std::string& path) {
  const size_t comma = path.find(',');
  if (comma == std::string::npos) return {};
  return {path.substr(0, comma), path.substr(comma + 1)};
}

std::unique_ptr<SampleSource> open_npy(const std::string& path, const std::string& flag, const ModelShape& m) {
  const std::vector<std::string> p = npy_pair(path);
  FT_USER_CHECK(p.size() == 2 && !p[0].empty() && !p[1].empty() && p[1].find(',') == std::string::npos, flag, " ",
                path, ": give an EIT folder or two .npy files as IMAGES.npy,CONDS.npy");
  for (const std::string& f : p) FT_USER_CHECK(fs::is_regular_file(f), flag, " ", path, ": no such file ", f);
  auto ds = std::make_unique<NpyArrayDataset>(p[0], p[1]);
  FT_USER_CHECK(ds->height() == m.image && ds->width() == m.image, flag, " ", p[0], " holds ", ds->height(), "x",
                ds->width(), " images but the model's --image-size is ", m.image);
  FT_USER_CHECK(ds->channels() == m.channels, flag, " ", p[0], " holds images of ", ds->channels(),
                " channels but the model reads ", m.channels);
  const int64_t want = m.cond_channels > 0 ? m.cond_channels * m.image * m.image : m.cond_dim;
  FT_USER_CHECK(want == 0 || ds->cond_dim() == want, flag, " ", p[1], " holds conditions of ", ds->cond_dim(),
                " values but the model's condition takes ", want,
                m.cond_channels > 0 ? " (a map: --cond channel)" : " (a vector: --cond vector)");
  return ds;
}

std::unique_ptr<SampleSource> open_eit(const std::string& dir, const std::string& split, const std::string& flag,
                                       const ModelShape& m) {
  FT_USER_CHECK(m.channels == 1, flag, " ", dir, ": EIT images have one channel, the model reads ", m.channels);
  FT_USER_CHECK(m.cond_channels <= 1, flag, " ", dir, ": the EIT condition map is one channel, the model reads ",
                m.cond_channels);
  EitOptions o;
  o.split = split;
  o.cond_mode = m.cond_channels > 0 ? EitCondMode::kMap : EitCondMode::kVector;
  std::unique_ptr<EitDataset> ds;
  try {
    ds = std::make_unique<EitDataset>(dir, o);
  } catch (const UserError& e) {
    throw UserError(flag + ": " + e.what() +
                    (m.cond_channels > 0 ? " [the model reads the condition as a map (--cond channel), which needs "
                                           "CDEIT's 208 voltages and 128x128 images; --cond vector takes any]"
                                         : ""));
  }
  FT_USER_CHECK(ds->height() == m.image && ds->width() == m.image, flag, " ", dir, ": the ", split,
                " images are ", ds->height(), "x", ds->width(), " but the model's --image-size is ", m.image,
                " (pass --image-size ", ds->height(), ")");
  FT_USER_CHECK(m.cond_dim == 0 || ds->measurements() == m.cond_dim, flag, " ", dir, ": the samples carry ",
                ds->measurements(), " voltages but the model's condition vector takes ", m.cond_dim);
  return ds;
}

bool has_samples(const std::string& folder) {
  std::error_code ec;
  for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec))
    if (it->path().extension() == ".npz") return true;
  return false;
}

}  // namespace

DiffusionTask::DiffusionTask(const RunConfig& rc, const nlohmann::json& c, bool need_train) {
  ModelShape m;
  m.image = c.at("image").get<int64_t>();
  m.channels = c.at("in_channels").get<int64_t>();
  m.cond_channels = c.at("cond_channels").get<int64_t>();
  m.cond_dim = c.at("cond_dim").get<int64_t>();
  const bool with_cond = m.cond_channels > 0 || m.cond_dim > 0;
  image_ = m.image;
  channels_ = m.channels;
  sample_steps_ = rc.sample_steps;
  eta_ = rc.eta;
  eval_images_ = rc.eval_images;
  const std::string flag = "--data-path";
  FT_USER_CHECK(!rc.data_path.empty(), "--task diffusion needs ", flag,
                ": an EIT folder (train/ valid/ test/, mean.pth, std.pth; `fittrain prepare --synthetic eit --out "
                "DIR` makes one) or IMAGES.npy,CONDS.npy");
  std::unique_ptr<SampleSource> train, val;
  std::error_code ec;
  if (fs::is_directory(rc.data_path, ec)) {
    FT_USER_CHECK(rc.val_data_path.empty(), "--val-data-path does not apply to an EIT folder (its valid/ is used)");
    const std::string valid = (fs::path(rc.data_path) / "valid").string();
    const std::string test = (fs::path(rc.data_path) / "test").string();
    if (need_train) {
      train = open_eit(rc.data_path, "train", flag, m);
      if (has_samples(valid)) val = open_eit(rc.data_path, "valid", flag, m);
    } else {
      const bool t = has_samples(test);
      FT_USER_CHECK(t || has_samples(valid), flag, " ", rc.data_path, ": no test/ or valid/ samples to evaluate");
      val = open_eit(rc.data_path, t ? "test" : "valid", flag, m);
      test_split_ = t ? "test split (test/)" : "validation split (valid/)";
    }
    description_ = rc.data_path + " (EIT folder, " + std::to_string(m.image) + "x" + std::to_string(m.image) +
                   (m.cond_channels > 0 ? ", voltage map)" : m.cond_dim > 0 ? ", voltage vector)" : ", unconditional)");
  } else {
    FT_USER_CHECK(!npy_pair(rc.data_path).empty() || fs::exists(rc.data_path, ec), flag, " ", rc.data_path,
                  ": no such folder");
    if (need_train) train = open_npy(rc.data_path, flag, m);
    if (!rc.val_data_path.empty()) val = open_npy(rc.val_data_path, "--val-data-path", m);
    else if (!need_train) val = open_npy(rc.data_path, flag, m);
    test_split_ = rc.val_data_path.empty() ? "data (--data-path; no --val-data-path)" : "validation data (--val-data-path)";
    description_ = rc.data_path + " (.npy images and conditions)";
  }
  if (train) train_ = std::make_unique<DiffusionSource>(std::move(train), with_cond, true, rc.global_seed);
  if (val) val_ = std::make_unique<DiffusionSource>(std::move(val), with_cond, false, rc.global_seed);
}

const SampleSource& DiffusionTask::train_data() const {
  FT_CHECK(train_, "--task diffusion: no train data opened (an evaluation-only run)");
  return *train_;
}

}  // namespace ft
