// Listing, choosing and pruning checkpoints in a run's checkpoint directory.
#include "train/checkpoint_dir.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <system_error>

#include "core/error.h"
#include "train/checkpoint.h"

namespace fs = std::filesystem;

namespace ft {
namespace {

constexpr const char* kPrefix = "ckpt_step_";
constexpr const char* kSuffix = ".ftc";

// "ckpt_step_<digits>.ftc" -> step.
std::optional<int64_t> parse_name(const std::string& name) {
  const std::string prefix = kPrefix, suffix = kSuffix;
  if (name.size() <= prefix.size() + suffix.size()) return std::nullopt;
  if (name.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  if (name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) return std::nullopt;
  const std::string digits =
      name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (digits.size() > 18) return std::nullopt;
  int64_t step = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    step = step * 10 + (c - '0');
  }
  return step;
}

void remove_file(const std::string& path) {
  std::error_code ec;
  fs::remove(path, ec);
  FT_USER_CHECK(!ec, "cannot delete checkpoint ", path, ": ", ec.message());
}

}  // namespace

std::string checkpoint_dir(const std::string& results_dir) {
  return (fs::path(results_dir) / "checkpoints").string();
}

std::string checkpoint_path(const std::string& dir, int64_t step) {
  FT_CHECK(step >= 0, "negative checkpoint step ", step);
  char name[64];
  std::snprintf(name, sizeof name, "%s%08" PRId64 "%s", kPrefix, step, kSuffix);
  return (fs::path(dir) / name).string();
}

std::vector<CheckpointFile> list_checkpoints(const std::string& dir) {
  std::vector<CheckpointFile> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  fs::directory_iterator it(dir, ec), end;
  FT_USER_CHECK(!ec, "cannot list checkpoint directory ", dir, ": ", ec.message());
  for (; it != end; it.increment(ec)) {
    FT_USER_CHECK(!ec, "cannot list checkpoint directory ", dir, ": ", ec.message());
    std::error_code ec2;
    if (!it->is_regular_file(ec2)) continue;
    if (auto step = parse_name(it->path().filename().string()))
      out.push_back({*step, it->path().string()});
  }
  // Equal steps (e.g. "ckpt_step_7.ftc" and "ckpt_step_00000007.ftc") order by path so the
  // result is deterministic.
  std::sort(out.begin(), out.end(), [](const CheckpointFile& a, const CheckpointFile& b) {
    return a.step != b.step ? a.step < b.step : a.path < b.path;
  });
  return out;
}

std::optional<CheckpointFile> latest_valid_checkpoint(const std::string& dir,
                                                      std::vector<std::string>* warnings) {
  const auto files = list_checkpoints(dir);
  for (auto it = files.rbegin(); it != files.rend(); ++it) {
    try {
      CheckpointReader r(it->path);
      r.verify_all();
      return *it;
    } catch (const UserError& e) {
      if (warnings) warnings->push_back(detail::concat("skipping checkpoint: ", e.what()));
    }
  }
  return std::nullopt;
}

std::vector<RunCheckpoint> run_checkpoints(const std::string& dir, const std::string& run_id,
                                           std::vector<std::string>* warnings, int64_t written_step) {
  std::vector<RunCheckpoint> out;
  for (const auto& f : list_checkpoints(dir)) {
    // Past the step just written: a later part of the run that it did not continue from (one
    // --resume auto skipped as damaged, or one left by a resume from an earlier file). Neither
    // counted nor deleted: counted, a damaged later file stood in for "the newest" and every
    // new checkpoint was deleted as soon as it was written.
    if (written_step >= 0 && f.step > written_step) continue;
    try {
      // open() checks header, metadata and table only: cheap even for large files.
      CheckpointReader r(f.path);
      const nlohmann::json& m = r.meta();
      const bool has_id = m.is_object() && m.contains("run_id");
      if (has_id && !(m["run_id"].is_string() && m["run_id"].get<std::string>() == run_id)) continue;
      out.push_back({f, m});
    } catch (const UserError& e) {
      if (warnings) warnings->push_back(detail::concat(e.what(), "; not pruning it (its run is unknown)"));
    }
  }
  return out;
}

std::vector<std::string> prune_checkpoints(const std::string& dir, int keep_last_k,
                                           std::vector<std::string>* warnings, const std::string& run_id,
                                           int64_t written_step) {
  std::vector<std::string> deleted;
  if (keep_last_k <= 0) return deleted;
  const auto files = run_checkpoints(dir, run_id, warnings, written_step);
  if (files.size() <= static_cast<size_t>(keep_last_k)) return deleted;
  const size_t n_delete = files.size() - static_cast<size_t>(keep_last_k);
  for (size_t i = 0; i < n_delete; ++i) {
    remove_file(files[i].file.path);
    deleted.push_back(files[i].file.path);
  }
  return deleted;
}

std::vector<std::string> prune_checkpoints_best(const std::string& dir, int keep_k,
                                                const std::string& metric_name,
                                                std::vector<std::string>* warnings,
                                                const std::string& run_id, int64_t written_step,
                                                int keep_last_k) {
  std::vector<std::string> deleted;
  if (keep_k <= 0 || keep_last_k <= 0) return deleted;
  const auto files = run_checkpoints(dir, run_id, warnings, written_step);
  const size_t newest_kept = std::min(files.size(), static_cast<size_t>(std::max(1, keep_last_k)));
  if (files.size() <= newest_kept) return deleted;

  struct Ranked {
    const CheckpointFile* file;
    double metric;
  };
  std::vector<Ranked> ranked;
  const double worst = std::numeric_limits<double>::infinity();
  for (const auto& f : files) {
    double m = worst;
    try {
      const nlohmann::json* v = nullptr;
      if (!metric_name.empty() && metric_name[0] == '/') {
        const nlohmann::json::json_pointer ptr(metric_name);
        if (f.meta.contains(ptr)) v = &f.meta.at(ptr);
      } else if (f.meta.is_object() && f.meta.contains(metric_name)) {
        v = &f.meta.at(metric_name);
      }
      // A checkpoint saved between evaluations has none (it is not measured): last, quietly.
      if (v && v->is_number() && !std::isnan(v->get<double>())) {
        m = v->get<double>();
      } else if (v && !v->is_null() && warnings) {
        warnings->push_back(detail::concat("checkpoint ", f.file.path, " has a '", metric_name,
                                           "' that is not a number in its metadata; ranking it last"));
      }
    } catch (const nlohmann::json::exception& e) {  // malformed JSON pointer
      throw UserError(detail::concat("invalid checkpoint metric '", metric_name, "': ", e.what()));
    }
    ranked.push_back({&f.file, m});
  }
  // Best first; among equals the newer step first.
  std::stable_sort(ranked.begin(), ranked.end(), [](const Ranked& a, const Ranked& b) {
    return a.metric != b.metric ? a.metric < b.metric : a.file->step > b.file->step;
  });
  // files is oldest first: its last newest_kept are the newest.
  auto is_newest = [&](const CheckpointFile* f) { return f->step >= files[files.size() - newest_kept].file.step; };
  for (size_t i = static_cast<size_t>(keep_k); i < ranked.size(); ++i) {
    if (is_newest(ranked[i].file)) continue;
    remove_file(ranked[i].file->path);
    deleted.push_back(ranked[i].file->path);
  }
  return deleted;
}

std::vector<std::string> clean_stale_tmp(const std::string& dir) {
  std::vector<std::string> removed;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return removed;
  fs::directory_iterator it(dir, ec), end;
  FT_USER_CHECK(!ec, "cannot list checkpoint directory ", dir, ": ", ec.message());
  for (; it != end; it.increment(ec)) {
    FT_USER_CHECK(!ec, "cannot list checkpoint directory ", dir, ": ", ec.message());
    std::error_code ec2;
    if (it->path().extension() == ".tmp" && it->is_regular_file(ec2))
      removed.push_back(it->path().string());
  }
  std::sort(removed.begin(), removed.end());
  for (const auto& p : removed) remove_file(p);
  return removed;
}

}  // namespace ft
