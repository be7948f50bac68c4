// Safetensors files (Hugging Face's weight format), read and written without Python.
//
// Layout: 8 bytes little-endian N, then N bytes of JSON header
//   {"NAME": {"dtype": "F32", "shape": [d0, d1, ...], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"key": "value", ...}}   (optional; string values only)
// then the byte buffer; offsets are relative to the buffer's start, tensors are row-major.
// The reference implementation (huggingface/safetensors) requires the tensors to cover the
// buffer exactly: sorted by offset, each starts where the previous ends, the last ends at the
// end of the file. The reader checks all of that (and every size) before any tensor is read;
// a bad file is a UserError naming the file and the tensor or the problem.
//
// Lives in train/ beside the checkpoint format: a file format of model state, not of data.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

namespace ft {

// Bytes per element of a safetensors dtype ("F32" -> 4); 0 for a name the format does not
// define (sub-byte types such as F4 are not supported either).
size_t safetensors_dtype_size(const std::string& dtype);

struct SafetensorsInfo {
  std::string name;
  std::string dtype;            // "F32", "BF16", ...
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte offsets into the buffer
  int64_t numel() const;
};

class SafetensorsReader {
 public:
  // Opens and validates the whole header (see above). UserError naming the file otherwise.
  explicit SafetensorsReader(const std::string& path);
  ~SafetensorsReader();
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<SafetensorsInfo>& tensors() const { return tensors_; }  // sorted by name
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const SafetensorsInfo* find(const std::string& name) const;  // null when absent

  // The tensor's raw bytes (exactly end - begin).
  std::vector<char> read_bytes(const std::string& name) const;
  // The tensor converted to fp32 from F32, F16, BF16 or F64; UserError naming file and tensor
  // for another dtype. Holds nothing but the result (F32 is read into it; the others are
  // converted 4 MiB at a time).
  std::vector<float> read_f32(const std::string& name) const;
  // Whether two tensors hold the same dtype, shape and bytes, compared 4 MiB at a time.
  bool same_tensor(const std::string& a, const std::string& b) const;

 private:
  int fd_ = -1;
  std::string path_;
  uint64_t data_start_ = 0;  // 8 + N
  std::vector<SafetensorsInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// One tensor to write. `fill` writes exactly numel * dtype size bytes into `dst`; it is called
// once, when the tensor's turn comes, so a caller can produce (e.g. transpose) one tensor at a
// time into a buffer the writer reuses instead of holding every tensor's bytes at once.
struct SafetensorsOut {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::function<void(char* dst)> fill;
};

// Writes atomically (path.tmp, fsync, rename, directory fsync). The header is compact JSON
// padded with spaces to a multiple of 8 bytes (as the reference implementation writes it);
// tensors go into the buffer by descending element size, then by name (all tensors of one
// dtype: name order), so every tensor is aligned to its element size. Names must be unique
// and not "__metadata__" (InternalError: a bug in the caller); I/O failures are UserErrors.
void write_safetensors(const std::string& path, std::span<const SafetensorsOut> tensors,
                       const std::map<std::string, std::string>& metadata);

// Writes `bytes` to `path` atomically (as above): for the small files written beside one.
void write_file_atomic(const std::string& path, const std::string& bytes);

}  // namespace ft
