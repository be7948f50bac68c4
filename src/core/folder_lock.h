// One writer at a time per folder: an exclusive advisory lock (flock) on a file inside it,
// held until destroyed or the process ends (the kernel releases it however the process ends,
// so a crash never leaves a folder locked). The holder's pid is written into the file for the
// message of a refused one; the file stays after release (unlinking it would let a process
// that opened it just before lock a file no longer in the folder while a third locks a new
// one). `train` holds its results folder (train/results_dir.h), a preparation its --out
// (data/prepare.h).
#pragma once
#include <string>

namespace ft {

class FolderLock {
 public:
  // Locks <folder>/<file_name> (folder must exist). UserError "<flag> <folder> is in use by
  // another <holder> (pid N, lock PATH); wait for it to finish, or pass another <flag>" when
  // another open file description (another process, or another lock in this one) holds it;
  // UserError naming the flag and the file when it cannot be opened, locked or written.
  FolderLock(const std::string& folder, const char* file_name, const std::string& flag, const std::string& holder);
  ~FolderLock();
  FolderLock(FolderLock&& o) noexcept;
  FolderLock& operator=(FolderLock&&) = delete;
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

}  // namespace ft
