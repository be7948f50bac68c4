// Tensor: a typed, contiguous, non-owning view into an arena (or any buffer).
// fittrain never allocates per tensor: every Tensor points into one planned allocation per
// device (core/arena.h), so a Tensor is just pointer + dtype + shape and is cheap to copy.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/error.h"

namespace ft {

// f64: only the training step's few device scalars (train/runtime.h: the loss and gradient-norm
// sums that decide the update on the device), never a tensor of an op.
enum class DType : uint8_t { f32 = 0, bf16 = 1, f16 = 2, i32 = 3, u16 = 4, f64 = 5 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::bf16: return 2;
    case DType::f16: return 2;
    case DType::i32: return 4;
    case DType::u16: return 2;
    case DType::f64: return 8;
  }
  return 0;
}
const char* dtype_name(DType t);

template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<uint16_t>() { return DType::u16; }
template <> constexpr DType dtype_of<double>() { return DType::f64; }

struct Tensor {
  static constexpr int kMaxDims = 4;
  void* data = nullptr;
  DType dtype = DType::f32;
  int ndim = 0;
  std::array<int64_t, kMaxDims> shape{};

  Tensor() = default;
  Tensor(void* p, DType t, std::initializer_list<int64_t> dims) : data(p), dtype(t) {
    FT_CHECK(dims.size() <= kMaxDims, "too many dims");
    for (int64_t d : dims) shape[ndim++] = d;
  }

  bool empty() const { return data == nullptr; }
  int64_t dim(int i) const { return shape[i < 0 ? ndim + i : i]; }
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= shape[i];
    return ndim == 0 ? 0 : n;
  }
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }

  // Typed pointer; checks the dtype so a bf16 buffer is never read as fp32 by accident.
  template <class T> T* as() const {
    FT_CHECK(dtype == dtype_of<T>(), "tensor is ", dtype_name(dtype));
    return static_cast<T*>(data);
  }
  // The same bytes with a new shape of equal or smaller element count (e.g. a micro-batch
  // smaller than the planned one uses a prefix of the planned buffer).
  Tensor view(std::initializer_list<int64_t> dims) const;
  // Elements [begin, begin + count) of the flat buffer, as a 1-D tensor (no bounds beyond
  // the caller's: a padded buffer may be longer than its shape says).
  Tensor range(int64_t begin, int64_t count) const {
    return Tensor(static_cast<char*>(data) + static_cast<size_t>(begin) * dtype_size(dtype), dtype, {count});
  }
  std::string shape_str() const;
};

}  // namespace ft
