#include "core/folder_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace ft {

FolderLock::FolderLock(const std::string& folder, const char* file_name, const std::string& flag,
                       const std::string& holder)
    : path_((std::filesystem::path(folder) / file_name).string()) {
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  FT_USER_CHECK(fd_ >= 0, flag, " ", folder, ": cannot open the lock file ", path_, ": ", std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int e = errno;
    std::string pid;
    char buf[64] = {};
    const ssize_t n = ::pread(fd_, buf, sizeof buf - 1, 0);
    if (n > 0) pid.assign(buf, static_cast<size_t>(n));
    while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
    ::close(fd_);
    fd_ = -1;
    FT_USER_CHECK(e != EWOULDBLOCK, flag, " ", folder, " is in use by another ", holder, " (pid ",
                  pid.empty() ? "unknown" : pid, ", lock ", path_, "); wait for it to finish, or pass another ", flag);
    throw UserError(detail::concat(flag, " ", folder, ": cannot lock ", path_, ": ", std::strerror(e)));
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    const int e = errno;
    ::close(fd_);
    fd_ = -1;
    throw UserError(detail::concat(flag, " ", folder, ": cannot write ", path_, ": ", std::strerror(e)));
  }
}

FolderLock::~FolderLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the flock
}

FolderLock::FolderLock(FolderLock&& o) noexcept : fd_(o.fd_), path_(std::move(o.path_)) { o.fd_ = -1; }

}  // namespace ft
