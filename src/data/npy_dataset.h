// NpyArrayDataset: a SampleSource over two plain .npy arrays — images N x H x W or
// N x C x H x W, and conditions N x D (float32 or float64, either order; data/npy.h) — for
// image data sets that are not in CDEIT's one-file-per-sample layout.
//
// Both files are mapped, never loaded: a sample is converted to C-order float32 straight out
// of the map when read (a float64 or Fortran-order file costs a conversion per read, not a
// copy of the whole array), so host memory stays bounded whatever the data size. read() keeps
// no mutable state and may run on several threads at once.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/mapped_file.h"
#include "data/npy.h"
#include "data/sample_source.h"

namespace ft {

class NpyArrayDataset final : public SampleSource {
 public:
  // UserError naming the file and what is wrong: not an .npy, wrong rank, an empty
  // dimension, or first dimensions (N) that differ between the two files.
  NpyArrayDataset(const std::string& images_path, const std::string& conds_path);

  uint64_t num_samples() const override { return static_cast<uint64_t>(images_h_.shape[0]); }
  // "image" f32 [C*H*W] and "cond" f32 [D].
  std::vector<FieldSpec> fields() const override;
  void read(uint64_t idx, std::span<void* const> dst) const override;

  int64_t channels() const { return images_h_.shape.size() == 4 ? images_h_.shape[1] : 1; }
  int64_t height() const { return images_h_.shape[images_h_.shape.size() - 2]; }
  int64_t width() const { return images_h_.shape.back(); }
  int64_t cond_dim() const { return conds_h_.shape[1]; }

 private:
  MappedFile images_, conds_;
  NpyHeader images_h_, conds_h_;
};

}  // namespace ft
