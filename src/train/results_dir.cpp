// The results folder of a training run: checked, locked, and owned by one run (see the header).
#include "train/results_dir.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <system_error>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "train/checkpoint.h"
#include "train/checkpoint_dir.h"
#include "train/model_io.h"

namespace fs = std::filesystem;

namespace ft {
namespace {

std::string errno_text(int e) { return std::strerror(e); }

// Writes and removes a probe file in dir; "" when it works, else why not.
std::string probe_write(const std::string& dir) {
  const std::string probe = (fs::path(dir) / (".fittrain_probe_" + std::to_string(::getpid()))).string();
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return errno_text(errno);
  const char byte = 'x';
  std::string why;
  if (::write(fd, &byte, 1) != 1) why = errno_text(errno);
  if (::close(fd) != 0 && why.empty()) why = errno_text(errno);
  if (::unlink(probe.c_str()) != 0 && why.empty()) why = errno_text(errno);
  return why;
}

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

// The run id in a checkpoint's metadata ("" when it has none).
std::string meta_run_id(const nlohmann::json& meta) {
  if (!meta.is_object() || !meta.contains("run_id") || !meta["run_id"].is_string()) return "";
  return meta["run_id"].get<std::string>();
}

std::string describe(const std::vector<CheckpointFile>& files) {
  std::ostringstream os;
  os << files.size() << " checkpoint" << (files.size() == 1 ? "" : "s") << ", newest " << files.back().path;
  return os.str();
}

}  // namespace

void check_results_dir(const std::string& results_dir) {
  FT_USER_CHECK(!results_dir.empty(), "--results-dir must not be empty");
  std::error_code ec;
  const auto st = fs::status(results_dir, ec);
  if (fs::exists(st)) {
    FT_USER_CHECK(fs::is_directory(st), "--results-dir ", results_dir, " exists and is not a directory");
  } else {
    fs::create_directories(results_dir, ec);
    FT_USER_CHECK(!ec, "--results-dir: cannot create ", results_dir, ": ", ec.message());
  }
  std::string why = probe_write(results_dir);
  FT_USER_CHECK(why.empty(), "--results-dir ", results_dir, " is not writable (", why, ")");
  const std::string ck = checkpoint_dir(results_dir);
  if (fs::is_directory(ck, ec)) {
    why = probe_write(ck);
    FT_USER_CHECK(why.empty(), "--results-dir ", results_dir, ": ", ck, " is not writable (", why, ")");
  }
}

std::string results_dir_holder(const std::string& results_dir) {
  std::ifstream in(fs::path(results_dir) / ".lock");
  std::string pid, who;
  std::getline(in, pid);
  std::getline(in, who);
  return pid.empty() ? std::string() : pid + "\n" + who;
}

std::string describe_holder(const std::string& holder) {
  if (holder.empty()) return "no lock file";
  const size_t nl = holder.find('\n');
  const std::string who = nl == std::string::npos ? std::string() : holder.substr(nl + 1);
  return "the lock of pid " + holder.substr(0, nl) + (who.empty() ? std::string() : " on " + who.substr(0, who.find(' ')));
}

std::string run_identity_path(const std::string& results_dir) {
  return (fs::path(results_dir) / "run.json").string();
}

std::optional<std::string> read_run_id(const std::string& results_dir) {
  const std::string path = run_identity_path(results_dir);
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::nullopt;
  std::ifstream f(path, std::ios::binary);
  FT_USER_CHECK(f.good(), "cannot read ", path);
  std::ostringstream os;
  os << f.rdbuf();
  nlohmann::json j = nlohmann::json::parse(os.str(), nullptr, false);
  FT_USER_CHECK(!j.is_discarded() && j.is_object() && j.contains("run_id") && j["run_id"].is_string() &&
                    !j["run_id"].get<std::string>().empty(),
                path, " is damaged (no run_id); it names the run this --results-dir belongs to: restore it, or "
                      "pass another --results-dir");
  return j["run_id"].get<std::string>();
}

void write_run_id(const std::string& results_dir, const std::string& run_id) {
  const std::string path = run_identity_path(results_dir), tmp = path + ".tmp";
  const std::string text = nlohmann::json{{"format", "fittrain-run"}, {"run_id", run_id}}.dump() + "\n";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  FT_USER_CHECK(fd >= 0, "--results-dir: cannot write ", tmp, ": ", errno_text(errno));
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && ::fsync(fd) == 0;
  const int e = errno;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e2 = ok ? errno : e;
    ::unlink(tmp.c_str());
    throw UserError(detail::concat("--results-dir: cannot write ", path, ": ", errno_text(e2)));
  }
  fsync_dir(results_dir);
}

std::string new_run_id() {
  std::random_device rd;  // getrandom / /dev/urandom on Linux
  char buf[33];
  for (int i = 0; i < 4; ++i) std::snprintf(buf + 8 * i, 9, "%08x", static_cast<unsigned>(rd()));
  return std::string(buf, 32);
}

std::optional<std::string> folder_run_id(const std::string& results_dir) {
  if (auto id = read_run_id(results_dir)) return id;
  const auto files = list_checkpoints(checkpoint_dir(results_dir));
  for (auto it = files.rbegin(); it != files.rend(); ++it) {
    try {
      const std::string id = meta_run_id(CheckpointReader(it->path).meta());
      if (!id.empty()) return id;
    } catch (const UserError&) {
    }
  }
  return std::nullopt;
}

ResumeDecision decide_resume(const std::string& resume, const std::string& results_dir,
                             std::vector<std::string>* warnings) {
  const std::string ckdir = checkpoint_dir(results_dir);
  const auto files = list_checkpoints(ckdir);
  const bool has_identity = read_run_id(results_dir).has_value();
  const std::optional<std::string> folder = folder_run_id(results_dir);
  ResumeDecision d;
  auto adopt = [&](const std::string& id) { d.run_id = id; };

  if (resume == "none") {
    FT_USER_CHECK(files.empty() && !has_identity, "--results-dir ", results_dir, " already holds ",
                  folder ? "run " + *folder + " (" : std::string("("),
                  files.empty() ? std::string("no checkpoints") : describe(files), ")",
                  "; a new run (--resume none) would mix with it: pass --resume auto to continue that run, "
                  "or another --results-dir for a new one");
    adopt(new_run_id());
    return d;
  }

  if (resume != "auto") {  // an explicit checkpoint file
    const nlohmann::json meta = CheckpointReader(resume).meta();  // UserError naming it if damaged
    const std::string ckpt_id = meta_run_id(meta);
    FT_USER_CHECK(!folder || ckpt_id.empty() || ckpt_id == *folder, "--resume ", resume, " belongs to run ",
                  ckpt_id, " but --results-dir ", results_dir, " holds run ", *folder,
                  "; pass another --results-dir to continue it there");
    // Going back to an earlier step of the folder's run would replace its later checkpoints
    // one by one as the steps come round again: saved work, kept unless moved away.
    const int64_t from = meta.value("step", int64_t{0});
    std::vector<int64_t> later;  // (a damaged file is no saved work of this run's to keep)
    for (const RunCheckpoint& c : run_checkpoints(ckdir, folder.value_or(std::string())))
      if (c.file.step > from) later.push_back(c.file.step);
    std::string steps;
    for (int64_t st : later) steps += (steps.empty() ? "" : ", ") + std::to_string(st);
    FT_USER_CHECK(later.empty(), "--resume ", resume, " goes back to step ", from, ", but ", ckdir,
                  " holds this run's later checkpoint", later.size() == 1 ? "" : "s", " (step", later.size() == 1 ? " " : "s ",
                  steps, "), which the resumed run would replace: move ", later.size() == 1 ? "it" : "them", " out of ",
                  ckdir, ", or pass another --results-dir to continue from step ", from, " there");
    d.checkpoint = resume;
    adopt(folder ? *folder : !ckpt_id.empty() ? ckpt_id : new_run_id());
    return d;
  }

  // auto: the newest valid checkpoint of the folder's run.
  std::vector<std::string> reasons;
  for (auto it = files.rbegin(); it != files.rend(); ++it) {
    try {
      CheckpointReader r(it->path);
      const std::string id = meta_run_id(r.meta());
      if (folder && !id.empty() && id != *folder) {
        reasons.push_back(detail::concat(it->path, ": belongs to run ", id, ", not to this folder's run ", *folder));
        continue;
      }
      r.verify_all();
      d.checkpoint = it->path;
      break;
    } catch (const UserError& e) {
      reasons.push_back(e.what());
    }
  }
  if (d.checkpoint.empty() && !files.empty()) {
    std::string list;
    for (const auto& r : reasons) list += "\n  " + r;
    throw UserError(detail::concat(
        "--resume auto: none of the ", files.size(), " checkpoint", files.size() == 1 ? "" : "s", " in ", ckdir,
        " is valid; refusing to start over them (their parameters may still be recoverable):", list,
        "\nmove them out of ", ckdir, " to start again there, or pass another --results-dir"));
  }
  if (warnings)
    for (const auto& r : reasons) warnings->push_back("skipping checkpoint: " + r);
  adopt(folder ? *folder : new_run_id());
  return d;
}

ResultsDir::ResultsDir(const RunConfig& rc, std::optional<ResultsDirLock>& lock) : results_dir_(rc.results_dir) {
  check_results_dir(rc.results_dir);
  if (!lock) lock.emplace(rc.results_dir);
  std::vector<std::string> warnings;
  decision_ = decide_resume(rc.resume, rc.results_dir, &warnings);
  for (const auto& w : warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
}

void ResultsDir::start(TrainState& st) const { st.run_id = decision_.run_id; }

void ensure_run_identity(const std::string& results_dir, const std::string& run_id) {
  FT_CHECK(!run_id.empty(), "no run id");
  const auto have = read_run_id(results_dir);
  if (!have) return write_run_id(results_dir, run_id);
  FT_CHECK(*have == run_id, run_identity_path(results_dir), " names run ", *have, " but this run is ", run_id);
}

}  // namespace ft
