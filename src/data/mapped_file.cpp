// MappedFile: open, check, mmap; see mapped_file.h.
#include "data/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>

#include "core/error.h"
#include "core/host_memory.h"
#include "data/token_shard.h"

namespace ft {

namespace {

// The live data mappings, for release_data_pages.
struct DataMappings {
  std::mutex mutex;
  std::map<void*, size_t> maps;
};
DataMappings& data_mappings() {
  static DataMappings m;
  return m;
}

}  // namespace

void* map_data_file(int fd, size_t bytes) {
  void* m = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  if (m != MAP_FAILED) {
    const int e = errno;
    DataMappings& d = data_mappings();
    std::lock_guard<std::mutex> lock(d.mutex);
    d.maps[m] = bytes;
    errno = e;
  }
  return m;
}

void unmap_data_file(void* map, size_t bytes) noexcept {
  if (map == nullptr) return;
  {
    DataMappings& d = data_mappings();
    std::lock_guard<std::mutex> lock(d.mutex);
    d.maps.erase(map);  // before the unmap: release_data_pages never touches a freed range
  }
  ::munmap(map, bytes);
}

size_t release_data_pages() {
  const size_t before = host_rss_bytes();
  {
    DataMappings& d = data_mappings();
    std::lock_guard<std::mutex> lock(d.mutex);
    for (const auto& [map, bytes] : d.maps) ::madvise(map, bytes, MADV_DONTNEED);
  }
  const size_t after = host_rss_bytes();
  return before > after ? before - after : 0;
}

void release_data_range(const void* p, size_t bytes) {
  if (bytes == 0) return;
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t lo = reinterpret_cast<uintptr_t>(p) / page * page;
  const uintptr_t hi = (reinterpret_cast<uintptr_t>(p) + bytes + page - 1) / page * page;
  ::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
}

MappedFile::MappedFile(const std::string& path, const char* what) : path_(path) {
  // stat first: open(2) of a FIFO for reading blocks until a writer comes.
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0)
    FT_USER_CHECK(S_ISREG(st.st_mode), path, ": is ", file_kind(st.st_mode), ", not a ", what, " file");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  FT_USER_CHECK(fd >= 0, path, ": cannot open ", what, " file: ", std::strerror(errno));
  const bool ok = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  if (!ok) ::close(fd);
  FT_USER_CHECK(ok, path, ": not a regular file (a ", what, " file must be one)");
  bytes_ = static_cast<size_t>(st.st_size);
  if (bytes_ > 0) {
    void* m = map_data_file(fd, bytes_);
    const int e = errno;
    ::close(fd);
    FT_USER_CHECK(m != MAP_FAILED, path, ": cannot mmap ", what, " file: ", std::strerror(e));
    map_ = m;
  } else {
    ::close(fd);
  }
}

MappedFile::~MappedFile() { release(); }

void MappedFile::release() noexcept {
  unmap_data_file(map_, bytes_);
  map_ = nullptr;
  bytes_ = 0;
}

MappedFile::MappedFile(MappedFile&& o) noexcept
    : path_(std::move(o.path_)), map_(std::exchange(o.map_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    release();
    path_ = std::move(o.path_);
    map_ = std::exchange(o.map_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

}  // namespace ft
