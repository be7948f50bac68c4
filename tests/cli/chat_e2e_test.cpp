// Prompt/response pretraining end to end through the binary: prepare a JSONL file of a
// learnable task, train --task chat on the CPU, and watch validation BLEU-4 (greedy responses
// generated with the KV cache) rise well above 0; `test` reports it for a checkpoint.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>

#include "cli/cli_util.h"
#include "dist/mpi_util.h"

namespace ft {
namespace {
using namespace ft::testing;

// "copy: w1 w2 w3 w4" -> "w1 w2 w3 w4": the response repeats the prompt's words (8 words, 3 to
// 5 of them), which a 2-layer model learns in a few hundred steps by attending to the prompt.
void write_copy_task(const std::string& path, int n, uint32_t seed) {
  static const char* kWords[] = {"red", "blue", "green", "cat", "dog", "sun", "moon", "tree"};
  std::mt19937 rng(seed);
  std::ofstream f(path);
  for (int i = 0; i < n; ++i) {
    std::string words;
    const int k = 3 + static_cast<int>(rng() % 3);
    for (int j = 0; j < k; ++j) words += std::string(j ? " " : "") + kWords[rng() % 8];
    f << nlohmann::json{{"prompt", "copy: " + words + "\n"}, {"response", words}}.dump() << "\n";
  }
}

double metric_at_last_eval(const std::string& metrics, const std::string& key, double* first) {
  std::istringstream lines(read_file(metrics));
  std::string line;
  double last = -1;
  *first = -1;
  while (std::getline(lines, line)) {
    const auto row = nlohmann::json::parse(line);
    if (!row.contains(key)) continue;
    if (*first < 0) *first = row[key].get<double>();
    last = row[key].get<double>();
  }
  return last;
}

TEST(ChatE2E, BleuRisesOnALearnableTaskAndTestReportsIt) {
  const std::string dir = temp_dir("chat_e2e");
  write_copy_task(dir + "/pairs.jsonl", 4000, 1);
  CmdResult prep = run_fittrain("prepare --input " + dir + "/pairs.jsonl --out " + dir + "/data --seq-len 64");
  ASSERT_EQ(prep.status, 0) << prep.output;
  const std::string common = " --task chat --data-path " + dir + "/data --results-dir " + dir + "/run" +
                             " --bleu-samples 48 --eval-max-new-tokens 24 --eval-batches 4";
  CmdResult r = run_fittrain(std::string("train ") + kSmallModel + common +
                             " --max-steps 400 --lr 3e-3 --warmup-steps 20 --log-every 100 --eval-every 100"
                             " --ckpt-every 0 --metrics-file " + dir + "/m.jsonl");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("task chat"), std::string::npos) << r.output;
  double first = 0;
  const double last = metric_at_last_eval(dir + "/m.jsonl", "val_bleu4", &first);
  EXPECT_GT(last, 30.0) << "validation BLEU-4 did not rise well above 0\n" << r.output;
  EXPECT_GT(last, first + 10) << r.output;
  // test: BLEU of the final checkpoint on the validation split
  CmdResult t = run_fittrain("test" + common);
  ASSERT_EQ(t.status, 0) << t.output;
  EXPECT_NE(t.output.find("bleu4 "), std::string::npos) << t.output;
  EXPECT_NE(t.output.find(" on validation split: "), std::string::npos) << t.output;
}

// Pairs that prepare cut to --seq-len keep only the start of their reference (none when the
// prompt filled the row): BLEU leaves them out and says how many, rather than scoring a full
// answer against a cut reference.
TEST(ChatE2E, BleuLeavesOutPairsWhoseReferenceWasCut) {
  const std::string dir = temp_dir("chat_truncated");
  write_copy_task(dir + "/train.jsonl", 60, 3);
  {
    std::ofstream v(dir + "/val.jsonl");
    std::string long_prompt = "copy:";
    for (int w = 0; w < 80; ++w) long_prompt += " red";
    for (int i = 0; i < 9; ++i)
      v << nlohmann::json{{"prompt", i % 3 == 0 ? long_prompt : "copy: cat dog\n"}, {"response", "cat dog"}}.dump()
        << "\n";
  }
  ASSERT_EQ(run_fittrain("prepare --input " + dir + "/train.jsonl --val-input " + dir + "/val.jsonl --out " + dir +
                         "/data --seq-len 64").status, 0);
  const std::string common = " --task chat --data-path " + dir + "/data --results-dir " + dir + "/run" +
                             " --bleu-samples 100 --eval-max-new-tokens 4";
  ASSERT_EQ(run_fittrain(std::string("train ") + kSmallModel + common + " --max-steps 1 --eval-every 0").status, 0);
  CmdResult t = run_fittrain("test" + common);
  ASSERT_EQ(t.status, 0) << t.output;
  EXPECT_TRUE(std::regex_search(t.output, std::regex("bleu_truncated_left_out 3\\b"))) << t.output;
}

// Rows that prepare cut inside their prompt have no response token, so no loss unit. A global
// batch of such rows only has no mean loss and a zero gradient: its update is skipped, said
// and logged, without counting as a bad step, and the run goes on (it stopped with an internal
// error, device and host disagreeing on the skip, and again at the same step on resume). On 1
// rank and, where mpirun runs, on 2. A validation split of such rows only is refused at start.
TEST(ChatE2E, AGlobalBatchWithNoLossUnitIsSkippedAndTheRunGoesOn) {
  const std::string dir = temp_dir("chat_no_units");
  std::string long_prompt = "copy:";
  for (int w = 0; w < 80; ++w) long_prompt += " red";
  {
    std::ofstream t(dir + "/train.jsonl");
    for (int i = 0; i < 40; ++i)
      t << nlohmann::json{{"prompt", i % 4 ? long_prompt : "copy: cat dog\n"}, {"response", "cat dog"}}.dump() << "\n";
    std::ofstream v(dir + "/val.jsonl");
    for (int i = 0; i < 8; ++i) v << nlohmann::json{{"prompt", "copy: sun\n"}, {"response", "sun"}}.dump() << "\n";
    std::ofstream e(dir + "/empty_val.jsonl");
    for (int i = 0; i < 8; ++i) e << nlohmann::json{{"prompt", long_prompt}, {"response", "sun"}}.dump() << "\n";
  }
  ASSERT_EQ(run_fittrain("prepare --input " + dir + "/train.jsonl --val-input " + dir + "/val.jsonl --out " + dir +
                         "/data --seq-len 64").status, 0);
  const std::string model = " --task chat --n-layer 1 --n-head 1 --n-embd 32 --seq-len 64 --global-batch-size 2"
                            " --max-steps 12 --log-every 1 --eval-every 6 --eval-batches 2 --bleu-samples 4"
                            " --eval-max-new-tokens 2 --ckpt-every 0";
  auto check = [&](const CmdResult& r, const std::string& metrics) {
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_EQ(r.output.find("internal error"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("update skipped: no loss unit in the global batch"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("bad step"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("done       12 steps"), std::string::npos) << r.output;
    int skipped = 0, trained = 0;
    std::istringstream lines(read_file(metrics));
    for (std::string line; std::getline(lines, line);) {
      const auto row = nlohmann::json::parse(line);
      if (row.value("reason", "") == "no loss unit in the global batch") ++skipped;
      if (row.contains("tokens_per_s") && row["loss"].is_number()) ++trained;
      if (row.contains("tokens_per_s") && row["loss"].is_null()) EXPECT_EQ(row["grad_norm"], 0.0) << line;
    }
    EXPECT_GT(skipped, 0) << r.output;
    EXPECT_GT(trained, 0) << r.output;
  };
  check(run_fittrain("train --data-path " + dir + "/data --results-dir " + dir + "/run1 --metrics-file " + dir +
                     "/m1.jsonl" + model, 300), dir + "/m1.jsonl");
  if (mpirun_missing().empty())
    check(run_command(timed_mpirun(300) + FITTRAIN_BINARY + std::string(" train --data-path ") + dir + "/data --results-dir " + dir +
                    "/run2 --metrics-file " + dir + "/m2.jsonl" + model), dir + "/m2.jsonl");

  ASSERT_EQ(run_fittrain("prepare --input " + dir + "/train.jsonl --val-input " + dir + "/empty_val.jsonl --out " + dir +
                         "/empty --seq-len 64").status, 0);
  CmdResult r = run_fittrain("train --data-path " + dir + "/empty --results-dir " + dir + "/run3" + model, 120);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--data-path's validation files: the 4 samples evaluated hold no loss unit"),
            std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("step      1/"), std::string::npos) << r.output;
  // Training rows that all lack one: refused at the start (every update would be skipped and
  // the run end with exit 0 having learned nothing). That folder's validation shard is such.
  r = run_fittrain("train --data-path " + dir + "/empty/val_000000.pairs --results-dir " + dir + "/run4" + model, 120);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--data-path: none of the 8 training samples holds a loss unit"), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("step      1/"), std::string::npos) << r.output;
}

TEST(ChatE2E, ChatNeedsPackedPairsAndSaysHowToMakeThem) {
  const std::string dir = temp_dir("chat_bad");
  CmdResult r = run_fittrain(std::string("train ") + kSmallModel + " --task chat --results-dir " + dir + " --max-steps 1");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--task chat needs --data-path"), std::string::npos) << r.output;
  CmdResult b = run_fittrain(std::string("train ") + kSmallModel + " --task chat --bleu-tokenize 14a --results-dir " +
                             dir + " --max-steps 1");
  EXPECT_NE(b.status, 0);
  EXPECT_NE(b.output.find("--bleu-tokenize must be 13a, zh or none"), std::string::npos) << b.output;
  // pairs given to the language-model task, and token shards to the chat task: named
  write_copy_task(dir + "/p.jsonl", 50, 2);
  ASSERT_EQ(run_fittrain("prepare --input " + dir + "/p.jsonl --out " + dir + "/pairs --seq-len 64").status, 0);
  CmdResult lm = run_fittrain(std::string("train ") + kSmallModel + " --data-path " + dir + "/pairs --results-dir " +
                              dir + "/r1 --max-steps 1");
  EXPECT_NE(lm.status, 0);
  EXPECT_NE(lm.output.find("train them with --task chat"), std::string::npos) << lm.output;
}

}  // namespace
}  // namespace ft
