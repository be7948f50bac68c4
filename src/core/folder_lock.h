// One writer at a time per folder: an exclusive advisory lock (flock) on a file inside it,
// held until destroyed or the process ends (the kernel releases it however the process ends,
// so a crash never leaves a folder locked). The holder's pid is written into the file for the
// message of a refused one. The file normally stays after release, but a holder may remove it
// (a failed preparation removes the --out folder it created): a lock is taken only on the file
// the path still names once it is locked (same device and inode), else it is taken again, so a
// process that opened the file just before it went never holds a file no longer in the folder
// while a third locks a new one. `train` holds its results folder (train/results_dir.h), a
// preparation its --out (data/prepared_folder.h).
#pragma once
#include <functional>
#include <string>

namespace ft {

class FolderLock {
 public:
  // Locks <folder>/<file_name>; the folder must exist, unless create_folder (then it and its
  // parents are created, again if they vanish while the lock is taken). UserError "<flag>
  // <folder> is in use by another <holder> (pid N, lock PATH); wait for it to finish, or pass
  // another <flag>" when another open file description (another process, or another lock in
  // this one) holds it; UserError naming the flag and the file when it cannot be opened,
  // locked or written.
  FolderLock(const std::string& folder, const char* file_name, const std::string& flag, const std::string& holder,
             bool create_folder = false);
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

namespace testing {
// Called with the lock file's path after each open, before flock: tests remove or replace the
// file there, as another process could.
extern std::function<void(const std::string& lock_path)> folder_lock_opened;
}  // namespace testing

}  // namespace ft
