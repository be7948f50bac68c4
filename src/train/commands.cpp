// The commands besides training: plan, test, sample, prepare.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "core/error.h"
#include "core/rng.h"
#include "data/prepare.h"
#include "data/tokenizer.h"
#include "train/checkpoint.h"
#include "train/lm_task.h"
#include "train/model_io.h"
#include "train/run_checks.h"
#include "train/session.h"
#include "train/task.h"
#include "train/trainer.h"

namespace ft {

int run_plan(const RunConfig& rc) {
  check_run_config(rc);
  Session s(rc, true);
  s.fit();
  if (rc.json) std::printf("%s\n", s.plan_json().c_str());
  else std::printf("%s", s.plan_table().c_str());
  return 0;
}

int run_prepare(const RunConfig& rc) {
  FT_USER_CHECK(!rc.inputs.empty(), "--input: give at least one text file");
  FT_USER_CHECK(!rc.out_dir.empty(), "--out: give the folder for the shards");
  FT_USER_CHECK(rc.val_fraction >= 0 && rc.val_fraction < 1, "--val-fraction must be in [0, 1), got ",
                rc.val_fraction);
  PrepareReport r = prepare_text(rc.inputs, rc.out_dir, rc.val_fraction, rc.global_seed);
  std::printf("prepared %llu documents: %llu train tokens in %zu shard(s), %llu val tokens in %zu shard(s) under %s\n",
              static_cast<unsigned long long>(r.documents), static_cast<unsigned long long>(r.train_tokens),
              r.train_files.size(), static_cast<unsigned long long>(r.val_tokens), r.val_files.size(),
              rc.out_dir.c_str());
  return 0;
}

// Evaluation-only sessions take the model from the checkpoint, so `test` and `sample` need
// no model flags.
int run_test(const RunConfig& rc) {
  check_run_config(rc);
  const std::string path = find_checkpoint(rc.checkpoint, rc.results_dir, true);
  const nlohmann::json model_cfg = checkpoint_model_config(path);
  Session s(rc, false, &model_cfg);
  std::unique_ptr<Task> task = make_task(rc, s.model(), false);
  s.fit();
  s.allocate();
  TrainState st = load_checkpoint(s, path, false);
  const SampleSource& data = *task->val_data();
  const double loss = evaluate(s.runtime(), *task, data, s.fit().shape.eval_batch, rc.eval_batches);
  std::string extra;
  for (const Metric& m : task->metrics(loss)) {
    char buf[96];
    std::snprintf(buf, sizeof buf, " | %s %.3f", m.name.c_str(), m.value);
    extra += buf;
  }
  const auto* lm = dynamic_cast<const LanguageModelTask*>(task.get());
  std::printf("test       %s (step %lld) on %s: loss %.4f%s | %llu samples%s\n", path.c_str(),
              static_cast<long long>(st.step), lm && !lm->eval_on_validation_split() ? "data" : "validation split",
              loss, extra.c_str(), static_cast<unsigned long long>(data.num_samples()),
              rc.eval_batches > 0 ? (" (first " + std::to_string(rc.eval_batches) + " batches)").c_str() : "");
  return 0;
}

int run_sample(const RunConfig& rc0) {
  check_run_config(rc0);
  const std::string path = find_checkpoint(rc0.checkpoint, rc0.results_dir, true);
  RunConfig rc = rc0;
  rc.eval_batch_size = "1";
  const nlohmann::json model_cfg = checkpoint_model_config(path);
  Session s(rc, false, &model_cfg);
  s.fit();
  s.allocate();
  load_checkpoint(s, path, false);
  // Sampling needs no data: the task is only asked what to generate.
  FT_USER_CHECK(rc.task == "lm", "--task ", rc.task, ": `sample` is defined for task lm");
  FT_USER_CHECK(s.model().generator(), path, ": model family ", s.model().family(), " does not generate tokens");
  return sample_language_model(s.runtime(), rc);
}

}  // namespace ft
