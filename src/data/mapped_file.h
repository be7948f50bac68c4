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

// Every read-only data mapping (token shards, packed pairs, interactions, numpy files) goes
// through these, so that release_data_pages() can hand back the resident pages of all of
// them: the page cache keeps the pages (reading one again is a minor fault), and the
// process's resident set stays what it owns, its host plan, instead of growing with every
// page of the data it has read (a long run over a large data set otherwise shows a resident
// set of its data's size). map_data_file returns MAP_FAILED with errno set, as mmap does.
void* map_data_file(int fd, size_t bytes);
void unmap_data_file(void* map, size_t bytes) noexcept;
// madvise(MADV_DONTNEED) over every mapping made by map_data_file and not yet unmapped; safe
// while other threads read them. Returns the resident bytes this gave back (RSS before less
// after: an estimate, other threads may touch memory meanwhile).
size_t release_data_pages();
// The same for one range of a mapping made by map_data_file, widened to whole pages: a scan
// over a whole file hands back what it has read as it goes.
void release_data_range(const void* p, size_t bytes);

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
