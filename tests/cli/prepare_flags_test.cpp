// `fittrain prepare`'s refusals of a command line that would prepare nothing useful, or
// that holds flags it would ignore: each names the flag and the fix, and a failed run leaves
// no --out folder it created behind.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "cli/cli_util.h"

namespace ft {
namespace {
using namespace ft::testing;
namespace fs = std::filesystem;

// n pairs whose prompt is `prompt` (longer than a small --seq-len: cut inside it).
void write_pairs(const std::string& path, int n, const std::string& prompt) {
  std::ofstream f(path);
  for (int i = 0; i < n; ++i) f << nlohmann::json{{"prompt", prompt}, {"response", "ok"}}.dump() << "\n";
}

// A failed preparation removes the --out folder it created (a bad field name, a missing
// input, a malformed ratings file left one holding only .prepare-lock), with the parents it
// made; a folder that was there before stays.
TEST(PrepareFlags, AFailedPreparationRemovesTheOutFolderItCreated) {
  const std::string d = temp_dir("prep_cleanup");
  write_pairs(d + "/p.jsonl", 5, "q");
  std::ofstream(d + "/bad.dat") << "1::10::5::1\n1::x::4::2\n";
  expect_error("prepare --input " + d + "/p.jsonl --prompt-field question --out " + d + "/new/deeper",
               {"no \"question\" field"});
  EXPECT_FALSE(fs::exists(d + "/new"));
  expect_error("prepare --input " + d + "/p.jsonl " + d + "/missing.jsonl --out " + d + "/new", {"missing.jsonl"});
  EXPECT_FALSE(fs::exists(d + "/new"));
  expect_error("prepare --ratings " + d + "/bad.dat --out " + d + "/new", {"bad.dat:2"});
  EXPECT_FALSE(fs::exists(d + "/new"));
  // There before: kept, with what it held.
  fs::create_directories(d + "/mine");
  std::ofstream(d + "/mine/notes.txt") << "mine";
  expect_error("prepare --input " + d + "/p.jsonl --prompt-field question --out " + d + "/mine", {"question"});
  EXPECT_EQ(read_file(d + "/mine/notes.txt"), "mine");
  fs::create_directories(d + "/empty");
  expect_error("prepare --ratings " + d + "/bad.dat --out " + d + "/empty", {"bad.dat:2"});
  EXPECT_TRUE(fs::is_directory(d + "/empty"));
}

// --input-format's value is checked before what it implies ("csv ... add --pairs", then
// with --pairs "'csv' is none of ...").
TEST(PreparePairsCli, AnUnknownInputFormatIsNamedFirst) {
  const std::string d = temp_dir("prep_format");
  write_pairs(d + "/p.jsonl", 2, "q");
  for (const char* pairs : {"", " --pairs"}) {
    const std::string args = "prepare --input " + d + "/p.jsonl --out " + d + "/c6 --input-format csv" + pairs;
    expect_error(args, {"--input-format: 'csv' is none of auto, jsonl, text, parquet"});
    EXPECT_EQ(run_fittrain(args).output.find("add --pairs"), std::string::npos) << args;
  }
}

}  // namespace
}  // namespace ft
