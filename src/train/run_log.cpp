#include "train/run_log.h"

#include <filesystem>
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

}  // namespace

RunLog::RunLog(const std::string& metrics_file, const std::string& tensorboard_dir,
               std::chrono::steady_clock::time_point started)
    : started_(started) {
  if (!metrics_file.empty()) {
    auto parent = std::filesystem::path(metrics_file).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent);
    metrics_.open(metrics_file, std::ios::app);
    FT_USER_CHECK(metrics_.good(), "--metrics-file: cannot open ", metrics_file, " for appending");
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
  }
  if (tensorboard_ && row.contains("step")) {
    tensorboard_->scalars(tensorboard_values(row, kind), row["step"].get<int64_t>(), wall_time);
    tensorboard_->flush();
  }
}

}  // namespace ft
