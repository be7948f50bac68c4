// A command line that helps: typos get the nearest command or flag, `help [COMMAND]` and
// `--version` work, and every parse error is one "fittrain: error:" line with exit 2.
#include <gtest/gtest.h>

#include <fstream>
#include <utility>
#include <vector>

#include "cli/cli_util.h"

namespace ft {
namespace {
using namespace ft::testing;

TEST(CliWords, TyposGetTheNearestCommandOrFlag) {
  expect_error("trian", {"unknown command 'trian'", "did you mean 'train'?"});
  expect_error("train --global-batch-szie 32", {"unknown flag --global-batch-szie", "did you mean --global-batch-size?"});
  expect_error("sample --promt hi", {"unknown flag --promt", "did you mean --prompt?"});
  expect_error("tokenizer tran", {"unknown command 'tran'", "did you mean 'train'?"});
  // a flag of another command is not this one's; the checkpoint's settings are not flags of
  // test and sample (they were silently ignored before)
  expect_error("sample --keep-best 3", {"--keep-best is not a flag of 'fittrain sample'", "train, plan"});
  expect_error("sample --n-layer 2", {"--n-layer is not a flag of 'fittrain sample'", "from the checkpoint"});
  expect_error("test --seq-len 64", {"--seq-len is not a flag of 'fittrain test'", "from the checkpoint"});
  expect_error("", {"needs a command: train, test, sample, prepare, plan, tokenizer"});
  expect_error("train --lr abc", {"--lr", "fittrain train --help"});
}

// A flag another task reads is refused, naming it and the task that reads it: they were
// accepted and ignored (a language model trained with --bleu-samples, --eval-images, an EMA
// schedule without an EMA, a text preparation with --loss-on).
TEST(CliWords, FlagsOfAnotherTaskAreRefusedNotIgnored) {
  const std::string run = std::string(" --n-layer 1 --n-head 1 --n-embd 32 --seq-len 32 --max-steps 1 --results-dir ") +
                          temp_dir("task_flags");
  for (const auto& [flag, reader] : std::vector<std::pair<std::string, std::string>>{
           {"--bleu-samples 4", "--task chat"},        {"--bleu-tokenize zh", "--task chat"},
           {"--eval-max-new-tokens 8", "--task chat"}, {"--rank-users 10", "--task rec"},
           {"--item-cache on", "--task rec"},          {"--eval-images 4", "--task diffusion"},
           {"--sample-steps 3", "--task diffusion"},   {"--eta 0.5", "--task diffusion"}})
    for (const char* cmd : {"train", "plan"})  // plan takes train's command line, and refuses what it refuses
      expect_error(cmd + run + " " + flag, {flag.substr(0, flag.find(' ')) + " applies to " + reader, "not to --task lm"});
  for (const char* cmd : {"train", "plan"})
    expect_error(cmd + run + " --ema-every 5", {"--ema-every sets the schedule of an EMA", "pass --ema-decay too"});
  const std::string d = temp_dir("task_flags_prepare");
  std::ofstream(d + "/a.txt") << "some text\n";
  expect_error("prepare --input " + d + "/a.txt --out " + d + "/out --loss-on all",
               {"--loss-on applies to prompt/response data: add --pairs"});
}

TEST(CliWords, HelpTopicsAndVersion) {
  CmdResult r = run_fittrain("help");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("train"), std::string::npos) << r.output;
  r = run_fittrain("help sample");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("--prompt"), std::string::npos) << r.output;
  for (const char* train_only : {"--keep-best", "--n-layer", "--micro-batch-size", "--zero-stage", "--ema-decay"})
    EXPECT_EQ(r.output.find(train_only), std::string::npos) << "sample's help lists " << train_only << "\n" << r.output;
  // sample reads data for recommenders and diffusion models (their users, their conditions)
  for (const char* sample_flag : {"--data-path", "--num-images", "--sample-steps", "--eta"})
    EXPECT_NE(r.output.find(sample_flag), std::string::npos) << sample_flag << "\n" << r.output;
  r = run_fittrain("help tokenizer train");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("--vocab-size"), std::string::npos) << r.output;
  expect_error("help nope", {"no help topic 'nope'"});
  // topics beside the commands: listed, printed, and a typo names the nearest
  r = run_fittrain("help");
  for (const char* t : {"Topics (fittrain help TOPIC):", "memory", "data", "devices", "checkpoints"})
    EXPECT_NE(r.output.find(t), std::string::npos) << t << "\n" << r.output;
  r = run_fittrain("help data");
  EXPECT_EQ(r.status, 0) << r.output;
  for (const char* w : {"--task chat", "*.pairs", "fittrain prepare --input pairs.jsonl", "tokenizer train"})
    EXPECT_NE(r.output.find(w), std::string::npos) << w << "\n" << r.output;
  r = run_fittrain("help memory");
  EXPECT_NE(r.output.find("--memory-limit"), std::string::npos) << r.output;
  expect_error("help devcies", {"no help topic 'devcies'", "did you mean devices?"});
  expect_error("help sampel", {"did you mean sample?"});
  r = run_fittrain("--version");
  EXPECT_EQ(r.status, 0) << r.output;
  for (const char* w : {"fittrain 0.5.0 (git ", "CPU backend", "CUDA backend: ", "NCCL (GPU ranks): ", "MPI "})
    EXPECT_NE(r.output.find(w), std::string::npos) << w << "\n" << r.output;
}


// `plan --ranks N` shows the plan one rank of N would run (per-rank batch, ZeRO-1 chosen by
// default with several ranks), without starting anything.
TEST(PlanRanks, PlansOneRankOfMany) {
  const std::string m = "plan --n-layer 1 --n-head 2 --n-embd 32 --seq-len 32 --global-batch-size 8 ";
  CmdResult r = run_fittrain(m + "--ranks 2");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("global batch 8 = micro-batch 4 x 1 accumulation x 2 rank(s)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("ZeRO stage 1"), std::string::npos) << r.output;
  r = run_fittrain(m + "--ranks 2 --zero-stage 0");
  EXPECT_NE(r.output.find("ZeRO stage 0"), std::string::npos) << r.output;
  r = run_fittrain(m + "--ranks 3");  // 8 over 3 ranks: shares 3, 3 and 2
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("ranks' shares: 2 x 3 + 1 x 2 samples"), std::string::npos) << r.output;
  r = run_fittrain(m + "--ranks 3 --json");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(nlohmann::json::parse(r.output)["rank_batch_sizes"], nlohmann::json({3, 3, 2})) << r.output;
  r = run_fittrain(m + "--ranks 9");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("smaller than the 9 ranks"), std::string::npos) << r.output;
  r = run_fittrain(m + "--ranks -1");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--ranks"), std::string::npos) << r.output;
}


// prepare never replaces earlier shards unless asked, and refuses a file that is not text.
TEST(PrepareSafety, ExistingShardsNeedOverwriteAndBinaryInputIsRefused) {
  const std::string d = temp_dir("prepare_safety");
  {
    std::ofstream(d + "/a.txt") << "The first document.\nIt has two lines.\n";
    std::ofstream(d + "/b.txt") << "A second document, longer than the first one, so there is something to split.\n";
  }
  const std::string cmd = "prepare --input " + d + "/a.txt " + d + "/b.txt --out " + d + "/data";
  CmdResult r = run_fittrain(cmd);
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string before = read_file(d + "/data/train_000000.bin");
  r = run_fittrain(cmd);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("already holds shards"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--overwrite"), std::string::npos) << r.output;
  EXPECT_EQ(read_file(d + "/data/train_000000.bin"), before);  // untouched
  r = run_fittrain(cmd + " --overwrite");
  EXPECT_EQ(r.status, 0) << r.output;
  {
    std::ofstream bin(d + "/c.bin", std::ios::binary);
    const char bytes[8] = {'P', 'K', 3, 4, 0, 0, 1, 2};
    bin.write(bytes, sizeof bytes);
  }
  r = run_fittrain("prepare --input " + d + "/c.bin --out " + d + "/data2");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("c.bin: not a text file (a NUL byte at offset 4)"), std::string::npos) << r.output;
}


// `test` says how much it evaluated: the first --eval-batches batches of --global-batch-size
// samples, counted, or all; and how many it ran at a time. The samples are the same whatever
// the evaluation batch that fits (here 4 or 2 at a time: the same 16 samples, the same loss).
TEST(TestScope, SaysHowManySamplesItEvaluated) {
  const std::string d = temp_dir("test_scope");
  CmdResult r = run_fittrain("train --n-layer 1 --n-head 2 --n-embd 32 --seq-len 32 --global-batch-size 8 "
                             "--max-steps 2 --eval-every 0 --eval-batches 1 --results-dir " + d);
  ASSERT_EQ(r.status, 0) << r.output;
  r = run_fittrain("test --eval-batches 2 --global-batch-size 8 --eval-batch-size 4 --results-dir " + d);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("| 16 of "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("samples (2 batches of 8; --eval-batches 0 evaluates all), 4 at a time"),
            std::string::npos) << r.output;
  CmdResult two = run_fittrain("test --eval-batches 2 --global-batch-size 8 --eval-batch-size 2 --results-dir " + d);
  ASSERT_EQ(two.status, 0) << two.output;
  EXPECT_NE(two.output.find("| 16 of "), std::string::npos) << two.output;
  const size_t at = r.output.find("loss "), at2 = two.output.find("loss ");
  ASSERT_NE(at, std::string::npos);
  ASSERT_NE(at2, std::string::npos);
  EXPECT_NEAR(std::stod(r.output.substr(at + 5)), std::stod(two.output.substr(at2 + 5)), 1.01e-4)
      << r.output << two.output;
}

}  // namespace
}  // namespace ft
