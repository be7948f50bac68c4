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
// input, a malformed ratings file, text that is not UTF-8 for tokenizer train left one holding
// only .prepare-lock), with the parents it
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
  // tokenizer train too: its input is read (and refused) under the folder's lock.
  std::ofstream(d + "/latin1.txt") << "caf\xE9 au lait\n";
  expect_error("tokenizer train --input " + d + "/latin1.txt --vocab-size 400 --out " + d + "/tok/new",
               {"latin1.txt: not UTF-8 text"});
  EXPECT_FALSE(fs::exists(d + "/tok"));
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

// Every response cut by --seq-len: the train split has no loss token. It was prepared (exit
// 0, "0 loss tokens") and train found nothing to learn; now refused before the commit, and a
// validation split in that state is kept with a warning (train refuses it at start).
TEST(PreparePairsCli, ATrainSplitWithNoLossTokenIsRefusedAndAValOneWarned) {
  const std::string d = temp_dir("prep_no_loss");
  write_pairs(d + "/p.jsonl", 40, "a long prompt");
  write_pairs(d + "/short.jsonl", 4, "hi");
  expect_error("prepare --input " + d + "/p.jsonl --out " + d + "/os0 --seq-len 4 --val-fraction 0",
               {"--seq-len 4: the train split has no loss token", "all its 40 pair(s) were cut inside their prompt",
                "use a longer --seq-len, or --loss-on all"});
  EXPECT_FALSE(fs::exists(d + "/os0"));  // the folder this run made is gone again
  // An earlier preparation is left as it was, even with --overwrite.
  ASSERT_EQ(run_fittrain("prepare --input " + d + "/short.jsonl --out " + d + "/good --seq-len 16 --val-fraction 0").status, 0);
  const std::string before = read_file(d + "/good/train_000000.pairs");
  expect_error("prepare --input " + d + "/p.jsonl --out " + d + "/good --seq-len 4 --overwrite",
               {"the train split has no loss token", "nothing in " + d + "/good was replaced"});
  EXPECT_EQ(read_file(d + "/good/train_000000.pairs"), before);
  // --loss-on all keeps the prompt's targets: prepared.
  CmdResult r = run_fittrain("prepare --input " + d + "/p.jsonl --out " + d + "/all --seq-len 4 --loss-on all "
                             "--val-fraction 0");
  EXPECT_EQ(r.status, 0) << r.output;
  // A validation split with no loss token: prepared, with a warning saying what train will do.
  r = run_fittrain("prepare --input " + d + "/short.jsonl --val-input " + d + "/p.jsonl --out " + d +
                   "/val --seq-len 4");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("warning: the val split has no loss token (its 40 pair(s) were cut inside their prompt)"),
            std::string::npos) << r.output;
  r = run_fittrain("prepare --input " + d + "/short.jsonl --out " + d + "/ok --seq-len 16 --val-fraction 0");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(r.output.find("warning"), std::string::npos) << r.output;
}

// A --val-fraction that sends every pair to validation is named (it said the input held no
// pair, though it held 40).
TEST(PreparePairsCli, AValFractionThatLeavesNoTrainingPairIsNamed) {
  const std::string d = temp_dir("prep_all_val");
  write_pairs(d + "/p.jsonl", 40, "q");
  expect_error("prepare --input " + d + "/p.jsonl --out " + d + "/ov --seq-len 32 --val-fraction 0.9999",
               {"--val-fraction 0.9999 left no training pair (40 of 40 went to validation): lower it"});
  EXPECT_FALSE(fs::exists(d + "/ov"));
}

// --val-input is for prompt/response data: beside text documents it switched to pair mode
// ("a.txt:1: no TAB"). Beside --val-fraction it silently won; the same file as --input made
// validation equal training.
TEST(PreparePairsCli, ValInputIsCheckedAgainstTheOtherFlags) {
  const std::string d = temp_dir("prep_val_input");
  std::ofstream(d + "/a.txt") << "a document\n";
  std::ofstream(d + "/b.txt") << "another document\n";
  write_pairs(d + "/p.jsonl", 10, "q");
  write_pairs(d + "/v.jsonl", 3, "v");
  expect_error("prepare --input " + d + "/a.txt --val-input " + d + "/b.txt --out " + d + "/oz",
               {"--val-input applies to prompt/response data: add --pairs", "--val-fraction", "--val-data-path"});
  expect_error("prepare --input " + d + "/p.jsonl --val-input " + d + "/v.jsonl --val-fraction 0.3 --out " + d + "/o",
               {"--val-input and --val-fraction 0.3: give one"});
  expect_error("prepare --input " + d + "/p.jsonl --val-input " + d + "/p.jsonl --out " + d + "/o",
               {"--val-input " + d + "/p.jsonl is also an --input", "validation would equal training"});
  expect_error("prepare --input " + d + "/p.jsonl --val-input " + d + "/./p.jsonl --out " + d + "/o",
               {"validation would equal training"});  // the same file, spelled otherwise
  EXPECT_FALSE(fs::exists(d + "/o"));
  // --pairs with text lines, and a .jsonl validation file, are pair mode as before
  std::ofstream(d + "/t.txt") << "q\tr\n";
  EXPECT_EQ(run_fittrain("prepare --input " + d + "/t.txt --val-input " + d + "/v.jsonl --out " + d + "/ok").status, 0);
  EXPECT_EQ(run_fittrain("prepare --input " + d + "/p.jsonl --val-input " + d + "/v.jsonl --val-fraction 0 --out " + d +
                         "/ok0").status, 0);
}

// Flags of one kind of preparation given to another were accepted and ignored.
TEST(PrepareFlags, FlagsOfAnotherPreparationAreRefused) {
  const std::string d = temp_dir("prep_other_flags");
  std::ofstream(d + "/a.txt") << "a document\n";
  std::ofstream(d + "/r.csv") << "userId,movieId,rating,timestamp\n1,1,5,1\n";
  for (const auto& [source, named] : {std::pair{"--ratings " + d + "/r.csv", std::string("--ratings")},
                                      std::pair{std::string("--synthetic movielens"), std::string("--synthetic movielens")}})
    expect_error("prepare " + source + " --val-fraction 0.5 --out " + d + "/o",
                 {"--val-fraction does not apply to " + named + ":", "leave-one-out", "each user's last item"});
  expect_error("prepare --synthetic movielens --loss-on all --out " + d + "/o",
               {"--loss-on does not apply to --synthetic movielens"});
  expect_error("prepare --synthetic movielens --prompt-field q --out " + d + "/o",
               {"--prompt-field does not apply to --synthetic movielens"});
  expect_error("prepare --ratings " + d + "/r.csv --response-field a --out " + d + "/o",
               {"--response-field does not apply to --ratings"});
  expect_error("prepare --input " + d + "/a.txt --users 20 --out " + d + "/o", {"--users applies to --synthetic movielens"});
  expect_error("prepare --input " + d + "/a.txt --items 7 --out " + d + "/o", {"--items applies to --synthetic movielens"});
  expect_error("prepare --input " + d + "/a.txt --ratings-format csv --out " + d + "/o",
               {"--ratings-format applies to --ratings only"});
  expect_error("prepare --ratings " + d + "/r.json --out " + d + "/o", {"cannot tell the ratings format",
                                                                         "--ratings-format dat|csv"});
  EXPECT_FALSE(fs::exists(d + "/o"));
}

// train --task rec on a folder of ratings but no interactions.rec: the hint names the ratings
// file that is there (it named a bare ratings.dat, wrong from any other folder).
TEST(RecHint, AFolderOfRatingsGetsTheCommandForItsFile) {
  const std::string d = temp_dir("rec_hint");
  fs::create_directories(d + "/mlk7");
  std::ofstream(d + "/mlk7/ratings.dat") << "1::10::5::1\n";
  CmdResult r = run_fittrain("train --task rec --model gpt2rec --data-path " + d + "/mlk7 --results-dir " + d + "/r", 120);
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("`fittrain prepare --ratings " + d + "/mlk7/ratings.dat --out " + d + "/mlk7`"),
            std::string::npos) << r.output;
}

}  // namespace
}  // namespace ft
