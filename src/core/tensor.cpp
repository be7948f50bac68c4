#include "core/tensor.h"

#include <sstream>

namespace ft {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::i32: return "i32";
    case DType::u16: return "u16";
    case DType::f64: return "f64";
  }
  return "?";
}

Tensor Tensor::view(std::initializer_list<int64_t> dims) const {
  Tensor t(data, dtype, dims);
  FT_CHECK(t.numel() <= numel(), "view ", t.shape_str(), " larger than ", shape_str());
  return t;
}

std::string Tensor::shape_str() const {
  std::ostringstream os;
  os << dtype_name(dtype) << "[";
  for (int i = 0; i < ndim; ++i) os << (i ? "," : "") << shape[i];
  os << "]";
  return os.str();
}

}  // namespace ft
