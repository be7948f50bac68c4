#include "train/run_log.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <utility>
#include <vector>

#include "core/error.h"
#include "train/tensorboard.h"

namespace ft {

namespace {

// A logged step's metrics fields and their TensorBoard tags: grouped by prefix, so
// TensorBoard shows the training curves and the memory counts in sections of their own.
const std::pair<const char*, const char*> kStepTags[] = {
    {"loss", "train/loss"},
    {"lr", "train/lr"},
    {"grad_norm", "train/grad_norm"},
    {"tokens_per_s", "train/tokens_per_s"},
    {"mem_planned_bytes", "memory/planned_bytes"},
    {"mem_peak_bytes", "memory/peak_bytes"},
    {"mem_process_planned_bytes", "memory/process_planned_bytes"},
    {"host_rss_bytes", "memory/host_rss_bytes"},
};

std::vector<std::pair<std::string, double>> tensorboard_values(const nlohmann::json& row, RunLog::Row kind) {
  std::vector<std::pair<std::string, double>> values;
  if (kind == RunLog::Row::step) {
    for (const auto& [field, tag] : kStepTags) {
      auto it = row.find(field);
      if (it != row.end() && it->is_number()) values.emplace_back(tag, it->get<double>());
    }
  } else if (kind == RunLog::Row::eval) {
    // val_loss -> val/loss, val_perplexity -> val/perplexity: every metric the task reports.
    for (const auto& [field, value] : row.items())
      if (field.rfind("val_", 0) == 0 && value.is_number()) values.emplace_back("val/" + field.substr(4), value.get<double>());
  }
  return values;
}

// A run killed mid-row leaves the file's last row without its newline. Appended to, that
// row would swallow the next one into a line that is not JSON, in the middle of the file, where
// `report` refuses it; the row was lost with the kill (at most one: every row is flushed), so
// it goes, and the rows appended now start on lines of their own.
void drop_cut_row(const std::string& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f.good()) return;
  const std::streamoff size = f.tellg();
  std::streamoff keep = size;
  while (keep > 0) {
    f.seekg(keep - 1);
    if (f.get() == '\n') break;
    --keep;
  }
  if (keep == size) return;
  f.close();
  std::error_code ec;
  std::filesystem::resize_file(path, static_cast<uintmax_t>(keep), ec);
  FT_USER_CHECK(!ec, "--metrics-file ", path, ": cannot drop the row a kill cut short: ", ec.message());
}

}  // namespace

RunLog::RunLog(const std::string& metrics_file, const std::string& tensorboard_dir,
               std::chrono::steady_clock::time_point started)
    : started_(started) {
  if (!metrics_file.empty()) {
    auto parent = std::filesystem::path(metrics_file).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent);
    drop_cut_row(metrics_file);
    metrics_.open(metrics_file, std::ios::app);
    FT_USER_CHECK(metrics_.good(), "--metrics-file: cannot open ", metrics_file, " for appending");
    metrics_path_ = metrics_file;
  }
  if (!tensorboard_dir.empty()) tensorboard_ = std::make_unique<TensorBoardWriter>(tensorboard_dir);
}

RunLog::~RunLog() = default;

void RunLog::write(nlohmann::json row, Row kind) {
  if (!metrics_.is_open() && !tensorboard_) return;
  const double wall_time =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  row["wall_time"] = wall_time;
  row["elapsed_s"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  if (metrics_.is_open()) {
    metrics_ << row.dump() << "\n";
    metrics_.flush();
    if (!metrics_.good()) {  // a full disk: said once; the run goes on without its log
      std::fprintf(stderr, "warning: --metrics-file %s: a row could not be written (disk full?); no more rows are "
                   "logged\n", metrics_path_.c_str());
      metrics_.close();
    }
  }
  if (tensorboard_ && row.contains("step")) {
    tensorboard_->scalars(tensorboard_values(row, kind), row["step"].get<int64_t>(), wall_time);
    tensorboard_->flush();
  }
}

}  // namespace ft
