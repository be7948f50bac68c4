#include "core/folder_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <random>

#include "core/error.h"
#include "core/host_name.h"

namespace ft {

namespace {
// How often a lock file may vanish or be replaced between its open and its lock before the
// lock gives up: each time means another process removed it meanwhile, which is rare.
constexpr int kLockAttempts = 100;

bool same_file(int fd, const std::string& path) {
  struct stat held {}, named {};
  return ::fstat(fd, &held) == 0 && ::stat(path.c_str(), &named) == 0 && held.st_dev == named.st_dev &&
         held.st_ino == named.st_ino;
}
}  // namespace

std::function<void(const std::string&)> testing::folder_lock_opened;

FolderLock::FolderLock(const std::string& folder, const char* file_name, const std::string& flag,
                       const std::string& holder, bool create_folder)
    : path_((std::filesystem::path(folder) / file_name).string()) {
  for (int attempt = 1;; ++attempt) {
    if (create_folder) {
      std::error_code ec;
      std::filesystem::create_directories(folder, ec);
      FT_USER_CHECK(!ec && std::filesystem::is_directory(folder), flag, " ", folder, ": cannot create the folder",
                    ec ? ": " + ec.message() : std::string());
    }
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0 && errno == ENOENT && create_folder && attempt < kLockAttempts) continue;  // the folder went
    FT_USER_CHECK(fd_ >= 0, flag, " ", folder, ": cannot open the lock file ", path_, ": ", std::strerror(errno));
    if (testing::folder_lock_opened) testing::folder_lock_opened(path_);
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int e = errno;
      std::string pid;
      char buf[64] = {};
      const ssize_t n = ::pread(fd_, buf, sizeof buf - 1, 0);
      if (n > 0) pid.assign(buf, static_cast<size_t>(n));
      pid = pid.substr(0, pid.find('\n'));  // the first line (what follows identifies the holder to its ranks)
      while (!pid.empty() && pid.back() == ' ') pid.pop_back();
      ::close(fd_);
      fd_ = -1;
      FT_USER_CHECK(e != EWOULDBLOCK, flag, " ", folder, " is in use by another ", holder, " (pid ",
                    pid.empty() ? "unknown" : pid, ", lock ", path_, "); wait for it to finish, or pass another ",
                    flag);
      throw UserError(detail::concat(flag, " ", folder, ": cannot lock ", path_, ": ", std::strerror(e)));
    }
    if (same_file(fd_, path_)) break;
    // Its holder removed the file between our open and our lock: the lock is on a file no
    // longer in the folder, which a third process would not see.
    ::close(fd_);
    fd_ = -1;
    FT_USER_CHECK(attempt < kLockAttempts, flag, " ", folder, ": the lock file ", path_, " was removed ",
                  kLockAttempts, " times while it was being locked; is another program deleting it?");
  }
  // The pid (first line: what a refused process is told), then the machine and 64 random
  // bits: the ranks of a run on other machines compare the whole text with rank 0's to know
  // they see the folder it holds (train/results_dir.h, results_dir_holder). A pid alone
  // repeats (a container's first process is often pid 1), and a machine's own old folder
  // keeps the last holder's. Synced: NFS shows another client what was written only once it
  // reached the server.
  std::random_device bits;
  char token[32];
  std::snprintf(token, sizeof token, "%08x%08x", bits(), bits());
  const std::string text = std::to_string(::getpid()) + "\n" + host_name() + " " + token + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) {
    const int e = errno;
    ::close(fd_);
    fd_ = -1;
    throw UserError(detail::concat(flag, " ", folder, ": cannot write ", path_, ": ", std::strerror(e)));
  }
  (void)::fsync(fd_);  // best effort: a file system without fsync still locks
}

FolderLock::~FolderLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the flock
}

FolderLock::FolderLock(FolderLock&& o) noexcept : fd_(o.fd_), path_(std::move(o.path_)) { o.fd_ = -1; }

}  // namespace ft
