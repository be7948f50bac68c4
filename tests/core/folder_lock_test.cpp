// FolderLock (core/folder_lock.h) holds only the lock file its path still names: a file removed
// (or replaced) by another process between this one's open and its flock is locked again, so
// two processes never both believe they hold one folder. A failed preparation removes the
// --out folder it created, lock file included (data/prepared_folder.h, PrepareLock).
#include "core/folder_lock.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "cli/cli_util.h"
#include "core/error.h"

namespace ft {
namespace {

namespace fs = std::filesystem;

// Runs `act` at the first open of a lock file only, as another process would between that
// open and its flock; the hook is cleared whatever the test does.
class OnFirstOpen {
 public:
  explicit OnFirstOpen(std::function<void(const std::string&)> act) {
    testing::folder_lock_opened = [this, act = std::move(act)](const std::string& path) {
      ++opens;
      if (opens == 1) act(path);
    };
  }
  ~OnFirstOpen() { testing::folder_lock_opened = nullptr; }
  int opens = 0;
};

// A second lock on the same folder: refused as in use exactly when the first holds the file
// the path names.
void expect_held(const std::string& dir) {
  try {
    FolderLock second(dir, ".lock", "--out", "test");
    ADD_FAILURE() << "a second lock of " << dir << " was granted: the first holds a file no longer in the folder";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("is in use by another test"), std::string::npos) << e.what();
  }
}

TEST(FolderLock, AFileReplacedBetweenOpenAndLockIsLockedAgain) {
  const std::string dir = testing::temp_dir("folder_lock_replaced");
  OnFirstOpen replace([](const std::string& path) {
    fs::remove(path);  // its holder removed it, and a third process made a new one
    std::ofstream(path) << "4242\n";
  });
  const FolderLock lock(dir, ".lock", "--out", "test");
  EXPECT_EQ(replace.opens, 2);
  testing::folder_lock_opened = nullptr;
  expect_held(dir);
}

TEST(FolderLock, AFolderRemovedBetweenOpenAndLockIsCreatedAgainWhenAsked) {
  const std::string dir = testing::temp_dir("folder_lock_recreated") + "/out";
  OnFirstOpen remove([](const std::string& path) { fs::remove_all(fs::path(path).parent_path()); });
  const FolderLock lock(dir, ".lock", "--out", "test", /*create_folder=*/true);
  EXPECT_EQ(remove.opens, 2);
  EXPECT_TRUE(fs::is_regular_file(dir + "/.lock"));
  testing::folder_lock_opened = nullptr;
  expect_held(dir);
}

TEST(FolderLock, AFolderRemovedBetweenOpenAndLockIsNamedWhenItMustExist) {
  const std::string dir = testing::temp_dir("folder_lock_gone");
  OnFirstOpen remove([](const std::string& path) { fs::remove_all(fs::path(path).parent_path()); });
  try {
    const FolderLock lock(dir, ".lock", "--results-dir", "test");
    ADD_FAILURE() << "locked a folder that no longer exists";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("--results-dir " + dir + ": cannot open the lock file"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(dir));
}

}  // namespace
}  // namespace ft
