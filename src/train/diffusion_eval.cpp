// DiffusionTask's evaluation metrics and `fittrain sample`: DDIM reconstructions (train/ddim.h)
// of the first images of a split, scored against the ground truth and beside the data's
// Tikhonov reconstruction (train/image_metrics.h), or written as PNG and .npy files.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <numeric>

#include "core/error.h"
#include "data/npy.h"
#include "train/ddim.h"
#include "train/diffusion_task.h"
#include "train/image_metrics.h"
#include "train/png.h"
#include "train/runtime.h"

namespace ft {

namespace fs = std::filesystem;

namespace {

// The first n samples' ground truth, condition and baselines (TR, xs_gn), read from the source
// under the diffusion fields (which drops the baselines).
struct Images {
  int64_t n = 0;
  std::vector<float> truth, cond, baseline, gn;  // a baseline empty: the data has none
};

Images read_images(const SampleSource& data, int64_t n, int64_t cond_elems) {
  const auto* ds = dynamic_cast<const DiffusionSource*>(&data);
  FT_CHECK(ds, "diffusion metrics on a source without the diffusion fields");
  const SampleSource& base = ds->base();
  const std::vector<FieldSpec> fields = base.fields();
  Images im;
  im.n = std::min<int64_t>(n, static_cast<int64_t>(base.num_samples()));
  std::vector<std::vector<char>> buf(fields.size());
  std::vector<void*> dst(fields.size());
  for (size_t f = 0; f < fields.size(); ++f) {
    buf[f].resize(fields[f].sample_bytes());
    dst[f] = buf[f].data();
  }
  for (int64_t i = 0; i < im.n; ++i) {
    base.read(static_cast<uint64_t>(i), dst);
    for (size_t f = 0; f < fields.size(); ++f) {
      const FieldSpec& fs = fields[f];
      std::vector<float>* to = fs.name == "image"                       ? &im.truth
                               : fs.name == "cond" && cond_elems > 0    ? &im.cond
                               : fs.name == "baseline"                  ? &im.baseline
                               : fs.name == "baseline_gn"               ? &im.gn
                                                                        : nullptr;
      if (!to) continue;
      FT_CHECK(fs.dtype == DType::f32, "diffusion field ", fs.name, " is ", dtype_name(fs.dtype));
      const auto* p = reinterpret_cast<const float*>(buf[f].data());
      to->insert(to->end(), p, p + fs.per_sample);
    }
  }
  FT_CHECK(cond_elems == 0 || static_cast<int64_t>(im.cond.size()) == im.n * cond_elems,
           "diffusion data: the condition has ", im.cond.size(), " values for ", im.n, " images, the model takes ",
           cond_elems, " each");
  return im;
}

// RMSE, PSNR and SSIM over images [n*C, H, W] (SSIM only from 11 x 11 up: its window), summed
// over the images (sums(): one rank's part of an evaluation) or their means.
struct Scores {
  double rmse = 0, psnr = 0, ssim = 0;
  bool has_ssim = false;
};

Scores score_sums(std::span<const float> recon, std::span<const float> truth, int64_t side, double* images) {
  const size_t hw = static_cast<size_t>(side * side);
  const size_t count = truth.size() / hw;
  Scores s;
  s.has_ssim = side >= 11;
  for (size_t k = 0; k < count; ++k) {
    std::span<const float> r = recon.subspan(k * hw, hw), t = truth.subspan(k * hw, hw);
    const double e = image_rmse(r, t);
    s.rmse += e;
    s.psnr += psnr_from_rmse(e);
    if (s.has_ssim) s.ssim += image_ssim(r, t, static_cast<int>(side), static_cast<int>(side));
  }
  *images = static_cast<double>(count);
  return s;
}

Scores mean_of(Scores s, double images) {
  if (images > 0) s.rmse /= images, s.psnr /= images, s.ssim /= images;
  return s;
}

Scores score(std::span<const float> recon, std::span<const float> truth, int64_t side) {
  double images = 0;
  const Scores s = score_sums(recon, truth, side, &images);
  return mean_of(s, images);
}

void add_scores(std::vector<Metric>& out, const std::string& prefix, const Scores& s) {
  out.push_back({prefix + "rmse", s.rmse});
  out.push_back({prefix + "psnr", s.psnr});
  if (s.has_ssim) out.push_back({prefix + "ssim", s.ssim});
}

Denoiser& denoiser_of(ModelRuntime& rt, const char* what) {
  auto* d = dynamic_cast<Denoiser*>(&rt.model());
  FT_USER_CHECK(d, what, ": model family ", rt.model().family(), " does not denoise images (--model dit-*)");
  return *d;
}

// A grayscale image in [-1, 1] (v / 2 + 0.5, as the metrics) as 0..255 pixels at (x0, 0).
void draw_gray(Image& img, const float* v, int64_t side, int x0) {
  for (int64_t y = 0; y < side; ++y)
    for (int64_t x = 0; x < side; ++x) {
      const double u = std::clamp(static_cast<double>(v[y * side + x]) * 0.5 + 0.5, 0.0, 1.0);
      const auto g = static_cast<uint8_t>(std::lround(u * 255.0));
      img.set(x0 + static_cast<int>(x), static_cast<int>(y), Rgb{g, g, g});
    }
}

}  // namespace

std::vector<Metric> DiffusionTask::model_metrics(ModelRuntime& rt, const SampleSource& data) const {
  if (eval_images_ == 0) return {};
  Denoiser& d = denoiser_of(rt, "--task diffusion evaluation");
  const Images im = read_images(data, eval_images_, d.cond_elems());
  if (im.n == 0) return {};
  // This rank's images (EvalShard), each with its sample index as its noise's id: the same
  // noise every evaluation, whichever rank reconstructs it.
  const EvalShard shard = eval_shard(rt);
  const size_t per = im.truth.size() / static_cast<size_t>(im.n), cper = im.cond.size() / static_cast<size_t>(im.n);
  std::vector<uint64_t> ids;
  std::vector<float> truth, cond;
  for (int64_t i = 0; i < im.n; ++i) {
    if (!shard.mine(static_cast<uint64_t>(i))) continue;
    ids.push_back(static_cast<uint64_t>(i));
    truth.insert(truth.end(), im.truth.begin() + static_cast<std::ptrdiff_t>(i * per),
                 im.truth.begin() + static_cast<std::ptrdiff_t>((i + 1) * per));
    cond.insert(cond.end(), im.cond.begin() + static_cast<std::ptrdiff_t>(i * cper),
                im.cond.begin() + static_cast<std::ptrdiff_t>((i + 1) * cper));
  }
  DdimOptions o;
  o.steps = sample_steps_;
  o.eta = eta_;
  o.seed = kEvalDdimSeed;
  std::vector<float> recon(truth.size());
  shard.part([&] {  // out of memory: every rank learns of it in sum() and throws there
    if (!ids.empty()) ddim_sample(d, cond.empty() ? nullptr : cond.data(), ids, o, recon.data());
  });
  double images = 0;
  Scores mine = score_sums(recon, truth, image_, &images);
  double sums[4] = {mine.rmse, mine.psnr, mine.ssim, images};
  shard.sum(sums);
  mine.rmse = sums[0], mine.psnr = sums[1], mine.ssim = sums[2];
  std::vector<Metric> out;
  add_scores(out, "", mean_of(mine, sums[3]));
  if (!im.baseline.empty()) add_scores(out, "tr_", score(im.baseline, im.truth, image_));
  if (!im.gn.empty()) add_scores(out, "gn_", score(im.gn, im.truth, image_));
  return out;
}

int DiffusionTask::sample(ModelRuntime& rt, const RunConfig& rc) const {
  Denoiser& d = denoiser_of(rt, "fittrain sample");
  FT_USER_CHECK(val_, "fittrain sample: --data-path ", rc.data_path, " has no test or validation images to reconstruct");
  const Images im = read_images(*val_, rc.num_images, d.cond_elems());
  FT_USER_CHECK(im.n > 0, "fittrain sample: --data-path ", rc.data_path, ": the ", test_split_, " is empty");
  std::vector<uint64_t> ids(static_cast<size_t>(im.n));
  std::iota(ids.begin(), ids.end(), uint64_t{0});
  DdimOptions o;
  o.steps = rc.sample_steps;
  o.eta = rc.eta;
  o.seed = rc.global_seed;
  std::vector<float> recon(im.truth.size());
  ddim_sample(d, im.cond.empty() ? nullptr : im.cond.data(), ids, o, recon.data());

  const std::string dir = rc.out_dir.empty() ? (fs::path(rc.results_dir) / "samples").string() : rc.out_dir;
  std::error_code ec;
  fs::create_directories(dir, ec);
  FT_USER_CHECK(!ec && fs::is_directory(dir), "--out ", dir, ": cannot create the folder (", ec.message(), ")");
  // PNGs of the first channel (EIT images have one); the .npy holds every channel.
  const int64_t side = image_, per = channels_ * side * side;
  const bool tr = !im.baseline.empty();
  const int panels = tr ? 3 : 2, gap = 2, w = static_cast<int>(side);
  for (int64_t i = 0; i < im.n; ++i) {
    char name[64];
    Image one(w, w, Rgb{0, 0, 0});
    draw_gray(one, recon.data() + i * per, side, 0);
    std::snprintf(name, sizeof name, "recon_%05lld.png", static_cast<long long>(i));
    write_png((fs::path(dir) / name).string(), one);
    Image cmp(panels * w + (panels - 1) * gap, w, Rgb{255, 255, 255});
    draw_gray(cmp, im.truth.data() + i * per, side, 0);
    if (tr) draw_gray(cmp, im.baseline.data() + i * per, side, w + gap);
    draw_gray(cmp, recon.data() + i * per, side, (panels - 1) * (w + gap));
    std::snprintf(name, sizeof name, "compare_%05lld.png", static_cast<long long>(i));
    write_png((fs::path(dir) / name).string(), cmp);
  }
  std::vector<int64_t> shape = {im.n, side, side};
  if (channels_ > 1) shape.insert(shape.begin() + 1, channels_);
  const std::string npy = (fs::path(dir) / "reconstructions.npy").string();
  write_npy(npy, shape, recon);

  const Scores s = score(recon, im.truth, side);
  std::printf("sample     %lld reconstructions of the %s (DDIM, %d steps, eta %g, seed %llu): rmse %.4f | psnr %.3f",
              static_cast<long long>(im.n), test_split_.c_str(), rc.sample_steps, rc.eta,
              static_cast<unsigned long long>(rc.global_seed), s.rmse, s.psnr);
  if (s.has_ssim) std::printf(" | ssim %.4f", s.ssim);
  if (tr) {
    const Scores b = score(im.baseline, im.truth, side);
    std::printf("; TR rmse %.4f | psnr %.3f", b.rmse, b.psnr);
    if (b.has_ssim) std::printf(" | ssim %.4f", b.ssim);
  }
  if (!im.gn.empty()) {
    const Scores g = score(im.gn, im.truth, side);
    std::printf("; GN rmse %.4f | psnr %.3f", g.rmse, g.psnr);
    if (g.has_ssim) std::printf(" | ssim %.4f", g.ssim);
  }
  std::printf("\nwrote      %s/recon_*.png, %s/compare_*.png (truth | %sreconstruction), %s [%s]\n", dir.c_str(),
              dir.c_str(), tr ? "TR | " : "", npy.c_str(),
              channels_ > 1 ? detail::concat(im.n, ", ", channels_, ", ", side, ", ", side).c_str()
                            : detail::concat(im.n, ", ", side, ", ", side).c_str());
  return 0;
}

}  // namespace ft
