// MappedFile: a whole regular file mapped read-only, for the readers of numpy's formats
// (data/npy.h, data/zip_archive.h). The map is shared by every thread that reads through it
// (read-only pages need no lock) and host memory stays at the page cache's discretion, so a
// data set larger than RAM can be read sample by sample.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace ft {

class MappedFile {
 public:
  MappedFile() = default;
  // UserError naming `path` when it is missing, not a regular file (a FIFO is refused before
  // open(2), which would block on it), or cannot be mapped. `what` says what the file was
  // meant to be ("npz sample", "npy array", ...) in those messages. An empty file maps to an
  // empty span.
  MappedFile(const std::string& path, const char* what);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;

  const std::string& path() const { return path_; }
  std::span<const uint8_t> bytes() const { return {static_cast<const uint8_t*>(map_), bytes_}; }

 private:
  void release() noexcept;
  std::string path_;
  void* map_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace ft
