// Tasks: the language-model task's samples and loss units, the checks between a task's data
// and the model's inputs, and checkpoints written before models were generic.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "backend/cpu/cpu_backend.h"
#include "data/test_util.h"
#include "models/gpt2_lm.h"
#include "data/prepare_pairs.h"
#include "train/chat_task.h"
#include "train/checkpoint.h"
#include "train/lm_task.h"
#include "train/model_io.h"
#include "train/runtime.h"
#include "train/part_comm.h"
#include "train/task.h"

namespace ft {
namespace {

using ft::test::expect_user_error;
using ft::test::PartComm;

class FakeSource final : public SampleSource {
 public:
  explicit FakeSource(std::vector<FieldSpec> f) : f_(std::move(f)) {}
  uint64_t num_samples() const override { return 3; }
  std::vector<FieldSpec> fields() const override { return f_; }
  void read(uint64_t, std::span<void* const>) const override {}

 private:
  std::vector<FieldSpec> f_;
};

TEST(Task, FieldsMustMatchWhatTheModelReads) {
  GPT2LM m(GPT2Config{1, 1, 8, 8, 50});
  check_fields(FakeSource({{"tokens", DType::i32, 8}, {"targets", DType::i32, 8}, {"extra", DType::f32, 2}}), m, "t");
  expect_user_error([&] { check_fields(FakeSource({{"tokens", DType::i32, 8}}), m, "--task lm"); },
                    {"--task lm", "no field 'targets'", "gpt2"});
  expect_user_error(
      [&] { check_fields(FakeSource({{"tokens", DType::i32, 7}, {"targets", DType::i32, 8}}), m, "--task lm"); },
      {"field 'tokens'", "i32 x 7", "i32 x 8"});
}

TEST(Task, UnknownTaskIsNamed) {
  RunConfig rc;
  rc.task = "translation";
  GPT2LM m(GPT2Config{1, 1, 8, 8, 257});
  expect_user_error([&] { make_task(rc, m, true); }, {"--task", "translation", "lm"});
}

TEST(Task, LanguageModelCountsTokensAndReportsPerplexity) {
  const std::string dir = "/tmp/fittrain_test_task_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  RunConfig rc;
  rc.results_dir = dir;  // built-in corpus
  GPT2LM m(GPT2Config{1, 1, 8, 16, 257});
  auto task = make_task(rc, m, true);
  EXPECT_EQ(task->name(), "lm");
  ASSERT_NE(task->val_data(), nullptr);
  const uint64_t idx[3] = {0, 5, 2};
  EXPECT_EQ(task->loss_units(task->train_data(), idx), 3.0 * 16);
  auto metrics = task->metrics(std::log(7.0));
  ASSERT_EQ(metrics.size(), 1u);
  EXPECT_EQ(metrics[0].name, "perplexity");
  EXPECT_NEAR(metrics[0].value, 7.0, 1e-9);
  EXPECT_NE(task->data_summary().find("unigram entropy"), std::string::npos);
  std::filesystem::remove_all(dir);
}

// Two ranks split an evaluation by batches (EvalShard): rank 0 takes batches 0, 2, 4 of five,
// rank 1 batches 1 and 3, and the sums each adds over the ranks are its own part's, which
// together are one process's whole.
TEST(Task, EvaluationSplitsItsBatchesOverTheRanks) {
  const std::string dir = "/tmp/fittrain_test_task_split_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  RunConfig rc;
  rc.results_dir = dir;  // built-in corpus
  const GPT2Config cfg{1, 2, 16, 16, 257};
  GPT2LM m(cfg);
  auto task = make_task(rc, m, true);
  const SampleSource& val = *task->val_data();
  auto be = make_cpu_backend();
  std::vector<float> w(static_cast<size_t>(m.num_params()));
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.05f * std::sin(0.37f * static_cast<float>(i));
  PlanShape s;
  s.training = false;
  s.eval_batch = 4;
  ModelRuntime alone(m, *be, s);
  alone.load_params_from_host(w.data());
  const double whole = evaluate(alone, *task, val, 4, 20);
  double loss = 0, units = 0, mean[2];
  for (int r = 0; r < 2; ++r) {
    GPT2LM part(cfg);
    PartComm comm(r);
    PlanShape ps = s;
    ps.world_size = 2;
    ModelRuntime rt(part, *be, ps, &comm);
    rt.load_params_from_host(w.data());
    mean[r] = evaluate(rt, *task, val, 4, 20);
    ASSERT_EQ(comm.sums.size(), 3u);
    EXPECT_EQ(comm.sums[2], 0.0) << "rank " << r << " ran out of memory";
    EXPECT_EQ(comm.sums[1], (r == 0 ? 3 : 2) * 4.0 * 16) << "rank " << r << "'s loss units";
    EXPECT_NEAR(mean[r], comm.sums[0] / comm.sums[1], 1e-12);
    loss += comm.sums[0], units += comm.sums[1];
  }
  EXPECT_NE(mean[0], mean[1]);
  EXPECT_NEAR(loss / units, whole, 1e-12 * whole);
  std::filesystem::remove_all(dir);
}

// A rank whose part of an evaluation runs out of memory keeps the failure (part()) and still
// joins the sums, with its vote: every rank then throws RanksOutOfMemoryError (the trainer
// re-plans them together), the failing one with its own message. Alone, part() throws at once.
TEST(EvalShard, ARankOutOfMemoryStillSumsAndEveryRankLearnsOfIt) {
  test::PartComm comm(1);
  const EvalShard failing{1, 2, &comm, {}};
  failing.part([] { throw OutOfMemoryError("cannot allocate the logits"); });
  EXPECT_EQ(failing.failed, "cannot allocate the logits");
  double v[2] = {3, 4};
  try {
    failing.sum(v);
    ADD_FAILURE() << "no RanksOutOfMemoryError";
  } catch (const RanksOutOfMemoryError& e) {
    EXPECT_STREQ(e.what(), "cannot allocate the logits");
  }
  EXPECT_EQ(comm.sums, (std::vector<double>{3, 4, 1}));  // its sums and its vote went out

  // The healthy rank: its sum comes back with the other's vote.
  test::PartComm peer(0);
  peer.others_last = 1;  // the other rank's vote
  const EvalShard healthy{0, 2, &peer, {}};
  healthy.part([] {});
  EXPECT_THROW(healthy.sum(v), RanksOutOfMemoryError);

  const EvalShard alone;
  EXPECT_THROW(alone.part([] { throw OutOfMemoryError("alone"); }), OutOfMemoryError);
  EXPECT_TRUE(alone.failed.empty());
}

TEST(Task, CheckpointsOfTheGpt2OnlyFormatStillLoad) {
  const std::string path = "/tmp/fittrain_test_old_format_" + std::to_string(::getpid()) + ".ftc";
  // What fittrain wrote before the model seam: format "fittrain-gpt2", no task.
  nlohmann::json meta = {{"format", "fittrain-gpt2"},
                         {"model", {{"arch", "gpt2"}, {"n_layer", 1}, {"n_head", 1}, {"n_embd", 8}, {"seq_len", 8}, {"vocab_size", 50}}},
                         {"step", 3}};
  write_checkpoint(path, meta, std::span<const CheckpointSection>());
  nlohmann::json cfg = checkpoint_model_config(path);
  EXPECT_EQ(cfg["arch"], "gpt2");
  GPT2LM m(GPT2Config::from_json(cfg, path));
  check_model_config(meta, m, path);
  GPT2LM other(GPT2Config{2, 1, 8, 8, 50});
  expect_user_error([&] { check_model_config(meta, other, path); }, {path, "n_layer"});
  meta["format"] = "something-else";
  write_checkpoint(path, meta, std::span<const CheckpointSection>());
  expect_user_error([&] { checkpoint_model_config(path); }, {path, "not a fittrain checkpoint"});
  std::filesystem::remove(path);
}

// The chat task's loss units are the targets that count (response tokens and their
// end-of-text, padding and prompts excluded), row by row, so the trainer's mean over the
// global batch is per response token; its data are the packed rows with their positions.
TEST(ChatTask, LossUnitsAreTheResponseTargetsOfTheRows) {
  test::TempDir dir;
  std::string jsonl;
  for (int i = 0; i < 60; ++i)
    jsonl += "{\"prompt\": \"question " + std::to_string(i) + "?\", \"response\": \"" + std::string(i % 7 + 1, 'a') + "\"}\n";
  test::write_bytes(dir.file("p.jsonl"), jsonl);
  PreparePairsOptions o;
  o.inputs = {dir.file("p.jsonl")};
  o.out_dir = dir.file("data");
  o.seq_len = 32;
  prepare_pairs(o);
  RunConfig rc;
  rc.task = "chat";
  rc.data_path = o.out_dir;
  ChatTask task(rc, 32, 300, true);
  const SampleSource& train = task.train_data();
  ASSERT_NE(task.val_data(), nullptr);
  std::vector<std::string> names;
  for (const auto& f : train.fields()) names.push_back(f.name);
  EXPECT_EQ(names, (std::vector<std::string>{"tokens", "targets", "positions"}));
  std::vector<int32_t> tok(32), tgt(32), pos(32);
  void* dst[3] = {tok.data(), tgt.data(), pos.data()};
  std::vector<uint64_t> rows;
  double want = 0;
  for (uint64_t r = 0; r < train.num_samples(); r += 2) {
    train.read(r, dst);
    for (int t = 0; t < 32; ++t) want += tgt[t] >= 0 ? 1 : 0;
    rows.push_back(r);
  }
  ASSERT_GT(want, 0);
  EXPECT_EQ(task.loss_units(train, rows), want);
  // every response has 1-7 letters plus end-of-text: fewer units than positions with tokens
  EXPECT_LT(want, 32.0 * static_cast<double>(rows.size()) / 2);
  EXPECT_EQ(task.name(), "chat");
}

}  // namespace
}  // namespace ft
