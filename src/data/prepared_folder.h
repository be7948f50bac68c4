// What marks a folder as prepared, and who may write it: the shard names every preparation
// writes, and the lock each writer of an --out folder holds. Read by the preparations
// (data/prepare.h), by `tokenizer train` (which refuses a folder of shards) and by the
// built-in corpus's check, so it sits below all of them.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "core/folder_lock.h"

namespace ft {

// One preparation at a time per folder: an exclusive advisory lock (flock) on
// <out_dir>/.prepare-lock, held until destroyed or the process ends, with the holder's pid
// written inside for the message of a refused one. Two runs into one --out shared the staging
// folder and mixed or lost each other's shards; every writer of an out folder (StagedPrepare,
// tokenizer train, the .rec and EIT preparations) takes it before writing there, and checks
// the folder again under it (a preparation may have finished since its first look). out_dir
// is created (with its parents) when missing. UserError naming --out when it cannot be, and
// naming the holder's pid and the lock file when another open file description (another
// process, or another lock in this one) holds it.
// A lock released by an exception (the preparation failed: a bad field name, an unreadable
// input, text that is not UTF-8) removes the folders it created when --out holds nothing but
// the lock file: a failed run left a new --out holding only that. It removes the file while
// it still holds it, which FolderLock allows; a folder that existed before is never removed.
inline constexpr const char* kPrepareLockFile = ".prepare-lock";
class PrepareLock : public FolderLock {
 public:
  explicit PrepareLock(const std::string& out_dir);
  ~PrepareLock();
  PrepareLock(PrepareLock&&) = delete;

 private:
  PrepareLock(const std::string& out_dir, std::vector<std::filesystem::path> missing);
  std::vector<std::filesystem::path> created_;  // --out first, then the parents made for it
  int exceptions_when_taken_ = 0;               // std::uncaught_exceptions() then
};

// The files that mark the other kinds of preparation: ratings (train/prepare_rec.h) and a
// synthetic EIT set (its statistics, written last; train/prepare_eit.cpp).
inline constexpr char kInteractionsRecFile[] = "interactions.rec";
inline constexpr char kSyntheticRatingsFile[] = "ratings.dat";
inline constexpr char kEitMeanFile[] = "mean.pth";
inline constexpr char kEitStdFile[] = "std.pth";

// What a folder holds: one prepared data set. Text and prompt/response shards are one kind
// (--overwrite replaces either by the other).
enum class PreparedKind { shards, ratings, eit };

// Unless it is empty, UserError naming --out: `dir` holds a file of another kind of
// preparation than `mine` (token shards beside ratings, an EIT set beside shards ...), which
// would make one folder two data sets. --overwrite does not help: it replaces only its own
// kind's files.
void check_no_other_preparation(const std::string& dir, PreparedKind mine);

// (train|val)_NNNNNN.bin or .pairs: a file name a preparation writes (and replaces).
bool is_prepared_shard_name(const std::string& file_name);
// The index of a file named as an EIT set's writer (data/eit_dataset.h, write_eit_folder)
// names its samples in its split folders ("00042.npz", "123456.npz"; or that name + ".tmp",
// an unfinished one: *temporary says which), or -1 for any other name.
int64_t eit_sample_index(const std::string& filename, bool* temporary = nullptr);

// The first shard of a preparation in `dir` ((train|val)_NNNNNN.bin or .pairs, regular files
// or not), or "" when there is none: what --overwrite guards and `tokenizer train` refuses.
std::string first_prepared_shard(const std::string& dir);

}  // namespace ft
