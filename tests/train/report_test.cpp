// fittrain report: the PNG encoder (decoded here with zlib, independently of the writer's
// code path), the charts' axes, the metrics reader's errors, the HTML, and the command end to end.
#include "train/report.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>

#include "cli/cli_util.h"
#include "core/error.h"
#include "train/png.h"
#include "train/run_log.h"

namespace ft {
namespace {

using nlohmann::json;

uint32_t be32(const std::string& s, size_t at) {
  return (uint32_t(uint8_t(s[at])) << 24) | (uint32_t(uint8_t(s[at + 1])) << 16) | (uint32_t(uint8_t(s[at + 2])) << 8) |
         uint32_t(uint8_t(s[at + 3]));
}

struct Decoded {
  uint32_t width = 0, height = 0;
  std::string ihdr;
  std::vector<std::string> chunk_types;
  std::string raw;  // inflated scanlines, each led by its filter byte
  Rgb pixel(int x, int y) const {
    const size_t at = size_t(y) * (size_t(width) * 3 + 1) + 1 + size_t(x) * 3;
    return {uint8_t(raw[at]), uint8_t(raw[at + 1]), uint8_t(raw[at + 2])};
  }
};

// A minimal PNG reader: checks the signature and every chunk's CRC, inflates the IDATs.
Decoded decode_png(const std::string& png) {
  Decoded d;
  EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  std::string idat;
  size_t at = 8;
  while (at + 12 <= png.size()) {
    const uint32_t len = be32(png, at);
    const std::string type = png.substr(at + 4, 4);
    EXPECT_LE(at + 12 + len, png.size()) << type;
    const std::string body = png.substr(at + 4, 4 + len);
    const uint32_t crc = uint32_t(crc32(0L, reinterpret_cast<const Bytef*>(body.data()), uInt(body.size())));
    EXPECT_EQ(be32(png, at + 8 + len), crc) << "CRC of chunk " << type;
    d.chunk_types.push_back(type);
    if (type == "IHDR") d.ihdr = body.substr(4);
    if (type == "IDAT") idat += body.substr(4);
    at += 12 + len;
  }
  EXPECT_EQ(at, png.size()) << "bytes after the last chunk";
  EXPECT_EQ(d.ihdr.size(), 13u);
  if (d.ihdr.size() != 13) return d;
  d.width = be32(d.ihdr, 0);
  d.height = be32(d.ihdr, 4);
  uLongf n = uLongf(d.height) * (uLongf(d.width) * 3 + 1);
  d.raw.resize(n);
  EXPECT_EQ(uncompress(reinterpret_cast<Bytef*>(d.raw.data()), &n, reinterpret_cast<const Bytef*>(idat.data()),
                       uLong(idat.size())),
            Z_OK);
  EXPECT_EQ(n, d.raw.size());
  return d;
}

TEST(ReportPng, EncodesALineThatDecodes) {
  const Rgb red{220, 38, 38}, white{255, 255, 255};
  Image img(100, 50, white);
  img.line(10, 20, 90, 20, red, 2.0);
  const Decoded d = decode_png(encode_png(img));
  EXPECT_EQ(d.width, 100u);
  EXPECT_EQ(d.height, 50u);
  EXPECT_EQ(d.ihdr[8], 8);   // bit depth
  EXPECT_EQ(d.ihdr[9], 2);   // truecolour RGB
  EXPECT_EQ(d.ihdr[10], 0);  // deflate
  EXPECT_EQ(d.ihdr[11], 0);  // filter method
  EXPECT_EQ(d.ihdr[12], 0);  // no interlace
  EXPECT_EQ(d.chunk_types, (std::vector<std::string>{"IHDR", "IDAT", "IEND"}));
  for (uint32_t y = 0; y < d.height; ++y) EXPECT_EQ(d.raw[y * (d.width * 3 + 1)], 0) << "filter of row " << y;
  // A 2 px line at y = 20 covers rows 19 and 20 fully, and nothing two rows away.
  EXPECT_EQ(d.pixel(50, 19), red);
  EXPECT_EQ(d.pixel(50, 20), red);
  EXPECT_EQ(d.pixel(50, 22), white);
  EXPECT_EQ(d.pixel(50, 17), white);
  EXPECT_EQ(d.pixel(5, 20), white);
  EXPECT_EQ(img.at(50, 20), red);
}

TEST(ReportPng, TextAndChartsDrawInTheirColours) {
  Image img(40, 12, Rgb{255, 255, 255});
  img.text(1, 1, "10", Rgb{0, 0, 0});
  EXPECT_EQ(img.at(1 + 2, 1), (Rgb{0, 0, 0}));       // the 1's top
  EXPECT_EQ(img.at(7 + 0, 1 + 3), (Rgb{0, 0, 0}));   // the 0's left side
  EXPECT_EQ(img.at(7 + 2, 1 + 1), (Rgb{255, 255, 255}));

  Chart c{"loss", "Loss", "step", "loss", {}, false};
  c.series.push_back({"train", "#2563eb", {{1, 3.0}, {50, 2.0}, {100, 1.5}}});
  const Decoded d = decode_png(encode_png(chart_image(c, 400, 240)));
  int blue = 0;
  for (uint32_t y = 0; y < d.height; ++y)
    for (uint32_t x = 0; x < d.width; ++x) blue += d.pixel(int(x), int(y)) == parse_hex_colour("#2563eb");
  EXPECT_GT(blue, 300) << "the series' line (and its legend swatch) in its colour";
}

TEST(ReportAxis, NiceTicksAndLabels) {
  Axis a = nice_axis(0.13, 0.97, false, false);
  EXPECT_DOUBLE_EQ(a.step, 0.2);
  EXPECT_DOUBLE_EQ(a.lo, 0.0);
  EXPECT_NEAR(a.hi, 1.0, 1e-12);
  EXPECT_EQ(a.ticks.size(), 6u);
  a = nice_axis(1, 200, false, true);
  EXPECT_EQ(a.step, 50);
  EXPECT_EQ(a.hi, 200);
  a = nice_axis(3, 3, false, true);  // one point still gets a range
  EXPECT_LT(a.lo, 3);
  EXPECT_GT(a.hi, 3);
  EXPECT_EQ(format_tick(0.4, 0.2), "0.4");
  EXPECT_EQ(format_tick(12000, 2000), "12k");
  EXPECT_EQ(format_tick(0.0002, 0.0002), "0.0002");
  EXPECT_EQ(format_tick(4e-5, 2e-5), "4e-5");
  EXPECT_EQ(format_tick(1e-17, 0.5), "0");
}

std::string write_text(const std::string& dir, const std::string& name, const std::string& text) {
  const std::string p = dir + "/" + name;
  std::ofstream(p) << text;
  return p;
}

TEST(ReportMetrics, MissingEmptyAndMalformedFilesAreNamed) {
  const std::string dir = testing::temp_dir("ReportMetrics");
  auto message = [](const std::string& path) {
    try {
      read_metrics(path);
    } catch (const UserError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(dir + "/none.jsonl").find(dir + "/none.jsonl: no metrics file"), std::string::npos);
  EXPECT_NE(message(write_text(dir, "empty.jsonl", "\n")).find("empty"), std::string::npos);
  const std::string bad = write_text(dir, "bad.jsonl", "{\"step\": 1, \"loss\": 2.5}\n{\"step\": 2, \"loss\":\n");
  EXPECT_NE(message(bad).find(bad + ":2: not a JSON object"), std::string::npos) << message(bad);
  EXPECT_NE(message(write_text(dir, "arr.jsonl", "[1, 2]\n")).find(":1:"), std::string::npos);
  EXPECT_EQ(read_metrics(write_text(dir, "ok.jsonl", "{\"step\": 1}\n\n{\"step\": 2}\n")).size(), 2u);
}

// A run killed mid-row leaves a last line without its newline: the report reads the rows
// before it, and a resumed run's log drops that row and starts on a new line (it appended its
// rows to the cut one, so that line stopped every later report).
TEST(ReportMetrics, ARowCutByAKillIsSkippedAndTheResumedLogStartsOnANewLine) {
  const std::string dir = testing::temp_dir("ReportCut");
  const std::string path = write_text(dir, "m.jsonl", "{\"step\": 1, \"loss\": 2.5}\n{\"step\": 2, \"lo");
  EXPECT_EQ(read_metrics(path).size(), 1u);
  {
    RunLog log(path, "", std::chrono::steady_clock::now());
    log.write({{"step", 3}, {"loss", 2.0}}, RunLog::Row::step);
  }
  const std::vector<json> rows = read_metrics(path);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[1]["step"], 3);
}

// A disk that refuses a row (/dev/full: every write fails with ENOSPC) is said once, naming
// the flag and the file, and the run goes on without its log (no throw, no warning per row).
TEST(ReportMetrics, ARowTheDiskRefusesIsReportedOnceAndTheRunGoesOn) {
  if (!std::filesystem::exists("/dev/full")) GTEST_SKIP() << "no /dev/full on this machine";
  ::testing::internal::CaptureStderr();
  {
    RunLog log("/dev/full", "", std::chrono::steady_clock::now());
    for (int step = 1; step <= 3; ++step) log.write({{"step", step}, {"loss", 2.0}}, RunLog::Row::step);
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  const std::string want = "warning: --metrics-file /dev/full: a row could not be written (disk full?)";
  const size_t first = err.find(want);
  ASSERT_NE(first, std::string::npos) << err;
  EXPECT_EQ(err.find(want, first + 1), std::string::npos) << "said more than once:\n" << err;
}

std::vector<json> sample_rows() {
  std::vector<json> rows;
  for (int s = 1; s <= 6; ++s)
    rows.push_back({{"step", s}, {"loss", 5.0 - 0.5 * s}, {"lr", 1e-3 * s / 6}, {"tokens_per_s", 1000.0 + s},
                    {"mem_planned_bytes", 40 << 20}, {"mem_peak_bytes", 40 << 20},
                    {"mem_process_planned_bytes", 90 << 20}, {"micro_batch_size", 4}, {"grad_accum_steps", 2}});
  rows.push_back({{"step", 6}, {"val_loss", 2.25}, {"val_perplexity", 9.49}});
  return rows;
}

TEST(ReportCharts, RowsWithoutAFieldAreSkippedAndRepeatedStepsTakeTheLaterRow) {
  std::vector<json> rows = sample_rows();
  rows.push_back({{"step", 3}, {"loss", 0.125}});            // a resumed run's second step 3
  rows.push_back({{"step", 7}, {"loss", nullptr}, {"skipped_update", true}});  // a non-finite step
  const std::vector<Chart> charts = report_charts(rows);
  ASSERT_EQ(charts.size(), 4u);
  const auto& train = charts[0].series[0].points;
  ASSERT_EQ(train.size(), 6u);
  EXPECT_EQ(train[2], (std::pair<double, double>{3, 0.125}));
  EXPECT_EQ(charts[0].series[1].points.size(), 1u);  // one evaluation
  EXPECT_EQ(charts[3].y_label, "MiB");
  EXPECT_DOUBLE_EQ(charts[3].series[0].points[0].second, 90.0);
}

TEST(ReportHtml, HoldsTheFourChartsLegendsAndTheModel) {
  RunSummary s;
  s.run_dir = "runs/a<b";
  s.metrics_file = "runs/a<b/metrics.jsonl";
  const std::vector<json> rows = sample_rows();
  s.rows = rows.size();
  s.last_train_row = rows[5];
  s.last_eval_row = rows[6];
  s.checkpoint_path = "runs/a<b/checkpoints/ckpt_step_00000006.ftc";
  s.checkpoint_meta = {{"model", {{"arch", "gpt2"}, {"n_layer", 3}, {"n_head", 2}, {"n_embd", 48}}},
                       {"task", "lm"}, {"step", 6}, {"global_batch_size", 8}, {"run_id", "abc123"},
                       {"precision", "fp32"}};
  const std::string html = render_report_html(s, report_charts(rows));
  size_t svgs = 0;
  for (size_t p = html.find("<svg"); p != std::string::npos; p = html.find("<svg", p + 1)) ++svgs;
  EXPECT_EQ(svgs, 4u);
  for (const char* want : {"<!doctype html>", "<polyline", "<circle", "Loss", "Learning rate", "Throughput", "Memory",
                           ">train<", ">validation<", ">arena peak<", ">arena planned<", ">process planned<",
                           "<th>n_embd</th><td>48</td>", "<th>n_layer</th><td>3</td>", "<th>global_batch_size</th><td>8</td>",
                           "abc123", "fp32", "<th>micro_batch_size</th><td>4</td>", "<th>grad_accum_steps</th><td>2</td>",
                           "40.00 MiB", "val_perplexity", "runs/a&lt;b"})
    EXPECT_NE(html.find(want), std::string::npos) << want;
  // Self-contained: nothing fetched from elsewhere.
  for (const char* banned : {"<script", "<link", "src=", "@import", "url("})
    EXPECT_EQ(html.find(banned), std::string::npos) << banned;
}

TEST(ReportCli, TrainThenReport) {
  const std::string dir = testing::temp_dir("ReportCli");
  const std::string run = dir + "/R";
  auto r = testing::run_fittrain("train --n-layer 1 --n-head 2 --n-embd 32 --seq-len 32 --global-batch-size 8 "
                                 "--max-steps 6 --log-every 1 --eval-every 2 --eval-batches 2 --results-dir " + run +
                                 " --metrics-file " + run + "/metrics.jsonl", 300);
  ASSERT_EQ(r.status, 0) << r.output;
  r = testing::run_fittrain("report " + run, 60);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find(run + "/report/report.html"), std::string::npos) << r.output;
  for (const char* f : {"report.html", "loss.png", "lr.png", "throughput.png", "memory.png"}) {
    const std::string p = run + "/report/" + f;
    ASSERT_TRUE(std::filesystem::exists(p)) << p;
    EXPECT_GT(std::filesystem::file_size(p), 100u) << p;
  }
  const std::string html = testing::read_file(run + "/report/report.html");
  EXPECT_NE(html.find("<th>n_embd</th><td>32</td>"), std::string::npos);
  EXPECT_NE(html.find("ckpt_step_00000006.ftc"), std::string::npos);
  const Decoded d = decode_png(testing::read_file(run + "/report/loss.png"));
  EXPECT_EQ(d.width, 800u);
  // --out and --metrics-file elsewhere
  r = testing::run_fittrain("report " + run + " --metrics-file " + run + "/metrics.jsonl --out " + dir + "/elsewhere", 60);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(std::filesystem::exists(dir + "/elsewhere/memory.png"));
}

TEST(ReportCli, ErrorsNameTheFolderTheFileAndTheLine) {
  const std::string dir = testing::temp_dir("ReportCliErrors");
  auto r = testing::run_fittrain("report " + dir + "/missing", 60);
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find(dir + "/missing: no such run folder"), std::string::npos) << r.output;
  r = testing::run_fittrain("report " + dir, 60);
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find(dir + "/metrics.jsonl: no metrics file"), std::string::npos) << r.output;
  write_text(dir, "metrics.jsonl", "{\"step\": 1, \"loss\": 2}\n{\"step\": 2}\nnot json\n");
  r = testing::run_fittrain("report " + dir, 60);
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find(dir + "/metrics.jsonl:3: not a JSON object: not json"), std::string::npos) << r.output;
  // The training flags are not report's.
  r = testing::run_fittrain("report " + dir + " --lr 0.1", 60);
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("--lr"), std::string::npos) << r.output;
  r = testing::run_fittrain("report", 60);
  EXPECT_EQ(r.status, 2) << r.output;
}

}  // namespace
}  // namespace ft
