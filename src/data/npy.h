// .npy arrays (numpy's format, versions 1.0, 2.0 and 3.0): the header parsed and validated
// strictly, the data converted to C-order float32, and a float32 writer.
//
// A file is: magic "\x93NUMPY", major, minor, header length (u16 for 1.x, u32 for 2.x/3.x),
// then a Python dict literal padded with spaces to a 16-byte boundary ending in '\n', e.g.
//   {'descr': '<f4', 'fortran_order': False, 'shape': (128, 128), }
// then the raw data. Accepted: exactly the keys descr, fortran_order and shape; descr
// '<f4' '<f8', '=f4' '=f8' (native, little-endian here) and big-endian '>f4' '>f8'
// (byte-swapped on read); C or Fortran order; any rank up to 32. Anything else is a UserError
// naming `where` (a path, or "archive.npz: member 'xs'") and the key at fault.
//
// Arrays are always handed out in C order (row-major): a Fortran-order array is transposed
// on the way in. NpyArray owns its data; data/npy_dataset.h reads samples straight out of a
// mapped file with the same conversion (npy_copy_c_order).
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace ft {

inline constexpr int64_t kNpyMaxDim = int64_t{1} << 40;

struct NpyHeader {
  std::vector<int64_t> shape;
  int elem_bytes = 4;         // 4 (float32) or 8 (float64)
  bool big_endian = false;
  bool fortran_order = false;
  uint64_t data_offset = 0;   // bytes from the file's start to the first element
  std::string descr;          // as written, e.g. "<f4"

  int64_t count() const;      // elements (1 for shape ())
  uint64_t data_bytes() const { return static_cast<uint64_t>(count()) * static_cast<uint64_t>(elem_bytes); }
};

// "(128, 128)"-style text of a shape, as numpy prints it ("(208,)" for rank 1).
std::string shape_str(std::span<const int64_t> shape);

// Parses and validates the header at the start of `bytes` and checks that the data that
// follows is exactly data_bytes() long (no truncation, no trailing bytes).
NpyHeader parse_npy_header(std::span<const uint8_t> bytes, const std::string& where);

// Converts to float32 in C order the elements of `data` (the bytes after the header) that
// make up sub-array `outer` of the first axis (shape[1:], e.g. one sample of N x H x W), or
// the whole array when `outer` < 0. dst has room for that many elements.
void npy_copy_c_order(const NpyHeader& h, const uint8_t* data, int64_t outer, float* dst);

// An array in C order as float32.
struct NpyArray {
  std::vector<int64_t> shape;
  std::vector<float> data;  // [prod(shape)], row-major
};

NpyArray parse_npy(std::span<const uint8_t> bytes, const std::string& where);
NpyArray load_npy(const std::string& path);

// The bytes of a version 1.0 .npy of float32 `data` (C order, prod(shape) elements). With
// `fortran_order` the file is written Fortran-order (the data is transposed on the way
// out; what a reader gets back is the same C-order array).
std::vector<uint8_t> npy_bytes(std::span<const int64_t> shape, std::span<const float> data, bool fortran_order = false);
// npy_bytes written atomically (path.tmp, fsync, rename).
void write_npy(const std::string& path, std::span<const int64_t> shape, std::span<const float> data,
               bool fortran_order = false);

}  // namespace ft
