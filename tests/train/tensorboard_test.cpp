// TensorBoard event files (train/tensorboard.h): the TFRecord checksum against values
// computed independently, round trips through the test reader (tensorboard_reader.h), a
// corrupted byte caught, and `fittrain train --tensorboard` agreeing with its metrics file.
#include "train/tensorboard.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "cli/cli_util.h"
#include "core/crc32c.h"
#include "core/error.h"
#include "train/tensorboard_reader.h"

namespace ft {
namespace {
using namespace ft::testing;

// CRC-32C one bit at a time, straight from the definition (reflected polynomial 0x82F63B78):
// nothing shared with core/crc32c's table and hardware paths.
uint32_t crc32c_bitwise(const std::string& s) {
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char ch : s) {
    c ^= ch;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ ((c & 1) ? 0x82F63B78u : 0u);
  }
  return ~c;
}

std::vector<std::string> event_files(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0) files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

TEST(TensorBoard, MaskedCrcOfKnownInputs) {
  // The reference CRC-32C of "123456789" validates both CRC implementations; the mask of it was
  // worked out by hand: rotr15(0xE3069283) = 0x2507C60D, + 0xA282EAD8 = 0xC78AB0E5.
  const std::string digits = "123456789";
  ASSERT_EQ(crc32c_bitwise(digits), 0xE3069283u);
  ASSERT_EQ(crc32c(digits.data(), digits.size()), 0xE3069283u);
  EXPECT_EQ(tb_mask(0xE3069283u), 0xC78AB0E5u);
  EXPECT_EQ(tfrecord_masked_crc(digits.data(), digits.size()), 0xC78AB0E5u);
  // The length header of an empty record (8 zero bytes), and "hello".
  const std::string zeros(8, '\0'), hello = "hello";
  EXPECT_EQ(crc32c_bitwise(zeros), 0x8C28B28Au);
  EXPECT_EQ(tfrecord_masked_crc(zeros.data(), 8), 0x07980329u);
  EXPECT_EQ(tfrecord_masked_crc(zeros.data(), 8), tb_mask(crc32c_bitwise(zeros)));
  EXPECT_EQ(tfrecord_masked_crc(hello.data(), 5), 0x191C1FBBu);
  EXPECT_EQ(tfrecord_masked_crc(hello.data(), 5), tb_mask(crc32c_bitwise(hello)));
}

TEST(TensorBoard, FramingBytes) {
  const std::string r = tfrecord_frame("hello");
  ASSERT_EQ(r.size(), 8u + 4 + 5 + 4);
  const std::string len("\x05\0\0\0\0\0\0\0", 8);
  EXPECT_EQ(r.substr(0, 8), len);
  auto le32 = [&](size_t at) {
    uint32_t v = 0;
    for (size_t i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<uint8_t>(r[at + i])) << (8 * i);
    return v;
  };
  EXPECT_EQ(le32(8), tb_mask(crc32c_bitwise(len)));
  EXPECT_EQ(r.substr(12, 5), "hello");
  EXPECT_EQ(le32(17), 0x191C1FBBu);
}

TEST(TensorBoard, FirstRecordIsFileVersionAndNameLikeTensorBoards) {
  const std::string dir = temp_dir("tb_first") + "/nested/runs";
  std::string path;
  {
    TensorBoardWriter w(dir);
    path = w.path();
  }
  const auto files = event_files(dir);
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0], path);
  // events.out.tfevents.<unix seconds>.<hostname>.<pid>.0
  const std::string name = std::filesystem::path(path).filename().string();
  const std::string suffix = "." + std::to_string(getpid()) + ".0";
  ASSERT_GE(name.size(), suffix.size());
  EXPECT_EQ(name.substr(name.size() - suffix.size()), suffix) << name;
  const long long secs = std::stoll(name.substr(std::string("events.out.tfevents.").size()));
  EXPECT_LE(std::llabs(secs - static_cast<long long>(std::time(nullptr))), 60) << name;

  const auto events = tb_read_events(read_file(path));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  EXPECT_EQ(events[0].step, 0);
  EXPECT_TRUE(events[0].values.empty());
  EXPECT_NEAR(events[0].wall_time, static_cast<double>(std::time(nullptr)), 60.0);
}

TEST(TensorBoard, RoundTripOfManyScalars) {
  const std::string dir = temp_dir("tb_round");
  struct Point { std::string tag; double value; int64_t step; double wall; };
  std::vector<Point> points;
  const char* tags[] = {"train/loss", "train/lr", "memory/peak_bytes", "val/perplexity", "a tag with spaces/"};
  for (int i = 0; i < 2000; ++i) {
    const double v = (i % 7 == 0) ? -std::ldexp(1.0 + i, i % 60) : std::sin(i) * 1e-3 * i;
    // Steps from 0 up past 2^35 (multi-byte varints), and a negative one.
    const int64_t step = i == 1999 ? -5 : static_cast<int64_t>(i) << (i % 36);
    points.push_back({std::string(tags[i % 5]) + std::to_string(i % 3), v, step, 1.7e9 + i * 0.123456789});
  }
  std::string path;
  {
    TensorBoardWriter w(dir);
    path = w.path();
    for (const Point& p : points) w.scalar(p.tag, p.value, p.step, p.wall);
    // One step's values as one Event.
    w.scalars({{"x/a", 1.5}, {"x/b", 2.5}, {"x/c", 1e30}}, 77, 1.8e9);
    w.flush();
  }
  const auto events = tb_read_events(read_file(path));
  ASSERT_EQ(events.size(), points.size() + 2);
  for (size_t i = 0; i < points.size(); ++i) {
    const TbEvent& e = events[i + 1];
    ASSERT_EQ(e.values.size(), 1u) << i;
    EXPECT_EQ(e.values[0].first, points[i].tag);
    EXPECT_EQ(e.values[0].second, static_cast<float>(points[i].value)) << i;
    EXPECT_EQ(e.step, points[i].step) << i;
    EXPECT_EQ(e.wall_time, points[i].wall) << i;
    EXPECT_TRUE(e.file_version.empty());
  }
  const TbEvent& batch = events.back();
  EXPECT_EQ(batch.step, 77);
  EXPECT_EQ(batch.wall_time, 1.8e9);
  ASSERT_EQ(batch.values.size(), 3u);
  EXPECT_EQ(batch.values[0], (std::pair<std::string, float>("x/a", 1.5f)));
  EXPECT_EQ(batch.values[1], (std::pair<std::string, float>("x/b", 2.5f)));
  EXPECT_EQ(batch.values[2], (std::pair<std::string, float>("x/c", 1e30f)));
}

TEST(TensorBoard, CorruptedByteIsDetected) {
  const std::string dir = temp_dir("tb_corrupt");
  std::string path;
  {
    TensorBoardWriter w(dir);
    path = w.path();
    w.scalar("train/loss", 2.5, 1, 1.7e9);
    w.scalar("train/loss", 2.25, 2, 1.7e9 + 1);
  }
  const std::string good = read_file(path);
  ASSERT_EQ(tb_read_events(good).size(), 3u);
  auto le64 = [&](size_t at) {
    uint64_t v = 0;
    for (size_t i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(good[at + i])) << (8 * i);
    return v;
  };
  const size_t rec1 = 12 + le64(0) + 4;  // the first scalar's record
  auto expect_error = [&](size_t at, const std::string& what) {
    std::string bad = good;
    bad[at] = static_cast<char>(bad[at] ^ 0x10);
    try {
      tb_read_events(bad);
      ADD_FAILURE() << "byte " << at << " flipped and not detected";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  expect_error(rec1 + 12 + 3, "record 1 at byte " + std::to_string(rec1) + ": data CRC mismatch");  // in the data
  expect_error(rec1 + 2, "length CRC mismatch");                                                      // in the length
  expect_error(rec1 + 9, "length CRC mismatch");                                                      // in its CRC
  expect_error(good.size() - 1, "data CRC mismatch");                                                 // the data CRC
  EXPECT_THROW(tb_read_events(good.substr(0, good.size() - 2)), std::runtime_error);                 // cut short
}

TEST(TensorBoard, TwoWritersInOneSecondGetTwoFiles) {
  const std::string dir = temp_dir("tb_two");
  TensorBoardWriter a(dir), b(dir);
  EXPECT_NE(a.path(), b.path());
  EXPECT_EQ(event_files(dir).size(), 2u);
}

TEST(TensorBoard, UnusableFolderNamesFlagAndPath) {
  const std::string dir = temp_dir("tb_bad");
  const std::string file = dir + "/a_file";
  std::ofstream(file) << "x";
  for (const std::string& target : {file, file + "/sub"}) {
    try {
      TensorBoardWriter w(target);
      ADD_FAILURE() << target << " accepted";
    } catch (const UserError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("--tensorboard"), std::string::npos) << msg;
      EXPECT_NE(msg.find(target), std::string::npos) << msg;
    }
  }
}

TEST(TensorBoardE2E, TrainWritesTheMetricsFileRows) {
  const std::string dir = temp_dir("tb_e2e");
  const std::string tb = dir + "/tb", metrics = dir + "/metrics.jsonl";
  CmdResult r = run_fittrain("train --n-layer 1 --n-head 2 --n-embd 32 --seq-len 32 --global-batch-size 8 "
                             "--max-steps 4 --log-every 1 --eval-every 2 --eval-batches 1 --results-dir " + dir +
                             "/results --metrics-file " + metrics + " --tensorboard " + tb);
  ASSERT_EQ(r.status, 0) << r.output;
  const auto files = event_files(tb);
  ASSERT_EQ(files.size(), 1u);
  const auto events = tb_read_events(read_file(files[0]));
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events[0].file_version, "brain.Event:2");

  // (tag, step) -> value, and each event's wall time by step and kind.
  std::map<std::pair<std::string, int64_t>, float> got;
  std::map<std::pair<std::string, int64_t>, double> wall;
  for (const TbEvent& e : events)
    for (const auto& [tag, v] : e.values) {
      EXPECT_TRUE(got.emplace(std::make_pair(tag, e.step), v).second) << tag << " twice at step " << e.step;
      wall[{tag, e.step}] = e.wall_time;
    }
  const std::pair<const char*, const char*> step_tags[] = {
      {"loss", "train/loss"}, {"lr", "train/lr"}, {"grad_norm", "train/grad_norm"},
      {"tokens_per_s", "train/tokens_per_s"}, {"mem_planned_bytes", "memory/planned_bytes"},
      {"mem_peak_bytes", "memory/peak_bytes"}, {"mem_process_planned_bytes", "memory/process_planned_bytes"},
      {"host_rss_bytes", "memory/host_rss_bytes"}};
  std::istringstream lines(read_file(metrics));
  std::string line;
  std::set<int64_t> train_steps, eval_steps;
  double last_elapsed = -1;
  size_t compared = 0;
  while (std::getline(lines, line)) {
    const auto j = nlohmann::json::parse(line);
    ASSERT_TRUE(j.contains("wall_time") && j.contains("elapsed_s")) << line;
    EXPECT_NEAR(j["wall_time"].get<double>(), static_cast<double>(std::time(nullptr)), 600.0) << line;
    EXPECT_GE(j["elapsed_s"].get<double>(), last_elapsed) << line;
    last_elapsed = j["elapsed_s"].get<double>();
    const int64_t step = j["step"].get<int64_t>();
    std::vector<std::pair<std::string, std::string>> fields;  // metrics field, tag
    if (j.contains("loss")) {
      train_steps.insert(step);
      for (const auto& [f, t] : step_tags) fields.emplace_back(f, t);
    } else if (j.contains("val_loss")) {
      eval_steps.insert(step);
      fields = {{"val_loss", "val/loss"}, {"val_perplexity", "val/perplexity"}};
    }
    for (const auto& [field, tag] : fields) {
      auto it = got.find({tag, step});
      ASSERT_NE(it, got.end()) << tag << " missing at step " << step;
      EXPECT_EQ(it->second, static_cast<float>(j[field].get<double>())) << tag << " at step " << step;
      EXPECT_EQ((wall[{tag, step}]), j["wall_time"].get<double>()) << tag << " at step " << step;
      ++compared;
    }
  }
  EXPECT_EQ(train_steps, (std::set<int64_t>{1, 2, 3, 4}));
  EXPECT_EQ(eval_steps, (std::set<int64_t>{2, 4}));
  EXPECT_EQ(compared, 4u * 8 + 2 * 2);
  EXPECT_EQ(got.size(), compared) << "TensorBoard holds values the metrics file does not";
}

TEST(TensorBoardE2E, PlanDoesNotTakeTheFlag) {
  const std::string dir = temp_dir("tb_plan");
  CmdResult r = run_fittrain("plan --n-layer 1 --n-head 2 --n-embd 32 --seq-len 32 --tensorboard " + dir + "/tb");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--tensorboard"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir + "/tb"));
}

}  // namespace
}  // namespace ft
