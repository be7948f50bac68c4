// TokenDataset and data-spec resolution; see dataset.h.
#include "data/dataset.h"

#include <glob.h>

#include <algorithm>
#include <filesystem>

#include "core/error.h"

namespace ft {
namespace fs = std::filesystem;

bool has_glob_chars(const std::string& s) { return s.find_first_of("*?[") != std::string::npos; }

std::vector<std::string> data_path_parts(const std::string& spec) {
  std::vector<std::string> parts;
  for (size_t a = 0; !spec.empty() && a <= spec.size();) {
    const size_t b = std::min(spec.find(',', a), spec.size());
    parts.push_back(spec.substr(a, b - a));
    a = b + 1;
  }
  return parts;
}

namespace {

std::vector<std::string> folder_files(const std::string& dir, const std::string& flag, const std::string& ext) {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    // Every *.bin but folders: a FIFO or device named *.bin is refused by name when opened
    // rather than silently skipped.
    if (it->path().extension() == ext && !it->is_directory()) out.push_back(it->path().string());
  }
  FT_USER_CHECK(!ec, flag, ": cannot list folder ", dir, ": ", ec.message());
  std::sort(out.begin(), out.end());
  if (out.empty()) {
    // The other kind of shards is there: say which task reads them.
    const std::string other = ext == ".bin" ? ".pairs" : ".bin";
    bool has_other = false;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end && !has_other; it.increment(ec))
      has_other = it->path().extension() == other;
    throw UserError(detail::concat(flag, ": folder ", dir, " contains no *", ext,
                                   ext == ".bin" ? " token shards" : " prompt/response shards",
                                   !has_other           ? ""
                                   : ext == ".bin"      ? " but *.pairs prompt/response shards: train them with --task chat"
                                                        : " but *.bin token shards: train them with --task lm"));
  }
  return out;
}

std::vector<std::string> glob_files(const std::string& pattern, const std::string& flag) {
  glob_t g{};
  const int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
  std::vector<std::string> out;
  if (rc == 0) {
    for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  }
  ::globfree(&g);
  FT_USER_CHECK(rc != GLOB_NOSPACE && rc != GLOB_ABORTED, flag, ": cannot expand glob ", pattern);
  FT_USER_CHECK(!out.empty(), flag, ": no file matches the glob ", pattern);
  std::sort(out.begin(), out.end());  // glob sorts already; make the order explicit
  return out;
}

}  // namespace

std::vector<std::string> resolve_data_files(const std::string& spec, const std::string& flag,
                                            const std::string& ext) {
  FT_USER_CHECK(!spec.empty(), flag, ": empty data path");
  std::error_code ec;
  if (fs::is_directory(spec, ec)) return folder_files(spec, flag, ext);
  if (fs::exists(spec, ec)) return {spec};
  if (has_glob_chars(spec)) return glob_files(spec, flag);
  throw UserError(detail::concat(flag, ": no such file or folder: ", spec));
}

std::vector<std::string> resolve_split(const std::string& spec, const std::string& split,
                                       const std::string& flag, const std::string& ext) {
  FT_CHECK(split == "train" || split == "val", "unknown split ", split);
  std::vector<std::string> files = resolve_data_files(spec, flag, ext);
  std::error_code ec;
  const bool single_file = !fs::is_directory(spec, ec) && !has_glob_chars(spec);
  if (single_file) {
    if (split == "train") return files;
    return {};
  }
  auto name_has = [](const std::string& f, const char* word) {
    return fs::path(f).filename().string().find(word) != std::string::npos;
  };
  bool any_named = false;
  for (const auto& f : files) any_named |= name_has(f, "train") || name_has(f, "val");
  if (!any_named) {
    if (split == "train") return files;
    return {};
  }
  std::vector<std::string> out;
  for (const auto& f : files) {
    if (name_has(f, split.c_str())) out.push_back(f);
  }
  FT_USER_CHECK(split != "train" || !out.empty(), flag, ": ", spec,
                " has *val* shards but no shard whose name contains 'train'");
  return out;
}

TokenDataset::TokenDataset(const std::string& spec, int seq_len, uint32_t vocab_size,
                           const std::string& flag, const std::optional<ScanCacheOptions>& scan_cache)
    : seq_len_(seq_len), vocab_size_(vocab_size), flag_(flag) {
  open(resolve_data_files(spec, flag), scan_cache);
}

TokenDataset::TokenDataset(const std::vector<std::string>& files, int seq_len,
                           uint32_t vocab_size, const std::string& flag,
                           const std::optional<ScanCacheOptions>& scan_cache)
    : seq_len_(seq_len), vocab_size_(vocab_size), flag_(flag) {
  FT_USER_CHECK(!files.empty(), flag, ": no token shard files given");
  open(files, scan_cache);
}

void TokenDataset::open(const std::vector<std::string>& files, const std::optional<ScanCacheOptions>& scan_cache) {
  FT_USER_CHECK(seq_len_ > 0, flag_, ": sequence length T=", seq_len_, " must be positive");
  FT_USER_CHECK(vocab_size_ > 0 && vocab_size_ <= uint32_t{INT32_MAX}, flag_, ": vocab size ",
                vocab_size_, " is out of range");
  shards_.reserve(files.size());
  offsets_.assign(1, 0);
  const std::string* largest = nullptr;
  size_t largest_n = 0;
  const ScanCacheOptions cache = scan_cache ? *scan_cache : ScanCacheOptions{default_scan_cache_dir()};
  for (const auto& f : files) {
    try {
      shards_.emplace_back(f);
    } catch (const UserError& e) {
      throw UserError(detail::concat(e.what(), " (", flag_, ")"));
    }
    const TokenShard& shard = shards_.back();
    // Every token below the vocabulary, checked now: bad data stops the run before step 1,
    // not at the step that happens to draw it.
    const ShardScan scan = scan_shard(shard, cache);
    from_cache_ += scan.from_cache ? 1 : 0;
    // (A cached maximum that the file does not bear out is ignored: only a token found is
    // reported. read_sample checks every token it copies besides.)
    const size_t pos = scan.max_token >= vocab_size_ ? shard.first_token_at_least(vocab_size_) : shard.size();
    if (pos < shard.size()) {
      const uint32_t tok = shard.token(pos);
      throw UserError(detail::concat(
          f, ": token ", tok, " at position ", pos, " (byte offset ",
          kShardHeaderBytes + pos * static_cast<size_t>(shard.token_bytes()),
          ") is outside the vocabulary (vocab size ", vocab_size_, ", so tokens must be below ", vocab_size_,
          "; the shard's largest token is ", scan.max_token,
          "); was this data tokenized for another model? (", flag_, ")"));
    }
    const size_t n = shard.size();
    const uint64_t samples = n == 0 ? 0 : (n - 1) / static_cast<uint64_t>(seq_len_);
    offsets_.push_back(offsets_.back() + samples);
    if (largest == nullptr || n > largest_n) {
      largest = &f;
      largest_n = n;
    }
  }
  FT_USER_CHECK(num_samples() > 0, flag_, ": sequence length T=", seq_len_,
                " is longer than the data in ", *largest, " (", largest_n, " tokens",
                files.size() > 1 ? ", the largest of its shards" : "",
                "); a sample needs T+1 tokens");
}

uint64_t TokenDataset::num_tokens() const {
  uint64_t n = 0;
  for (const auto& s : shards_) n += s.size();
  return n;
}

void TokenDataset::read_sample(uint64_t idx, int32_t* inputs, int32_t* targets) const {
  FT_CHECK(idx < num_samples(), "sample ", idx, " out of range (", num_samples(), " samples)");
  // offsets_ is sorted; the shard is the last one whose first sample is <= idx.
  const auto it = std::upper_bound(offsets_.begin(), offsets_.end(), idx);
  const size_t s = static_cast<size_t>(it - offsets_.begin()) - 1;
  const TokenShard& shard = shards_[s];
  const size_t T = static_cast<size_t>(seq_len_);
  const size_t base = static_cast<size_t>(idx - offsets_[s]) * T;
  for (size_t t = 0; t <= T; ++t) {
    const uint32_t tok = shard.token(base + t);
    if (tok >= vocab_size_) [[unlikely]] {
      throw UserError(detail::concat(shard.path(), ": token ", tok, " at position ", base + t,
                                     " is outside the vocabulary (vocab size ", vocab_size_,
                                     "); was this data tokenized for another model? (",
                                     flag_, ")"));
    }
    if (t < T) inputs[t] = static_cast<int32_t>(tok);
    if (t > 0) targets[t - 1] = static_cast<int32_t>(tok);
  }
}

std::vector<FieldSpec> TokenDataset::fields() const {
  return {FieldSpec{"tokens", DType::i32, seq_len_}, FieldSpec{"targets", DType::i32, seq_len_}};
}

}  // namespace ft
