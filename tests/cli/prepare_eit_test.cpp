// `fittrain prepare --synthetic eit` over an earlier set: --overwrite replaces it completely (a
// smaller set leaves exactly the smaller set, which train and test then read), a preparation
// cut short is refused for training with a message that says how to finish it, and the
// prepare flags of other data are refused rather than ignored.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/cli_util.h"

namespace ft::testing {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> names(const std::string& folder) {
  std::vector<std::string> n;
  for (const auto& e : fs::directory_iterator(folder)) n.push_back(e.path().filename().string());
  std::sort(n.begin(), n.end());
  return n;
}

const std::string kTiny = " --image-size 8 --global-seed 3";

TEST(PrepareEit, OverwriteWithASmallerSetLeavesExactlyThatSetAndTrainingReadsIt) {
  const std::string d = temp_dir("prepare_eit_overwrite"), data = d + "/eit";
  CmdResult r = run_fittrain("prepare --synthetic eit --train 6 --valid 3 --test 3 --out " + data + kTiny, 60);
  ASSERT_EQ(r.status, 0) << r.output;
  // the same command again: refused, the hint names --overwrite
  expect_error("prepare --synthetic eit --train 2 --valid 1 --test 1 --out " + data + kTiny,
               {"already holds an EIT set", "--overwrite"});
  EXPECT_EQ(names(data + "/train").size(), 6u);
  // the hint works: the earlier set's samples beyond the new counts go with it
  r = run_fittrain("prepare --synthetic eit --train 2 --valid 1 --test 1 --overwrite --out " + data + kTiny, 60);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("2 train, 1 valid, 1 test samples of 8x8"), std::string::npos) << r.output;
  EXPECT_EQ(names(data + "/train"), (std::vector<std::string>{"00000.npz", "00001.npz"}));
  EXPECT_EQ(names(data + "/valid"), std::vector<std::string>{"00000.npz"});
  EXPECT_EQ(names(data + "/test"), std::vector<std::string>{"00000.npz"});
  EXPECT_TRUE(fs::exists(data + "/mean.pth") && fs::exists(data + "/std.pth"));

  const std::string run = d + "/run";
  r = run_fittrain("train --task diffusion --model dit-tiny --image-size 8 --patch-size 4 --device cpu --data-path " +
                       data + " --global-batch-size 2 --max-steps 2 --eval-every 0 --eval-images 0 --ckpt-every 0"
                       " --results-dir " + run,
                   300);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find(": 2 train samples"), std::string::npos) << r.output;
  r = run_fittrain("test --device cpu --results-dir " + run + " --data-path " + data, 120);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("on test split (test/): loss "), std::string::npos) << r.output;

  // A preparation cut short (its statistics come last): training says how to finish it, not
  // an internal option (it named compute_missing_normalisation, which no flag sets).
  fs::remove(data + "/std.pth");
  fs::remove(data + "/mean.pth");
  const std::vector<std::string> unfinished = {"--data-path", data + "/mean.pth", "did not finish",
                                               "fittrain prepare --synthetic eit", "--out " + data + " --overwrite",
                                               "CDEIT data folder from elsewhere"};
  expect_error("train --task diffusion --model dit-tiny --image-size 8 --patch-size 4 --device cpu --data-path " +
                   data + " --max-steps 1 --results-dir " + d + "/run2",
               unfinished);
  expect_error("test --device cpu --results-dir " + run + " --data-path " + data, unfinished);
  const CmdResult t = run_fittrain("test --device cpu --results-dir " + run + " --data-path " + data, 60);
  EXPECT_EQ(t.output.find("compute_missing_normalisation"), std::string::npos) << t.output;
}

// A split folder that is a symbolic link (to a set shared by its path) is refused, with
// --overwrite too: the writer rewrote and, with --overwrite, removed the samples it links to.
TEST(PrepareEit, ASplitFolderThatLinksElsewhereIsRefused) {
  const std::string d = temp_dir("prepare_eit_link"), shared = d + "/shared", out = d + "/out";
  ASSERT_EQ(run_fittrain("prepare --synthetic eit --train 4 --valid 0 --test 0 --out " + shared + kTiny, 60).status, 0);
  fs::create_directories(out);
  fs::create_directory_symlink(shared + "/train", out + "/train");
  for (const char* overwrite : {"", " --overwrite"})
    expect_error("prepare --synthetic eit --train 2 --valid 0 --test 0 --out " + out + kTiny + overwrite,
                 {out + "/train: a symbolic link", "new or empty --out"});
  EXPECT_EQ(names(shared + "/train").size(), 4u);
}

// The prepare flags of text, pair and ratings data do not apply to the EIT set: named (with
// what it uses instead), not accepted and ignored.
TEST(PrepareEit, FlagsOfOtherDataAreRefused) {
  const std::string data = temp_dir("prepare_eit_flags") + "/eit", out = " --out " + data + kTiny;
  const std::string eit = "prepare --synthetic eit";
  expect_error(eit + " --val-fraction 0.5" + out, {"--val-fraction does not apply to --synthetic eit", "--valid N"});
  expect_error(eit + " --pairs" + out, {"--pairs does not apply to --synthetic eit"});
  expect_error(eit + " --seq-len 64" + out, {"--seq-len does not apply to --synthetic eit", "--image-size"});
  expect_error(eit + " --tokenizer t.model" + out, {"--tokenizer does not apply to --synthetic eit"});
  expect_error(eit + " --input a.txt" + out, {"--input and --synthetic eit: give one"});
  expect_error(eit + " --val-input v.jsonl" + out, {"--val-input does not apply to --synthetic eit", "--valid N"});
  expect_error(eit + " --input-format jsonl" + out, {"--input-format applies to prompt/response data", "--synthetic eit"});
  expect_error(eit + " --prompt-field q" + out, {"--prompt-field applies to prompt/response data"});
  expect_error(eit + " --response-field a" + out, {"--response-field applies to prompt/response data"});
  expect_error(eit + " --loss-on all" + out, {"--loss-on applies to prompt/response data"});
  expect_error(eit + " --ratings-format csv" + out, {"--ratings-format applies to --ratings only"});
  expect_error(eit + " --users 10" + out, {"--users applies to --synthetic movielens only"});
  EXPECT_FALSE(fs::exists(data));  // refused before the folder is made
}

}  // namespace
}  // namespace ft::testing
