// Bad input ends with exit status 2 and one clear message naming the file or flag, and never
// touches checkpoints already saved.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "cli/cli_util.h"
#include "data/token_shard.h"
#include "train/checkpoint.h"
#include "train/checkpoint_dir.h"

namespace ft {
namespace {
using namespace ft::testing;

// In a folder of its own: a command left without --results-dir takes ./results, which tests
// run side by side (ctest -j) would otherwise share, and lock.
void expect_error(const std::string& args, std::initializer_list<const char*> needles) {
  CmdResult r = run_command("cd " + temp_dir("bad_input_cwd") + " && " + FITTRAIN_BINARY + " " + args);
  EXPECT_EQ(r.status, 2) << args << "\n" << r.output;
  for (const char* n : needles) EXPECT_NE(r.output.find(n), std::string::npos) << "'" << n << "' not in: " << r.output;
  EXPECT_EQ(r.output.find("internal error"), std::string::npos) << r.output;
}

void write_tokens(const std::string& path, size_t n) {
  std::vector<uint32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = static_cast<uint32_t>(i % 200);
  write_shard(path, t);
}

TEST(BadInput, MissingFile) {
  expect_error("train --data-path /nonexistent/shard.bin --max-steps 1", {"/nonexistent/shard.bin", "--data-path"});
  expect_error("test --checkpoint /nonexistent/ckpt.ftc", {"/nonexistent/ckpt.ftc"});
  expect_error("prepare --input /nonexistent/a.txt --out /tmp/fittrain_test_x", {"/nonexistent/a.txt"});
}

TEST(BadInput, WrongMagic) {
  const std::string dir = temp_dir("magic"), path = dir + "/bad.bin";
  {
    std::ofstream f(path, std::ios::binary);
    std::vector<int32_t> header(256, 0);
    header[0] = 12345;
    header[1] = 1;
    header[2] = 10;
    f.write(reinterpret_cast<const char*>(header.data()), 1024);
    f.write(std::string(20, 'x').data(), 20);
  }
  expect_error("train --data-path " + path + " --max-steps 1", {path.c_str(), "magic"});
}

TEST(BadInput, TruncatedShard) {
  const std::string dir = temp_dir("trunc"), path = dir + "/train.bin";
  write_tokens(path, 5000);
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 100);
  expect_error("train --data-path " + path + " --max-steps 1", {path.c_str()});
}

TEST(BadInput, SequenceLongerThanShard) {
  const std::string dir = temp_dir("short"), path = dir + "/train.bin";
  write_tokens(path, 40);
  expect_error("train --data-path " + path + " --seq-len 64 --max-steps 1", {path.c_str(), "64"});
}

TEST(BadInput, TokenOutsideVocabulary) {
  const std::string dir = temp_dir("vocab"), path = dir + "/train.bin";
  std::vector<uint32_t> t(5000, 70000);
  write_shard(path, t);
  expect_error("train --data-path " + path + " --max-steps 1 --global-batch-size 2", {path.c_str()});
}

TEST(BadInput, NonsensicalFlags) {
  expect_error("train --global-batch-size 0", {"--global-batch-size"});
  expect_error("train --n-embd 100 --n-head 3", {"--n-embd", "--n-head"});
  expect_error("train --memory-limit lots", {"--memory-limit"});
  expect_error("train --micro-batch-size 0", {"--micro-batch-size"});
  expect_error("train --micro-batch-size 64 --global-batch-size 16", {"--micro-batch-size"});
  expect_error("train --lr -1", {"--lr"});
  expect_error("train --device tpu", {"--device"});
  expect_error("train --precision bf16 --device cpu", {"--precision"});
  expect_error("train --model gpt5", {"--model"});
  expect_error("train --log-every 0", {"--log-every"});
  expect_error("train --recompute sometimes", {"--recompute"});
  expect_error("train --no-such-flag 3", {"--no-such-flag"});
  expect_error("train --epochs banana", {"--epochs"});
  expect_error("plan --memory-limit 1KiB", {"nothing fits", "--memory-limit"});
}

// --device cuda where no GPU can run it (a build without CUDA, or none visible): one message
// naming the flag, from train and plan, before the launcher splits anything over the visible
// devices (with none it divided by zero: SIGFPE, no message).
TEST(BadInput, CudaWithNoVisibleGpuIsNamed) {
  const std::string dir = temp_dir("bad_no_gpu");
  for (const char* cmd : {"train --max-steps 1", "plan"}) {
    CmdResult r = run_fittrain(std::string(cmd) + " --device cuda --results-dir " + dir, 120, "CUDA_VISIBLE_DEVICES=");
    EXPECT_EQ(r.status, 2) << cmd << "\n" << r.output;
    EXPECT_NE(r.output.find("--device cuda: "), std::string::npos) << cmd << "\n" << r.output;
  }
}

// The built-in corpus is bytes: a smaller vocabulary is refused naming --vocab-size before
// the corpus is written (it used to fail on the first shard, naming --results-dir).
TEST(BadInput, AVocabularyTooSmallForTheBuiltInCorpusNamesVocabSize) {
  const std::string dir = temp_dir("bad_vocab");
  for (const char* cmd : {"train --max-steps 1", "plan"})
    expect_error(std::string(cmd) + " --vocab-size 10 --results-dir " + dir, {"--vocab-size 10", "built-in corpus", "257"});
  EXPECT_FALSE(std::filesystem::exists(dir + "/data"));
  // A vocabulary that --init-from's folder fixes is named as its, without --vocab-size advice
  // (a --vocab-size other than its config.json's is refused).
  const std::string run = dir + "/run", hf = dir + "/hf";
  ASSERT_EQ(run_fittrain("train --n-layer 1 --n-head 1 --n-embd 32 --seq-len 32 --global-batch-size 4 --max-steps 1 "
                         "--eval-every 0 --eval-batches 1 --results-dir " + run).status, 0);
  ASSERT_EQ(run_fittrain("export --format hf --results-dir " + run + " --out " + hf).status, 0);
  std::string config = read_file(hf + "/config.json");
  const size_t at = config.find("\"vocab_size\": 257");
  ASSERT_NE(at, std::string::npos) << config;
  config.replace(at, std::string("\"vocab_size\": 257").size(), "\"vocab_size\": 100");
  std::ofstream(hf + "/config.json") << config;
  for (const std::string cmd : {"train --max-steps 1 --results-dir " + dir + "/ft", "test --results-dir " + run}) {
    const CmdResult r = run_fittrain(cmd + " --init-from " + hf);
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_NE(r.output.find("--init-from " + hf + ": a vocabulary of 100 tokens: the built-in corpus"),
              std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("--vocab-size"), std::string::npos) << r.output;
  }
}

// --devices is checked by plan as by train: on the CPU only auto or 1 (CPU ranks come from mpirun),
// and a value that is no count or list is named as such first.
TEST(BadInput, PlanOnTheCpuChecksDevicesAsTrainDoes) {
  const std::string dir = temp_dir("bad_devices");
  for (const char* cmd : {"plan", "train --max-steps 1"}) {
    expect_error(std::string(cmd) + " --device cpu --devices 2 --results-dir " + dir, {"--devices 2", "mpirun"});
    expect_error(std::string(cmd) + " --device cpu --devices foo --results-dir " + dir,
                 {"--devices must be auto, a count or a list", "got 'foo'"});
  }
  EXPECT_EQ(run_fittrain("plan --device cpu --devices 1 --results-dir " + dir).status, 0);
}

// Integers are read in plain decimal: a leading zero (CLI11 reads 010 as octal 8, 0x10 as 16)
// and a negative value of an unsigned flag (-1 became 2^64 - 1) are refused naming the flag,
// on the command line and from a --config file alike.
TEST(BadInput, IntegersWithALeadingZeroOrANegativeUnsignedAreRefused) {
  const std::string dir = temp_dir("bad_integers");
  const std::string out = " --results-dir " + dir;
  expect_error("train --max-steps 010" + out, {"--max-steps 010", "leading zero", "octal"});
  expect_error("plan --global-seed 0x10" + out, {"--global-seed 0x10", "hexadecimal"});
  expect_error("plan --global-seed -1" + out, {"--global-seed -1", "must not be negative"});
  expect_error("tokenizer train --input x.txt --vocab-size 0400 --out " + dir + "/tok", {"--vocab-size 0400"});
  std::ofstream(dir + "/c.toml") << "max-steps = \"007\"\n";
  expect_error("train --config " + dir + "/c.toml" + out, {"--max-steps 007", "leading zero"});
  // Past 64 bits: refused, where CLI11 took the largest value (2^64 was 2^64 - 1).
  expect_error("plan --global-seed 18446744073709551616" + out, {"--global-seed 18446744073709551616", "out of range"});
  expect_error("plan --max-steps 99999999999999999999" + out, {"--max-steps 99999999999999999999", "out of range"});
  EXPECT_EQ(run_fittrain("plan --global-seed 18446744073709551615 --global-batch-size 10" + out).status, 0);
  EXPECT_EQ(run_fittrain("plan --global-seed 0 --max-steps 0 --global-batch-size 10" + out).status, 0);
}

// Every numeric flag out of its range: exit 2 naming the flag, from every command that takes
// it (one shared check, train/run_checks.h), before any data is opened or memory planned.
TEST(BadInput, EveryNumericFlagInItsRange) {
  const std::string dir = temp_dir("flags");
  const std::string out = " --results-dir " + dir + " --max-steps 1";
  const std::vector<std::pair<const char*, const char*>> train_flags = {
      {"--beta1", "1.5"},          {"--beta1", "-0.1"},         {"--beta1", "1"},
      {"--beta2", "1"},            {"--beta2", "nan"},          {"--eps", "0"},
      {"--eps", "-1e-8"},          {"--eps", "inf"},            {"--weight-decay", "-1"},
      {"--weight-decay", "nan"},   {"--lr", "0"},               {"--lr", "inf"},
      {"--lr", "nan"},             {"--min-lr-ratio", "1.5"},   {"--min-lr-ratio", "-0.1"},
      {"--grad-clip", "-1"},       {"--grad-clip", "nan"},      {"--warmup-steps", "-1"},
      {"--eval-batches", "-1"},    {"--keep-checkpoints", "-1"}, {"--keep-best", "-1"},
      {"--global-batch-size", "-3"}, {"--num-workers", "-1"},   {"--max-steps", "-1"},
      {"--eval-every", "-1"},      {"--ckpt-every", "-1"},      {"--log-every", "0"},
      {"--grad-accum-steps", "-1"}, {"--grad-accum-steps", "17"}, {"--eval-batch-size", "0"},
      {"--memory-limit", "1e30"},  {"--memory-limit", "2048TiB"}, {"--memory-limit", "0.5"},
      {"--host-memory-limit", "1e30"}, {"--host-memory-limit", "99999999999999999999999"},
      {"--comm-timeout", "0"},     {"--comm-timeout", "nan"},
  };
  for (const char* cmd : {"train", "plan"}) {
    for (auto [flag, value] : train_flags) {
      // (the flag under test last: the last value of a flag given twice wins)
      expect_error(std::string(cmd) + " --global-batch-size 16" + out + " " + flag + " " + value, {flag});
    }
  }
  // train only: a step count that would overflow; several CPU ranks come from mpirun, not
  // from fittrain's one-worker-per-GPU launcher
  expect_error("train --device cpu --devices 2 --results-dir " + dir, {"--devices", "mpirun"});
  expect_error("train --device cpu --devices 0,1 --results-dir " + dir, {"--devices", "mpirun"});
  expect_error("train --epochs 1000000000000000000 --results-dir " + dir, {"--epochs"});
  // test and sample share the flags they take
  const std::vector<std::pair<const char*, const char*>> eval_flags = {
      {"--eval-batches", "-1"}, {"--memory-limit", "1e30"}, {"--host-memory-limit", "1e30"},
      {"--global-batch-size", "0"}, {"--eval-batch-size", "x"}, {"--num-workers", "-1"}};
  for (const char* cmd : {"test", "sample"}) {
    for (auto [flag, value] : eval_flags)
      expect_error(std::string(cmd) + " " + flag + " " + value + " --results-dir " + dir, {flag});
  }
  for (auto [flag, value] : std::vector<std::pair<const char*, const char*>>{
           {"--temperature", "-1"}, {"--temperature", "nan"}, {"--top-k", "-1"}, {"--max-new-tokens", "-1"}})
    expect_error(std::string("sample ") + flag + " " + value + " --results-dir " + dir, {flag});
}

// Sizes that overflow: refused naming the flag, never "the budget is 0 B".
TEST(BadInput, HugeSizesAreRefusedNamingTheFlag) {
  const std::string dir = temp_dir("huge");
  for (const char* cmd : {"plan", "train"}) {
    const std::string base = std::string(cmd) + " --results-dir " + dir + " --max-steps 1";
    for (const char* v : {"1e30", "100000000000000000000", "1.2PB", "1025TiB"}) {
      CmdResult r = run_fittrain(base + " --memory-limit " + v);
      EXPECT_EQ(r.status, 2) << r.output;
      EXPECT_NE(r.output.find("--memory-limit"), std::string::npos) << r.output;
      EXPECT_NE(r.output.find("1 PiB"), std::string::npos) << r.output;
      EXPECT_EQ(r.output.find("0 B"), std::string::npos) << r.output;
    }
    for (const char* v : {"1000000000000000000", "9223372036854775807"}) {
      CmdResult r = run_fittrain(base + " --global-batch-size " + v);
      EXPECT_EQ(r.status, 2) << r.output;
      EXPECT_NE(r.output.find("--global-batch-size"), std::string::npos) << r.output;
      EXPECT_NE(r.output.find("too large"), std::string::npos) << r.output;
      EXPECT_EQ(r.output.find("0 B"), std::string::npos) << r.output;
    }
    expect_error(base + " --eval-batch-size 1000000000000000000", {"--eval-batch-size", "too large"});
    expect_error(base + " --global-batch-size 16 --micro-batch-size 9223372036854775807 --grad-accum-steps 2",
                 {"--micro-batch-size"});
  }
  // A recommender's limit counts its plan without the item table too (N (1 + K) rows scored):
  // this batch passed the table-on bound and the plan overflowed into "nothing fits ... 0 B".
  expect_error("plan --model gpt2rec --negatives 500 --global-batch-size 100000000000 --results-dir " + dir,
               {"--global-batch-size 100000000000 is too large"});
  // 1 PiB itself is accepted as a budget (the plan then fits on what it says).
  CmdResult ok = run_fittrain("plan --memory-limit 1PiB --results-dir " + dir);
  EXPECT_EQ(ok.status, 0) << ok.output;
}

// A shard of `n` tokens below 200 with `bad` at position `at` (none when at >= n).
void write_tokens_with(const std::string& path, size_t n, size_t at, uint32_t bad) {
  std::vector<uint32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = static_cast<uint32_t>(i % 200);
  if (at < n) t[at] = bad;
  write_shard(path, t);
}

bool no_checkpoints(const std::string& results) {
  const std::string d = checkpoint_dir(results);
  return !std::filesystem::exists(d) || list_checkpoints(d).empty();
}

// A token outside the vocabulary anywhere in a train shard stops the run at start: before
// step 1, with nothing in the results folder's checkpoints. (It used to stop at the step
// that drew it, after the checkpoints before it, and every resume died at that step.)
TEST(BadInput, BadTokenInATrainShardFailsBeforeStep1) {
  const std::string dir = temp_dir("badtrain"), path = dir + "/train.bin", res = dir + "/results";
  // 64 samples of T=64, the bad token in the last: seed 0 draws it at step 3, after two
  // checkpoints when it was only checked as read.
  write_tokens_with(path, 64 * 64 + 1, 64 * 63 + 5, 300);
  const std::string args = std::string("train ") + kSmallModel + " --data-path " + path + " --results-dir " + res +
                           " --max-steps 4 --ckpt-every 1 --eval-every 0 --log-every 1 --keep-checkpoints 0";
  CmdResult r = run_fittrain(args);
  EXPECT_EQ(r.status, 2) << r.output;
  for (const std::string n : {path, std::string("token 300 at position 4037"), std::string("vocab size 257"),
                              std::string("--data-path")})
    EXPECT_NE(r.output.find(n), std::string::npos) << n << " not in " << r.output;
  EXPECT_EQ(r.output.find("step      1/"), std::string::npos) << r.output;
  EXPECT_TRUE(no_checkpoints(res)) << r.output;
}

// In a validation shard: refused at start too (it used to fail the final evaluation, before
// the final checkpoint).
TEST(BadInput, BadTokenInAValidationShardFailsBeforeStep1) {
  const std::string dir = temp_dir("badval"), train = dir + "/train.bin", val = dir + "/val.bin",
                    res = dir + "/results";
  write_tokens_with(train, 64 * 64 + 1, SIZE_MAX, 0);
  write_tokens_with(val, 8 * 64 + 1, 100, 1000);
  const std::string args = std::string("train ") + kSmallModel + " --data-path " + train + " --val-data-path " +
                           val + " --results-dir " + res +
                           " --max-steps 2 --ckpt-every 1 --eval-every 0 --log-every 1 --eval-batches 1";
  CmdResult r = run_fittrain(args);
  EXPECT_EQ(r.status, 2) << r.output;
  for (const std::string n : {val, std::string("token 1000 at position 100"), std::string("vocab size 257"),
                              std::string("--val-data-path")})
    EXPECT_NE(r.output.find(n), std::string::npos) << n << " not in " << r.output;
  EXPECT_EQ(r.output.find("step      1/"), std::string::npos) << r.output;
  EXPECT_TRUE(no_checkpoints(res)) << r.output;
}

// A FIFO where a shard should be: refused by name at once (it used to block in open(2)
// forever). Run under timeout so a regression fails instead of hanging the suite.
TEST(BadInput, FifoAsDataPathIsRefusedQuickly) {
  const std::string dir = temp_dir("fifo"), fifo = dir + "/pipe.bin", good = dir + "/good/train.bin";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  std::filesystem::create_directories(dir + "/good");
  write_tokens(good, 5000);
  const std::string common = std::string(" ") + kSmallModel + " --results-dir " + dir + "/r --max-steps 1";
  struct Case {
    std::string args, flag;
  };
  const std::vector<Case> cases = {
      {"train --data-path " + fifo + common, "--data-path"},
      {"train --data-path " + dir + common, "--data-path"},  // a folder whose *.bin include it
      {"train --data-path " + good + " --val-data-path " + fifo + common, "--val-data-path"},
      {"test --val-data-path " + fifo + " --results-dir " + dir + "/r", ""},
  };
  for (const Case& c : cases) {
    const auto t0 = std::chrono::steady_clock::now();
    CmdResult r = run_fittrain(c.args, 20);
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (c.args.rfind("test", 0) == 0) {
      // no checkpoint to test: refused for that, or for the FIFO, but never a hang
      EXPECT_EQ(r.status, 2) << c.args << "\n" << r.output;
    } else {
      EXPECT_EQ(r.status, 2) << c.args << "\n" << r.output;
      EXPECT_NE(r.output.find(fifo), std::string::npos) << r.output;
      EXPECT_NE(r.output.find("FIFO"), std::string::npos) << r.output;
      EXPECT_NE(r.output.find(c.flag), std::string::npos) << r.output;
    }
    EXPECT_LT(sec, 10.0) << c.args;
  }
  expect_error("train --data-path /dev/zero" + common, {"/dev/zero", "character device", "--data-path"});
}

TEST(BadInput, CheckpointsSurviveBadRunsAndCorruptionIsSkipped) {
  const std::string dir = temp_dir("keep");
  const std::string base = std::string("train ") + kSmallModel + " --results-dir " + dir +
                           " --log-every 1 --eval-every 0 --eval-batches 1 --keep-checkpoints 0";
  CmdResult r = run_fittrain(base + " --max-steps 4 --ckpt-every 2");
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string c2 = checkpoint_path(checkpoint_dir(dir), 2), c4 = checkpoint_path(checkpoint_dir(dir), 4);
  const std::string before2 = read_file(c2), before4 = read_file(c4);

  // A bad flag on a resumed run changes nothing on disk.
  expect_error(base + " --max-steps 8 --resume auto --memory-limit 1KiB", {"--memory-limit"});
  EXPECT_EQ(read_file(c2), before2);
  EXPECT_EQ(read_file(c4), before4);
  // Another model shape refuses the checkpoint by name.
  expect_error(base + " --n-layer 3 --max-steps 8 --resume auto", {c4.c_str(), "n_layer"});
  EXPECT_EQ(read_file(c4), before4);

  // Corrupt the newest: an explicit resume names it; auto skips it with a warning.
  {
    std::fstream f(c4, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-10, std::ios::end);
    f.put('\x5a');
  }
  expect_error(base + " --max-steps 6 --resume " + c4, {c4.c_str()});
  CmdResult a = run_fittrain(base + " --max-steps 6 --resume auto");
  ASSERT_EQ(a.status, 0) << a.output;
  EXPECT_NE(a.output.find("warning"), std::string::npos) << a.output;
  EXPECT_NE(a.output.find("at step 2"), std::string::npos) << a.output;
  EXPECT_EQ(read_file(c2), before2);
}

TEST(Signals, TermSavesACheckpointAndExits130) {
  const std::string dir = temp_dir("signal");
  FittrainProcess p({"train", "--n-layer", "1", "--n-embd", "32", "--n-head", "1", "--seq-len", "32", "--results-dir",
                     dir, "--max-steps", "100000", "--log-every", "1", "--eval-every", "0", "--ckpt-every", "0"});
  ASSERT_TRUE(p.read_until("step      3/")) << p.output();
  p.signal(SIGTERM);
  const int status = p.wait();
  const std::string& out = p.output();
  EXPECT_EQ(status, 130) << out;
  auto cks = list_checkpoints(checkpoint_dir(dir));
  ASSERT_EQ(cks.size(), 1u) << out;
  EXPECT_GE(cks[0].step, 3);
  EXPECT_NE(out.find("--resume auto"), std::string::npos) << out;
}

// A checkpoint whose optimizer section has another dtype than fittrain writes (a file from
// another tool, or edited) is refused by name on resume. It used to be skipped silently, which
// left Adam's moments as whatever the arena's memory held.
TEST(BadInput, AnOptimizerSectionOfAnotherDtypeIsRefused) {
  const std::string dir = temp_dir("ckpt_dtype");
  const std::string base = std::string("train ") + kSmallModel + " --log-every 1 --eval-every 0 --eval-batches 1";
  CmdResult r = run_fittrain(base + " --max-steps 1 --results-dir " + dir + "/a");
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string good = checkpoint_path(checkpoint_dir(dir + "/a"), 1), edited = dir + "/edited.ftc";
  {
    CheckpointReader in(good);
    std::vector<std::vector<char>> payloads;
    std::vector<CheckpointSection> sections;
    for (const CheckpointReader::Entry& e : in.sections()) {
      payloads.emplace_back(e.bytes);
      in.read(e.name, payloads.back().data(), e.bytes);
    }
    for (size_t i = 0; i < in.sections().size(); ++i) {
      const CheckpointReader::Entry& e = in.sections()[i];
      const bool halve = e.name == "adam_m";  // f32 -> the same count of bf16: the upper halves
      if (halve)
        for (size_t k = 0; k < e.bytes / 4; ++k) std::memcpy(&payloads[i][2 * k], &payloads[i][4 * k + 2], 2);
      sections.push_back(CheckpointSection{e.name, payloads[i].data(), halve ? e.bytes / 2 : e.bytes,
                                           halve ? "bf16" : e.dtype});
    }
    write_checkpoint(edited, in.meta(), sections);
  }
  expect_error(base + " --max-steps 2 --results-dir " + dir + "/b --resume " + edited,
               {edited.c_str(), "section 'adam_m' has dtype bf16, expected f32"});
}

// A resume with another --global-seed than the run's is refused naming both: the seed orders
// every epoch's samples (and draws negatives and noise), so another would repeat and skip
// samples from the checkpoint on. It was accepted silently before session 40.
TEST(BadInput, AResumeWithAnotherSeedIsRefused) {
  const std::string dir = temp_dir("resume_seed");
  const std::string base = std::string("train ") + kSmallModel + " --log-every 1 --eval-every 0 --eval-batches 1 " +
                           "--results-dir " + dir;
  CmdResult r = run_fittrain(base + " --max-steps 1 --global-seed 3");
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string ckpt = checkpoint_path(checkpoint_dir(dir), 1), before = read_file(ckpt);
  expect_error(base + " --max-steps 2 --resume auto", {ckpt.c_str(), "--global-seed 3", "this run has 0"});
  EXPECT_EQ(read_file(ckpt), before);
  r = run_fittrain(base + " --max-steps 2 --resume auto --global-seed 3");
  EXPECT_EQ(r.status, 0) << r.output;
}

// A worker of fittrain's own launcher keeps to its clean stop however many SIGTERMs reach it:
// a job manager that signals every process of the job (Slurm's scancel, systemd's stop) reaches
// it directly and through the launcher, which forwards the signal (and kills its workers on a
// second one of its own). A world of one CPU worker, as the launcher's environment names it;
// the second signal comes mid-step (a step takes longer than the 0.2 s between them), where a
// plain process dies of it.
TEST(Signals, ALaunchedWorkerStopsCleanlyOnASecondTerm) {
  const std::string dir = temp_dir("signal_worker");
  FittrainProcess p({"train", "--n-layer", "2", "--n-embd", "256", "--n-head", "4", "--seq-len", "256",
                     "--global-batch-size", "16", "--results-dir", dir, "--max-steps", "100000", "--log-every", "1",
                     "--eval-every", "0", "--ckpt-every", "0"},
                    {"FITTRAIN_RANK=0", "FITTRAIN_WORLD_SIZE=1", "FITTRAIN_LOCAL_RANK=0", "FITTRAIN_DEVICE=0"});
  ASSERT_TRUE(p.read_until("step      2/")) << p.output();
  p.signal(SIGTERM);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  p.signal(SIGTERM);
  const int status = p.wait();
  const std::string& out = p.output();
  EXPECT_EQ(status, 130) << out;
  EXPECT_EQ(list_checkpoints(checkpoint_dir(dir)).size(), 1u) << out;
}

}  // namespace
}  // namespace ft
