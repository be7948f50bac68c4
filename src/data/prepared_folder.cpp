#include "data/prepared_folder.h"

#include <filesystem>
#include <regex>

#include "core/error.h"

namespace ft {
namespace fs = std::filesystem;

PrepareLock::PrepareLock(const std::string& out_dir)
    : FolderLock(out_dir, kPrepareLockFile, "--out", "fittrain prepare or tokenizer train", /*create_folder=*/true) {}

bool is_prepared_shard_name(const std::string& file_name) {
  static const std::regex ours(R"((train|val)_[0-9]{6}\.(bin|pairs))");
  return std::regex_match(file_name, ours);
}

void check_no_other_preparation(const std::string& dir, PreparedKind mine) {
  std::error_code ec;
  auto has = [&](const char* name) { return fs::exists(fs::path(dir) / name, ec); };
  std::string found, kind;
  if (const std::string shard = first_prepared_shard(dir); mine != PreparedKind::shards && !shard.empty())
    found = shard, kind = "token or prompt/response shards";
  else if (mine != PreparedKind::ratings && (has(kInteractionsRecFile) || has(kSyntheticRatingsFile)))
    found = has(kInteractionsRecFile) ? kInteractionsRecFile : kSyntheticRatingsFile, kind = "ratings for --task rec";
  else if (mine != PreparedKind::eit && (has(kEitMeanFile) || has(kEitStdFile)))
    found = has(kEitMeanFile) ? kEitMeanFile : kEitStdFile, kind = "an EIT set for --task diffusion";
  FT_USER_CHECK(found.empty(), "--out ", dir, " holds ", found, ", from another kind of preparation (", kind,
                "): one folder holds one prepared data set, and --overwrite replaces only its own kind's files; ",
                "use another --out");
}

std::string first_prepared_shard(const std::string& dir) {
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (is_prepared_shard_name(it->path().filename().string())) return it->path().filename().string();
  return "";
}

}  // namespace ft
