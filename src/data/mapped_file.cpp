// MappedFile: open, check, mmap; see mapped_file.h.
#include "data/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.h"
#include "data/token_shard.h"

namespace ft {

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
    void* m = ::mmap(nullptr, bytes_, PROT_READ, MAP_SHARED, fd, 0);
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
  if (map_) ::munmap(map_, bytes_);
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
