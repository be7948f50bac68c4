// NpyArrayDataset: two mapped .npy arrays as a SampleSource; see npy_dataset.h.
#include "data/npy_dataset.h"

#include "core/error.h"

namespace ft {

NpyArrayDataset::NpyArrayDataset(const std::string& images_path, const std::string& conds_path)
    : images_(images_path, "npy images"), conds_(conds_path, "npy conditions") {
  images_h_ = parse_npy_header(images_.bytes(), images_path);
  conds_h_ = parse_npy_header(conds_.bytes(), conds_path);
  const auto& is = images_h_.shape;
  const auto& cs = conds_h_.shape;
  FT_USER_CHECK(is.size() == 3 || is.size() == 4, images_path, ": key 'shape': images of shape ", shape_str(is),
                ", expected (N, H, W) or (N, C, H, W)");
  FT_USER_CHECK(cs.size() == 2, conds_path, ": key 'shape': conditions of shape ", shape_str(cs), ", expected (N, D)");
  for (int64_t d : is) FT_USER_CHECK(d > 0, images_path, ": key 'shape': images of shape ", shape_str(is), " are empty");
  for (int64_t d : cs) FT_USER_CHECK(d > 0, conds_path, ": key 'shape': conditions of shape ", shape_str(cs), " are empty");
  FT_USER_CHECK(is[0] == cs[0], images_path, " holds ", is[0], " images but ", conds_path, " holds ", cs[0],
                " conditions (key 'shape': the first dimension, N, must match)");
}

std::vector<FieldSpec> NpyArrayDataset::fields() const {
  return {{"image", DType::f32, channels() * height() * width()}, {"cond", DType::f32, cond_dim()}};
}

void NpyArrayDataset::read(uint64_t idx, std::span<void* const> dst) const {
  FT_CHECK(idx < num_samples() && dst.size() == 2, "sample ", idx, " of ", num_samples());
  const auto i = static_cast<int64_t>(idx);
  npy_copy_c_order(images_h_, images_.bytes().data() + images_h_.data_offset, i, static_cast<float*>(dst[0]));
  npy_copy_c_order(conds_h_, conds_.bytes().data() + conds_h_.data_offset, i, static_cast<float*>(dst[1]));
}

}  // namespace ft
