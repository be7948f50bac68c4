// Diffusion ("diffusion"): a denoising model (models/dit.h) learns EIT images conditioned on
// their boundary voltages, CDEIT's user story.
//
// Data (--data-path):
//   - an EIT folder as CDEIT has it (data/eit_dataset.h: train/ valid/ test/ of .npz samples,
//     mean.pth, std.pth), e.g. made by `fittrain prepare --synthetic eit --out DIR`. The
//     condition is read the way the model takes it: the normalised voltages as a vector
//     (cond_dim > 0) or CDEIT's 128x128 voltage map (cond_channels = 1). Training reads
//     train/, validation valid/; `fittrain test` evaluates test/ (valid/ when there is none).
//   - or two .npy files "IMAGES.npy,CONDS.npy" (data/npy_dataset.h: N x [C x] H x W images,
//     N x D conditions), with --val-data-path likewise for validation (optional).
// The model's image size must be the data's (--image-size), and its condition size the data's.
//
// Each sample gains the diffusion fields the model reads: "t" (the timestep, uniform in
// [0, 1000)) and "noise_key" (which noise the device draws, backend/diffusion_rng.h). Both are
// a hash (splitmix64) of the run seed, the sample and the epoch in training (read_visit: fresh
// noise every epoch, the same on any thread, rank or resumed run), and of a fixed evaluation
// seed and the sample in evaluation, so every evaluation (of any run) scores the same noisy
// images and validation losses are comparable. Loss unit: an image (its mean squared error).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "train/task.h"

namespace ft {

// A source with the diffusion fields added: the base's "image" (and "cond" when the model reads
// one), then "t" and "noise_key". Other base fields (an EIT set's "baseline") are read and dropped.
class DiffusionSource final : public SampleSource {
 public:
  // train: t and key from (seed, sample, epoch); else from (kEvalSeed, sample), epochs ignored.
  DiffusionSource(std::unique_ptr<SampleSource> base, bool with_cond, bool train, uint64_t seed);
  uint64_t num_samples() const override { return base_->num_samples(); }
  std::vector<FieldSpec> fields() const override { return fields_; }
  void read(uint64_t idx, std::span<void* const> dst) const override { read_visit(idx, 0, dst); }
  void read_visit(uint64_t idx, uint64_t epoch, std::span<void* const> dst) const override;
  const SampleSource& base() const { return *base_; }
  // The timestep and noise key of a visit (what read_visit writes).
  void draw(uint64_t idx, uint64_t epoch, int32_t* t, int32_t* key) const;

  static constexpr uint64_t kEvalSeed = 0x6576616c2d646966ull;  // "eval-dif"

 private:
  std::unique_ptr<SampleSource> base_;
  std::vector<FieldSpec> base_fields_, fields_;
  std::vector<int> out_of_base_;  // for each base field: its index in fields_, or -1 (dropped)
  bool train_;
  uint64_t seed_;
};

class DiffusionTask final : public Task {
 public:
  // The model's shape: image size, channels and condition (its config() keys).
  DiffusionTask(const RunConfig& rc, const nlohmann::json& model_config, bool need_train);
  std::string name() const override { return "diffusion"; }
  std::string describe_data() const override { return description_; }
  const SampleSource& train_data() const override;
  const SampleSource* val_data() const override { return val_.get(); }
  double loss_units(const SampleSource& src, std::span<const uint64_t> samples) const override {
    (void)src;
    return static_cast<double>(samples.size());
  }
  // The mean loss is the evaluation's MSE; the image metrics need the model (below).
  std::vector<Metric> metrics(double mean_loss) const override {
    (void)mean_loss;
    return {};
  }
  // DDIM reconstructions (train/ddim.h: --sample-steps, --eta, a fixed evaluation noise seed)
  // of the first --eval-images images of `data` against their ground truth: rmse, psnr, ssim
  // (train/image_metrics.h; ssim for images of 11 x 11 or more), and the same of the data's
  // Tikhonov reconstruction (the EIT files' TR) when it has one: tr_rmse, tr_psnr, tr_ssim; and
  // for its Gauss-Newton one (xs_gn) when it has that: gn_rmse, gn_psnr, gn_ssim.
  // (diffusion_eval.cpp)
  std::vector<Metric> model_metrics(ModelRuntime& rt, const SampleSource& data) const override;
  std::string test_split() const override { return test_split_; }
  const char* unit_name() const override { return "images"; }
  const char* unit_abbrev() const override { return "img"; }
  // `fittrain sample`: reconstructs the first --num-images images of the evaluation split
  // (test/, else valid/) with noise seeded by --global-seed and writes into --out (default
  // RESULTS_DIR/samples) recon_NNNNN.png, compare_NNNNN.png (truth | TR | reconstruction,
  // truth | reconstruction without TR) and reconstructions.npy (f32 [N, H, W], [N, C, H, W]
  // for several channels). (diffusion_eval.cpp)
  int sample(ModelRuntime& rt, const RunConfig& rc) const override;

  // The fixed seed of evaluation's DDIM noise: every evaluation (of any run) starts from the
  // same x_T and draws the same z, so its image metrics are comparable.
  static constexpr uint64_t kEvalDdimSeed = 0x6576616c2d64646dull;  // "eval-ddm"

 private:
  std::string description_, test_split_ = "validation split";
  std::unique_ptr<DiffusionSource> train_, val_;
  int64_t image_ = 0, channels_ = 1;  // the model's H = W and channels
  int sample_steps_ = 5;
  double eta_ = 1.0;
  int64_t eval_images_ = 64;
};

}  // namespace ft
