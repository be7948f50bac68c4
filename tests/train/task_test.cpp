// Tasks: the language-model task's samples and loss units, the checks between a task's data
// and the model's inputs, and checkpoints written before models were generic.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "data/test_util.h"
#include "models/gpt2_lm.h"
#include "train/checkpoint.h"
#include "train/lm_task.h"
#include "train/model_io.h"
#include "train/task.h"

namespace ft {
namespace {

using ft::test::expect_user_error;

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

}  // namespace
}  // namespace ft
