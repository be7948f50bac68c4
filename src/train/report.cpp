// `fittrain report` (train/report.h): metrics and checkpoint metadata -> HTML and PNGs.
#include "train/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>

#include "core/error.h"
#include "plan/memory_plan.h"
#include "train/build_info.h"
#include "train/chart.h"
#include "train/checkpoint.h"
#include "train/checkpoint_dir.h"

namespace ft {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The page's charts are this size (CSS scales them to the column); the PNGs are larger,
// for slides and READMEs.
constexpr int kSvgWidth = 560, kSvgHeight = 300;
constexpr int kPngWidth = 800, kPngHeight = 450;

std::optional<double> number(const json& row, const char* field) {
  auto it = row.find(field);
  if (it == row.end() || !it->is_number()) return std::nullopt;
  const double v = it->get<double>();
  return std::isfinite(v) ? std::optional<double>(v) : std::nullopt;
}

// field against step, scaled; one point per step, the later row winning (see report.h).
std::vector<std::pair<double, double>> points(const std::vector<json>& rows, const char* field, double scale = 1.0) {
  std::map<double, double> by_step;
  for (const json& r : rows) {
    const auto step = number(r, "step"), v = number(r, field);
    if (step && v) by_step[*step] = *v * scale;
  }
  return {by_step.begin(), by_step.end()};
}


std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// A metadata or metrics value as a reader wants it: byte counts with units, floats short.
std::string show_value(const std::string& key, const json& v) {
  if (v.is_number_unsigned() || v.is_number_integer()) {
    if (key.find("bytes") != std::string::npos && v.get<int64_t>() >= 0) return format_bytes(v.get<size_t>());
    return std::to_string(v.get<int64_t>());
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (key == "lr" || std::abs(d) < 1e-3) return fmt("%.3g", d);
    if (key == "tokens_per_s" || std::abs(d) >= 1e4) return fmt("%.0f", d);
    return fmt("%.4f", d);
  }
  if (v.is_string()) return v.get<std::string>();
  if (v.is_boolean()) return v.get<bool>() ? "yes" : "no";
  return v.dump();
}

void table_row(std::string& o, const std::string& key, const std::string& value) {
  o += "<tr><th>" + xml_escape(key) + "</th><td>" + xml_escape(value) + "</td></tr>\n";
}

// Rows of a JSON object's fields in the listed order, then (when rest) the others.
void object_rows(std::string& o, const json& obj, const std::vector<std::string>& order, bool rest,
                 const std::string& prefix = "") {
  if (!obj.is_object()) return;
  for (const std::string& k : order)
    if (obj.contains(k)) table_row(o, prefix + k, show_value(k, obj[k]));
  if (!rest) return;
  for (auto it = obj.begin(); it != obj.end(); ++it)
    if (std::find(order.begin(), order.end(), it.key()) == order.end() && !it->is_structured())
      table_row(o, prefix + it.key(), show_value(it.key(), *it));
}

void tile(std::string& o, const std::string& label, const std::string& value, const std::string& detail) {
  o += "<div class=\"tile\"><div class=\"label\">" + xml_escape(label) + "</div><div class=\"value\">" +
       xml_escape(value) + "</div><div class=\"detail\">" + xml_escape(detail) + "</div></div>\n";
}

constexpr const char* kStyle = R"(
:root { color-scheme: light; }
* { box-sizing: border-box; }
body { margin: 0; background: #f5f6f8; color: #111827;
  font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif; }
main { max-width: 1180px; margin: 0 auto; padding: 28px 24px 40px; }
h1 { font-size: 26px; margin: 0 0 4px; letter-spacing: -0.01em; }
h2 { font-size: 16px; margin: 0 0 10px; }
.sub { color: #4b5563; margin: 0 0 20px; font-size: 14px; word-break: break-all; }
.sub code { background: #e5e7eb; padding: 1px 5px; border-radius: 4px; font-size: 13px; }
.tiles { display: grid; grid-template-columns: repeat(4, 1fr); gap: 14px; margin-bottom: 18px; }
.tile, .card { background: #fff; border: 1px solid #e5e7eb; border-radius: 10px; }
.tile { padding: 12px 16px; }
.tile .label { color: #6b7280; font-size: 12px; text-transform: uppercase; letter-spacing: 0.05em; }
.tile .value { font-size: 24px; font-weight: 600; font-variant-numeric: tabular-nums; }
.tile .detail { color: #6b7280; font-size: 13px; }
.charts { display: grid; grid-template-columns: 1fr 1fr; gap: 14px; margin-bottom: 18px; }
.card { padding: 8px 10px 4px; margin: 0; }
.card svg { width: 100%; height: auto; display: block; }
.tables { display: grid; grid-template-columns: 1fr 1fr; gap: 14px; align-items: start; }
.tables .card { padding: 14px 18px; }
table { border-collapse: collapse; width: 100%; font-size: 14px; }
th, td { text-align: left; padding: 5px 8px; border-bottom: 1px solid #f0f1f3; vertical-align: top; }
th { font-weight: 500; color: #4b5563; width: 45%; }
td { font-variant-numeric: tabular-nums; word-break: break-all; }
tr.group th { color: #111827; font-weight: 600; padding-top: 12px; }
.note { color: #92400e; font-size: 13px; }
@media (max-width: 800px) { .charts, .tables, .tiles { grid-template-columns: 1fr; } }
)";

}  // namespace

std::vector<json> read_metrics(const std::string& path) {
  std::error_code ec;
  FT_USER_CHECK(fs::is_regular_file(path, ec), path, ": no metrics file (train with --metrics-file ", path,
                ", or name the file with report --metrics-file)");
  std::ifstream f(path);
  FT_USER_CHECK(f.good(), path, ": cannot read the metrics file");
  std::vector<json> rows;
  std::string line;
  for (int n = 1; std::getline(f, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    json j = json::parse(line, nullptr, false);
    // A last line without its newline is a row being written (a run in progress) or cut by a
    // kill: the rows before it are the report.
    if (j.is_discarded() && f.eof()) break;
    FT_USER_CHECK(!j.is_discarded() && j.is_object(), path, ":", n, ": not a JSON object: ",
                  line.size() > 80 ? line.substr(0, 80) + "..." : line);
    rows.push_back(std::move(j));
  }
  FT_USER_CHECK(!rows.empty(), path, ": the metrics file is empty (no rows logged yet?)");
  return rows;
}

std::vector<Chart> report_charts(const std::vector<json>& rows) {
  std::vector<Chart> charts;
  Chart loss{"loss", "Loss", "step", "loss", {}, false};
  loss.series.push_back({"train", "#2563eb", points(rows, "loss")});
  loss.series.push_back({"validation", "#ea580c", points(rows, "val_loss"), true});
  charts.push_back(loss);

  Chart lr{"lr", "Learning rate", "step", "learning rate", {}, true};
  lr.series.push_back({"lr", "#7c3aed", points(rows, "lr")});
  charts.push_back(lr);

  Chart tps{"throughput", "Throughput", "step", "tokens / s", {}, true};
  tps.series.push_back({"tokens/s", "#059669", points(rows, "tokens_per_s")});
  charts.push_back(tps);

  // GiB for real models; MiB keeps a small run's ticks readable (0.0125 GiB says little).
  double most = 0;
  for (const char* f : {"mem_planned_bytes", "mem_peak_bytes", "mem_process_planned_bytes"})
    for (auto [x, y] : points(rows, f)) most = std::max(most, y);
  const bool gib = most >= 1024.0 * 1024 * 1024;
  const double unit = gib ? 1.0 / (1024.0 * 1024 * 1024) : 1.0 / (1024.0 * 1024);
  Chart mem{"memory", "Memory", "step", gib ? "GiB" : "MiB", {}, true};
  mem.series.push_back({"process planned", "#64748b", points(rows, "mem_process_planned_bytes", unit)});
  mem.series.push_back({"arena peak", "#dc2626", points(rows, "mem_peak_bytes", unit)});
  // Dashed: on the CPU (and often on a GPU) the peak is the whole arena and the lines meet.
  mem.series.push_back({"arena planned", "#2563eb", points(rows, "mem_planned_bytes", unit), false, true});
  charts.push_back(mem);
  return charts;
}

std::string render_report_html(const RunSummary& s, const std::vector<Chart>& charts) {
  const json& meta = s.checkpoint_meta;
  const json& last = s.last_train_row;
  std::string o = "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
                  "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>fittrain report: " +
                  xml_escape(s.run_dir) + "</title>\n<style>" + kStyle + "</style>\n</head>\n<body>\n<main>\n";
  o += "<h1>Training report</h1>\n<p class=\"sub\">run <code>" + xml_escape(s.run_dir) + "</code> &middot; metrics <code>" +
       xml_escape(s.metrics_file) + "</code> (" + std::to_string(s.rows) + " rows) &middot; " +
       xml_escape(build_info().substr(0, build_info().find('\n'))) + "</p>\n";

  // The numbers one looks for first.
  o += "<section class=\"tiles\">\n";
  auto pick = [](const json& j, const char* k) { return j.is_object() ? number(j, k) : std::nullopt; };
  const auto step = pick(last, "step");
  tile(o, "Step", step ? fmt("%.0f", *step) : "-",
       meta.is_object() && meta.contains("tokens_seen") ? show_value("", meta["tokens_seen"]) + " tokens seen" : "");
  const auto loss = pick(last, "loss");
  tile(o, "Train loss", loss ? fmt("%.4f", *loss) : "-", "last logged step");
  const auto val = charts.empty() ? std::vector<std::pair<double, double>>{} : charts[0].series[1].points;
  auto best = std::min_element(val.begin(), val.end(), [](auto& a, auto& b) { return a.second < b.second; });
  tile(o, "Best val loss", best != val.end() ? fmt("%.4f", best->second) : "-",
       best != val.end() ? fmt("at step %.0f", best->first) : "no evaluation logged");
  const auto tps = pick(last, "tokens_per_s");
  tile(o, "Throughput", tps ? fmt("%.0f", *tps) : "-", "tokens/s, last logged step");
  o += "</section>\n<section class=\"charts\">\n";
  for (const Chart& c : charts) o += "<figure class=\"card\">\n" + chart_svg(c, kSvgWidth, kSvgHeight) + "</figure>\n";
  o += "</section>\n<section class=\"tables\">\n";

  o += "<div class=\"card\">\n<h2>Checkpoint</h2>\n";
  if (meta.is_object()) {
    o += "<table>\n";
    table_row(o, "file", s.checkpoint_path);
    object_rows(o, meta, {"task", "step", "global_batch_size", "precision", "tokens_seen", "val_loss", "world_size",
                          "global_seed", "skipped_updates", "run_id"}, false);
    if (meta.contains("tokenizer") && meta["tokenizer"].is_object() && meta["tokenizer"].contains("identity"))
      table_row(o, "tokenizer", show_value("", meta["tokenizer"]["identity"]));
    if (meta.contains("model") && meta["model"].is_object()) {
      o += "<tr class=\"group\"><th colspan=\"2\">Model</th></tr>\n";
      object_rows(o, meta["model"], {"arch", "n_layer", "n_head", "n_embd", "seq_len", "vocab_size"}, true);
    }
    o += "</table>\n";
  } else {
    o += "<p>No readable checkpoint in <code>" + xml_escape(checkpoint_dir(s.run_dir)) + "</code>.</p>\n";
  }
  for (const std::string& n : s.notes) o += "<p class=\"note\">" + xml_escape(n) + "</p>\n";
  o += "</div>\n<div class=\"card\">\n<h2>Last metrics row</h2>\n";
  if (last.is_object()) {
    o += "<table>\n";
    object_rows(o, last, {"step", "loss", "lr", "grad_norm", "tokens_per_s", "micro_batch_size", "grad_accum_steps",
                          "mem_planned_bytes", "mem_peak_bytes", "mem_measured_bytes", "mem_process_planned_bytes",
                          "host_rss_bytes", "elapsed_s", "wall_time"}, false);
    if (s.last_eval_row.is_object()) {
      o += "<tr class=\"group\"><th colspan=\"2\">Last evaluation</th></tr>\n";
      object_rows(o, s.last_eval_row, {"step", "val_loss"}, true);
    }
    o += "</table>\n";
  } else {
    o += "<p>No training row (with a loss) in the metrics file.</p>\n";
  }
  o += "</div>\n</section>\n</main>\n</body>\n</html>\n";
  return o;
}

ReportFiles write_report(const ReportOptions& opt) {
  std::error_code ec;
  FT_USER_CHECK(!opt.run_dir.empty(), "report: give the run's folder (its --results-dir)");
  FT_USER_CHECK(fs::is_directory(opt.run_dir, ec), opt.run_dir, ": no such run folder (give the run's --results-dir)");
  RunSummary s;
  s.run_dir = opt.run_dir;
  s.metrics_file = opt.metrics_file.empty() ? (fs::path(opt.run_dir) / "metrics.jsonl").string() : opt.metrics_file;
  const std::vector<json> rows = read_metrics(s.metrics_file);
  s.rows = rows.size();
  for (const json& r : rows) {
    if (number(r, "loss") && number(r, "step")) s.last_train_row = r;
    if (number(r, "val_loss") && number(r, "step")) s.last_eval_row = r;
  }
  // The newest checkpoint whose header and metadata check out (their CRCs are verified on
  // open). The payloads are not read: the report needs only the metadata, and verifying
  // every byte of a multi-GB checkpoint would make a report take minutes.
  const std::vector<CheckpointFile> cks = list_checkpoints(checkpoint_dir(opt.run_dir));
  for (auto it = cks.rbegin(); it != cks.rend(); ++it) {
    try {
      CheckpointReader r(it->path);
      s.checkpoint_path = it->path;
      s.checkpoint_meta = r.meta();
      break;
    } catch (const UserError& e) {
      s.notes.push_back(std::string("skipped ") + e.what());
    }
  }
  const std::vector<Chart> charts = report_charts(rows);

  const std::string out = opt.out_dir.empty() ? (fs::path(opt.run_dir) / "report").string() : opt.out_dir;
  fs::create_directories(out, ec);
  FT_USER_CHECK(fs::is_directory(out, ec), "--out ", out, ": cannot create the folder");
  ReportFiles files;
  files.html = (fs::path(out) / "report.html").string();
  {
    std::ofstream f(files.html, std::ios::trunc);
    f << render_report_html(s, charts);
    FT_USER_CHECK(f.good(), files.html, ": cannot write the report");
  }
  for (const Chart& c : charts) {
    files.images.push_back((fs::path(out) / (c.name + ".png")).string());
    write_png(files.images.back(), chart_image(c, kPngWidth, kPngHeight));
  }
  return files;
}

}  // namespace ft
