// EIT data as CDEIT (conditional diffusion for electrical impedance tomography) users have it,
// as a SampleSource, and a writer of the same layout for synthetic sets.
//
// Layout of a data folder:
//   train/ valid/ test/   one `.npz` per sample (np.savez, or np.savez_compressed: zip
//                         members STORED or DEFLATE, data/zip_archive.h), members:
//     xs     true conductivity image, H x W (128 x 128), usually Fortran-order
//     ys     electrode voltages, D x 1 (208 x 1; (D,) and (1, D) are accepted too)
//     TR     Tikhonov reconstruction, H x W, optional (the "baseline" field)
//     xs_gn  Gauss-Newton reconstruction, H x W, optional (the "baseline_gn" field)
//     float32 or float64, either order, either endianness (data/npy.h); read as C-order f32.
//   mean.pth std.pth      per-measurement normalisation, torch.save'd D-element float32
//                         tensors: zip files whose first member ending in "data/0" holds the
//                         D raw little-endian floats (PyTorch's storage layout).
//
// Condition: voltages are normalised v' = (v - mean) / std. In `map` mode (CDEIT's) v' is
// laid out on a 16 x 16 grid — row r holds v'[13r .. 13r+12] in increasing column order,
// skipping columns (r-1) mod 16, r and (r+1) mod 16 (the measurements that touch a current-
// driving electrode do not exist), whose cells are 0 — and upsampled x8 by nearest neighbour
// to 128 x 128, the image size, so the model can concatenate it as a second image channel.
// That needs D == 208 and a 128 x 128 image. `vector` mode hands the normalised voltages out
// as they are (any D, any image size).
//
// Files are listed (sorted by name, as std::string compares) when the set is opened and the
// first is read and validated at once, so a wrong folder fails at start; the others are
// validated when read, against the first file's shapes. Every error is a UserError naming
// the file and the member or key.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "data/sample_source.h"

namespace ft {

inline constexpr int kEitElectrodes = 16;
inline constexpr int kEitPerRow = 13;                                 // 16 - 3 skipped
inline constexpr int64_t kEitMeasurements = kEitElectrodes * kEitPerRow;  // 208
inline constexpr int64_t kEitImageSize = 128;
inline constexpr int kEitUpsample = kEitImageSize / kEitElectrodes;     // 8

enum class EitCondMode { kMap, kVector };
// "map" / "vector"; UserError naming `flag` otherwise.
EitCondMode parse_eit_cond_mode(const std::string& s, const std::string& flag = "cond_mode");

struct EitOptions {
  std::string split = "train";  // subfolder: train, valid or test
  EitCondMode cond_mode = EitCondMode::kMap;
  // When mean.pth / std.pth are missing: compute them from the train split (streaming, the
  // unbiased std) instead of failing. Files that exist are always used.
  bool compute_missing_normalisation = false;
  bool voltages_field = false;  // adds field "voltages": the normalised voltages [D]
};

// Per-measurement mean and std of the voltages.
struct EitNormalisation {
  std::vector<float> mean, std;  // [D] each
};

// The D floats of a torch.save'd tensor file (mean.pth, std.pth): the first member whose name
// ends with "data/0" must be exactly expected_count * 4 bytes.
std::vector<float> read_pth_floats(const std::string& path, int64_t expected_count);
// mean.pth and std.pth of `data_dir`; every std must be finite and > 0.
EitNormalisation load_eit_normalisation(const std::string& data_dir, int64_t measurements);
// Mean and unbiased std (N-1, torch.std's default) of `ys` over every *.npz of a split folder,
// one file at a time. UserError with fewer than 2 files, or a measurement whose std is 0.
EitNormalisation compute_eit_normalisation(const std::string& split_folder);

// CDEIT's condition image: normalised voltages [208] -> map [128 * 128] (row-major).
void eit_condition_map(std::span<const float> v_norm, float* out);
// The grid column of measurement k (0..207) on row k / 13.
int eit_map_column(int k);

class EitDataset final : public SampleSource {
 public:
  // `data_dir` holds the split folders and mean.pth / std.pth (see the header comment).
  EitDataset(const std::string& data_dir, const EitOptions& options = {});

  uint64_t num_samples() const override { return files_.size(); }
  // "image" [H*W]; "cond" [H*W] (map) or [D] (vector); "baseline" [H*W] when has_baseline();
  // "baseline_gn" [H*W] when has_gn_baseline(); "voltages" [D] with options.voltages_field.
  // All f32.
  std::vector<FieldSpec> fields() const override;
  void read(uint64_t idx, std::span<void* const> dst) const override;

  // The first file has a TR member; every other file must then have one too.
  bool has_baseline() const { return has_baseline_; }
  // The same for xs_gn (CDEIT's Gauss-Newton reconstructions).
  bool has_gn_baseline() const { return has_gn_; }
  int64_t height() const { return height_; }
  int64_t width() const { return width_; }
  int64_t measurements() const { return measurements_; }
  const std::string& split_folder() const { return folder_; }
  const std::vector<std::string>& files() const { return files_; }
  const EitNormalisation& normalisation() const { return norm_; }

 private:
  // Reads file `idx`: image [H*W], TR [H*W] when has_baseline() and xs_gn [H*W] when
  // has_gn_baseline() (else untouched), and the normalised voltages [D]. Any of the pointers
  // may be null (not wanted).
  void read_arrays(uint64_t idx, float* image, float* baseline, float* gn, float* v_norm) const;

  std::string folder_;
  EitOptions opt_;
  std::vector<std::string> files_;  // full paths, sorted
  EitNormalisation norm_;
  int64_t height_ = 0, width_ = 0, measurements_ = 0;
  bool has_baseline_ = false, has_gn_ = false;
};

// --- writing (synthetic sets) ---------------------------------------------------------------

// One sample's arrays, C order: xs [H*W], ys [D], tr and gn [H*W] (empty when not written).
struct EitSampleArrays {
  std::vector<float> xs, ys, tr, gn;
};

struct EitWriteSpec {
  int64_t train = 0, valid = 0, test = 0;  // samples per split
  int64_t image_size = kEitImageSize;        // H = W
  int64_t measurements = kEitMeasurements;   // D
  bool write_tr = true;
  bool write_gn = false;  // an xs_gn member (the synthetic sets have no Gauss-Newton solve)
  // Replace an earlier set in the folder (prepare's --overwrite): its numbered samples beyond
  // this set's counts are removed. Without it they are refused (they would join this set).
  bool replace_earlier = false;
};

// Fills `out` for sample `index` of `split` (0 train, 1 valid, 2 test); out's vectors are
// resized by the caller to the spec's sizes before each call.
using EitSampleFn = std::function<void(int split, int64_t index, EitSampleArrays& out)>;

// Writes dir/{train,valid,test}/%05d.npz (members xs, TR and xs_gn Fortran-order float32 H x W, ys
// float32 D x 1, as CDEIT's files have them) and dir/mean.pth, dir/std.pth (members
// mean/data/0, std/data/0: per-measurement mean and unbiased std of the train split's ys),
// every file atomically. The .pth files carry only what the reader needs: torch.load cannot
// open them (no data.pkl). UserError with fewer than 2 train samples (no std).
// Refused before anything is written: an .npz in a split folder that is not one of the
// writer's numbered samples, and (without spec.replace_earlier) a numbered sample beyond the
// spec's count. With it those numbered samples are removed, after mean.pth and std.pth.
void write_eit_folder(const std::string& dir, const EitWriteSpec& spec, const EitSampleFn& fill);

}  // namespace ft
