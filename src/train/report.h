// `fittrain report RUN_DIR`: a self-contained report of a training run, read from what the
// run left behind: its metrics file (JSON lines written by `train --metrics-file`) and the
// metadata of its newest checkpoint. It writes
//   report.html  inline SVG charts and the run's settings; no scripts, no external files,
//                so it can be mailed, archived or opened offline;
//   loss.png, lr.png, throughput.png, memory.png  the same charts as images (train/png.h).
// Only files are read: a report can be made while the run is still training (it shows
// the rows written so far) and takes no lock on the results folder.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "train/chart.h"

namespace ft {

struct ReportOptions {
  std::string run_dir;       // the run's --results-dir
  std::string metrics_file;  // empty: <run_dir>/metrics.jsonl
  std::string out_dir;       // empty: <run_dir>/report
};

// The rows of a metrics file, in file order; blank lines are skipped, and so is a last line
// cut before its newline (a row being written, or a run killed mid-write). UserError naming
// the file when it is missing or holds no rows, and naming file and line for another line
// that is not a JSON object.
std::vector<nlohmann::json> read_metrics(const std::string& path);

// The four charts: loss (train and validation), learning rate, throughput, memory. A row
// lacking a chart's field (or holding null: a non-finite value) is left out of that chart.
// When a step appears more than once (a resumed run logs again the steps after its
// checkpoint), the later row wins: it belongs to the run that went on.
std::vector<Chart> report_charts(const std::vector<nlohmann::json>& rows);

// What the page's tables show besides the charts.
struct RunSummary {
  std::string run_dir, metrics_file;
  size_t rows = 0;
  std::string checkpoint_path;       // empty: no readable checkpoint
  nlohmann::json checkpoint_meta;    // null without one
  nlohmann::json last_train_row;     // the last row with a train loss (null: none)
  nlohmann::json last_eval_row;      // the last row with val_loss (null: none)
  std::vector<std::string> notes;    // e.g. checkpoints that could not be read
};

std::string render_report_html(const RunSummary& summary, const std::vector<Chart>& charts);

struct ReportFiles {
  std::string html;
  std::vector<std::string> images;
};
// Reads the run, writes the report (the folder is created), returns the paths written.
ReportFiles write_report(const ReportOptions& opt);

}  // namespace ft
