// One preparation at a time per --out folder (data/prepare.h, PrepareLock): every command that
// writes a prepared folder (text, pairs, .rec, EIT, tokenizer train) is refused at once while
// another holds the folder's lock, naming the folder and the holder's pid, and changes nothing.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "cli/cli_util.h"
#include "core/error.h"
#include "data/prepare.h"
#include "data/prepare_pairs.h"
#include "data/tokenizer.h"

namespace ft::testing {
namespace {

namespace fs = std::filesystem;

// Every file under dir (its path relative to dir) with its bytes, the lock file aside (its
// pid is the latest holder's).
std::map<std::string, std::string> snapshot(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    const std::string rel = fs::relative(e.path(), dir).string();
    if (rel == kPrepareLockFile) continue;
    files[rel] = e.is_regular_file() ? read_file(e.path().string()) : "<folder>";
  }
  return files;
}

TEST(PrepareLock, PrepareIntoAFolderAnotherHoldsIsRefusedNamingItsPidAndTouchesNothing) {
  const std::string d = temp_dir("prepare_lock"), out = d + "/out";
  std::string docs;
  for (int i = 0; i < 3; ++i) {
    const std::string f = d + "/doc" + std::to_string(i) + ".txt";
    std::ofstream(f) << "document " << i << ": the quick brown fox jumps over the lazy dog.\n";
    docs += " " + f;
  }
  std::ofstream(d + "/pairs.jsonl") << R"({"prompt": "2+2=", "response": "4"})" << "\n"
                                    << R"({"prompt": "3+3=", "response": "6"})" << "\n";
  std::ofstream(d + "/corpus.txt") << "the quick brown fox jumps over the lazy dog\n";
  CmdResult r = run_fittrain("prepare --input" + docs + " --out " + out, 60);
  ASSERT_EQ(r.status, 0) << r.output;
  const auto before = snapshot(out);
  ASSERT_TRUE(before.count("train_000000.bin")) << r.output;

  {
    const PrepareLock held(out);  // what a running prepare holds
    // the other kinds of preparation into an empty folder (this one holds shards, refused for
    // that: PrepareLock.AnotherKindOfPreparationIsRefusedWithOverwriteToo)
    const std::string empty = d + "/empty";
    fs::create_directories(empty);
    const PrepareLock held_empty(empty);
    const std::string pid = "pid " + std::to_string(::getpid());
    for (const auto& [args, folder] : std::vector<std::pair<std::string, std::string>>{
             {"prepare --overwrite --input" + docs + " --out " + out, out},
             {"prepare --overwrite --input " + d + "/pairs.jsonl --out " + out, out},
             {"prepare --synthetic movielens --users 50 --items 20 --out " + empty, empty},
             {"prepare --synthetic eit --train 2 --valid 0 --test 0 --image-size 8 --out " + empty, empty},
             // locked before it looks for shards: refused for the lock, not for the shards
             {"tokenizer train --input " + d + "/corpus.txt --vocab-size 300 --out " + out, out},
         }) {
      expect_error(args, {"--out " + folder, pid, "in use by another fittrain prepare"});
      EXPECT_EQ(snapshot(out), before) << args;
      EXPECT_EQ(snapshot(empty).size(), 0u) << args;
    }
    EXPECT_FALSE(fs::exists(fs::path(out) / kStagingDir));
    // In this process too: a second StagedPrepare of the folder is refused before its staging.
    try {
      StagedPrepare second(out, ByteTokenizer(), true);
      ADD_FAILURE() << "a second StagedPrepare took the lock";
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find(pid), std::string::npos) << e.what();
    }
    EXPECT_EQ(snapshot(out), before);
  }

  // Released with its holder: the next preparation runs, and a lock file left behind by a
  // finished one does not lock anything.
  r = run_fittrain("prepare --overwrite --input" + docs + " --out " + out, 60);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(fs::exists(fs::path(out) / kPrepareLockFile));
  r = run_fittrain("prepare --overwrite --input" + docs + " --out " + out, 60);
  EXPECT_EQ(r.status, 0) << r.output;
}

// `prepare` checks the folder when it starts and again once it holds the lock: a preparation
// that finished in between (while this one read its inputs) is not replaced without
// --overwrite. prepare_text and prepare_pairs make only the second check.
TEST(PrepareLock, AFolderPreparedWhileWaitingForTheLockIsNotReplacedWithoutOverwrite) {
  const std::string d = temp_dir("prepare_between"), out = d + "/out";
  std::ofstream(d + "/doc.txt") << "the quick brown fox jumps over the lazy dog.\n";
  std::ofstream(d + "/pairs.jsonl") << R"({"prompt": "2+2=", "response": "4"})" << "\n";
  prepare_text({d + "/doc.txt"}, out, 0.0);  // the other preparation, finished
  const auto before = snapshot(out);
  try {
    prepare_text({d + "/doc.txt"}, out, 0.0, 0, kDefaultMaxShardTokens, nullptr, /*overwrite=*/false);
    ADD_FAILURE() << "prepare_text replaced a finished preparation";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("--out " + out + " already holds shards (train_000000.bin"),
              std::string::npos) << e.what();
  }
  PreparePairsOptions o;
  o.inputs = {d + "/pairs.jsonl"};
  o.out_dir = out;
  o.val_fraction = 0;
  o.overwrite = false;
  EXPECT_THROW(prepare_pairs(o), UserError);
  EXPECT_EQ(snapshot(out), before);
  EXPECT_FALSE(fs::exists(fs::path(out) / kStagingDir));
  o.overwrite = true;  // asked: replaced
  EXPECT_EQ(prepare_pairs(o).train.samples, 1u);
  EXPECT_NE(snapshot(out), before);
}

// One folder holds one prepared data set: a preparation of another kind (ratings beside token
// shards, an EIT set beside ratings, shards beside an EIT set) is refused naming the file
// that is there, with --overwrite too (it replaces only its own kind), and changes nothing.
// They were accepted, leaving two data sets in one folder; so was any beside an EIT set cut
// short before its statistics.
TEST(PrepareLock, AnotherKindOfPreparationIsRefusedWithOverwriteToo) {
  const std::string d = temp_dir("prepare_kinds");
  std::ofstream(d + "/doc.txt") << "the quick brown fox jumps over the lazy dog.\n";
  const std::string text = "prepare --input " + d + "/doc.txt --val-fraction 0 --out ";
  const std::string ratings = "prepare --synthetic movielens --users 50 --items 20 --out ";
  const std::string eit = "prepare --synthetic eit --train 2 --valid 0 --test 0 --image-size 8 --out ";
  ASSERT_EQ(run_fittrain(text + d + "/shards").status, 0);
  ASSERT_EQ(run_fittrain(ratings + d + "/ratings").status, 0);
  ASSERT_EQ(run_fittrain(eit + d + "/eit", 120).status, 0);
  // An EIT preparation cut short: samples, no statistics yet (they are written last).
  fs::copy(d + "/eit", d + "/eit_cut", fs::copy_options::recursive);
  fs::remove(d + "/eit_cut/mean.pth");
  fs::remove(d + "/eit_cut/std.pth");
  const std::vector<std::tuple<std::string, std::string, std::string>> cases = {
      {ratings, "shards", "train_000000.bin, from another kind of preparation (token or prompt/response shards)"},
      {eit, "shards", "train_000000.bin"},
      {text, "ratings", "interactions.rec, from another kind of preparation (ratings for --task rec)"},
      {eit, "ratings", "interactions.rec"},
      {text, "eit", "mean.pth, from another kind of preparation (an EIT set for --task diffusion)"},
      {ratings, "eit", "mean.pth"},
      {text, "eit_cut", "train/0000"},
      {ratings, "eit_cut", "train/0000"}};
  for (const auto& [cmd, folder, said] : cases) {
    const std::string out = d + "/" + folder;
    const auto before = snapshot(out);
    for (const char* overwrite : {"", " --overwrite"}) {
      expect_error(cmd + out + overwrite, {"--out " + out + " holds " + said, "use another --out"});
      EXPECT_EQ(snapshot(out), before) << cmd << out << overwrite;
    }
  }
}

// The built-in corpus in a results folder is prepared again only when it is not there as it
// should be: a `test` beside another command preparing it (holding the folder's lock) uses the
// corpus already there (it was refused naming --out, a flag `test` does not have), and an
// edited copy is still replaced.
TEST(PrepareLock, TheBuiltInCorpusIsPreparedOnlyWhenItIsNotThereAlready) {
  const std::string d = temp_dir("corpus_lock"), run = d + "/run";
  const std::string model = " --n-layer 1 --n-head 1 --n-embd 32 --seq-len 32 --global-batch-size 4 --eval-batches 1";
  ASSERT_EQ(run_fittrain("train --max-steps 1 --eval-every 0 --results-dir " + run + model).status, 0);
  const std::string txt = run + "/data/builtin_corpus.txt", corpus = read_file(txt);
  {
    PrepareLock held(run + "/data");
    CmdResult t = run_fittrain("test --eval-batches 1 --results-dir " + run);
    EXPECT_EQ(t.status, 0) << t.output;
  }
  std::ofstream(txt, std::ios::trunc) << "edited";
  ASSERT_EQ(run_fittrain("test --eval-batches 1 --results-dir " + run).status, 0);
  EXPECT_EQ(read_file(txt), corpus);
}

}  // namespace
}  // namespace ft::testing
