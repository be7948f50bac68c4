#include "data/prepared_folder.h"

#include <filesystem>
#include <exception>
#include <regex>

#include "core/error.h"

namespace ft {
namespace fs = std::filesystem;

namespace {
// The folders of `dir` that do not exist yet: it, then each missing parent.
std::vector<fs::path> missing_folders(const std::string& dir) {
  std::vector<fs::path> missing;
  std::error_code ec;
  fs::path p = fs::path(dir).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();  // "out/"
  for (; !p.empty() && !fs::exists(fs::symlink_status(p, ec)); p = p.parent_path()) missing.push_back(p);
  return missing;
}
}  // namespace

PrepareLock::PrepareLock(const std::string& out_dir) : PrepareLock(out_dir, missing_folders(out_dir)) {}

// The folders are listed before the base class creates them (arguments come first).
PrepareLock::PrepareLock(const std::string& out_dir, std::vector<fs::path> missing)
    : FolderLock(out_dir, kPrepareLockFile, "--out", "fittrain prepare or tokenizer train", /*create_folder=*/true),
      created_(std::move(missing)),
      exceptions_when_taken_(std::uncaught_exceptions()) {}

PrepareLock::~PrepareLock() {
  if (created_.empty() || std::uncaught_exceptions() <= exceptions_when_taken_) return;
  std::error_code ec;
  const fs::path& out = created_.front();
  for (fs::directory_iterator it(out, ec), end; !ec && it != end; it.increment(ec))
    if (it->path().filename() != kPrepareLockFile) return;  // written by this run or another: kept
  if (ec) return;
  fs::remove(out / kPrepareLockFile, ec);
  for (const fs::path& d : created_)
    if (!fs::remove(d, ec)) break;  // a parent that now holds something else stays
}

bool is_prepared_shard_name(const std::string& file_name) {
  static const std::regex ours(R"((train|val)_[0-9]{6}\.(bin|pairs))");
  return std::regex_match(file_name, ours);
}

int64_t eit_sample_index(const std::string& filename, bool* temporary) {
  // The names write_eit_folder gives: "%05lld.npz", and write_file_atomic's "<name>.tmp"
  // while one is being written.
  std::string name = filename;
  const bool temp = name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0;
  if (temp) name.resize(name.size() - 4);
  if (name.size() <= 4 || name.compare(name.size() - 4, 4, ".npz") != 0) return -1;
  const std::string digits = name.substr(0, name.size() - 4);
  // 5 digits, or more without a leading zero (%05lld of 100000 and up); 18 fit an int64_t.
  if (digits.size() < 5 || digits.size() > 18 || digits.find_first_not_of("0123456789") != std::string::npos ||
      (digits.size() > 5 && digits[0] == '0'))
    return -1;
  if (temporary) *temporary = temp;
  return std::stoll(digits);
}

namespace {
// The first of an EIT set's numbered samples in its split folders, as "train/00000.npz", or "".
// The set's statistics are written last, so a preparation cut short leaves samples without
// them: still a data set of that kind.
std::string first_eit_sample(const std::string& dir) {
  for (const char* split : {"train", "valid", "test"}) {
    std::error_code ec;
    for (fs::directory_iterator it(fs::path(dir) / split, ec), end; !ec && it != end; it.increment(ec))
      if (eit_sample_index(it->path().filename().string()) >= 0)
        return (fs::path(split) / it->path().filename()).string();
  }
  return "";
}
}  // namespace

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
  else if (const std::string sample = mine != PreparedKind::eit ? first_eit_sample(dir) : ""; !sample.empty())
    found = sample, kind = "an unfinished EIT set for --task diffusion (no mean.pth yet)";
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
