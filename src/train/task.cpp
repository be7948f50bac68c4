#include "train/task.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <utility>
#include <vector>

#include "core/error.h"
#include "data/data_identity.h"
#include "dist/communicator.h"
#include "train/batch_loader.h"
#include "train/chat_task.h"
#include "train/diffusion_task.h"
#include "train/lm_task.h"
#include "train/rec_task.h"
#include "train/run_checks.h"
#include "train/runtime.h"

namespace ft {

void check_fields(const SampleSource& src, const Model& model, const std::string& what) {
  const std::vector<FieldSpec> have = src.fields();
  for (const FieldSpec& need : model.input_fields()) {
    auto it = std::find_if(have.begin(), have.end(), [&](const FieldSpec& f) { return f.name == need.name; });
    FT_USER_CHECK(it != have.end(), what, ": the data has no field '", need.name, "' that model family ",
                  model.family(), " reads");
    FT_USER_CHECK(it->dtype == need.dtype && it->per_sample == need.per_sample, what, ": field '", need.name,
                  "' is ", dtype_name(it->dtype), " x ", it->per_sample, " but the model reads ",
                  dtype_name(need.dtype), " x ", need.per_sample);
  }
}

std::unique_ptr<Task> make_task(const RunConfig& rc, const Model& model, bool need_train) {
  check_task_flags(rc);  // none of another task's flags ignored
  std::unique_ptr<Task> task;
  if (rc.task == "lm" || rc.task == "chat") {
    const nlohmann::json c = model.config();
    FT_USER_CHECK(c.contains("seq_len") && c.contains("vocab_size"), "--task ", rc.task, ": model family ",
                  model.family(), " is not a language model (no seq_len / vocab_size)");
    const int T = c["seq_len"].get<int>();
    const uint32_t V = c["vocab_size"].get<uint32_t>();
    if (rc.task == "lm") task = std::make_unique<LanguageModelTask>(rc, T, V, need_train);
    else task = std::make_unique<ChatTask>(rc, T, V, need_train);
  } else if (rc.task == "rec") {
    const nlohmann::json c = model.config();
    FT_USER_CHECK(c.contains("items") && c.contains("seq_len"), "--task rec: model family ", model.family(),
                  " is not a recommender (use --model gpt2rec or sasrec)");
    const int K = c.value("loss", "bpr") == "bpr" ? c["negatives"].get<int>() : 0;
    task = std::make_unique<RecTask>(rc, c["seq_len"].get<int>(), K, c["items"].get<int>(), need_train);
  } else if (rc.task == "diffusion") {
    const nlohmann::json c = model.config();
    FT_USER_CHECK(c.value("arch", "") == "dit" || c.value("arch", "") == "cdeit", "--task diffusion: model family ",
                  model.family(), " is not a diffusion model (use --model dit-tiny, dit-s, dit-b, dit-l, cdeit or cdeit-tiny)");
    task = std::make_unique<DiffusionTask>(rc, c, need_train);
  } else {
    throw UserError("--task: unknown task '" + rc.task + "' (this build knows: lm, chat, rec, diffusion)");
  }
  if (need_train) check_fields(task->train_data(), model, "--task " + rc.task);
  if (task->val_data()) check_fields(*task->val_data(), model, "--task " + rc.task);
  return task;
}

namespace testing {
bool fail_next_eval_batch = false;
}

void EvalShard::say_failed() const {
  std::fprintf(stderr, "rank %d: re-plan    out of device memory in its part of the evaluation (%s)\n", rank,
               failed.c_str());
}

void EvalShard::sum(std::span<double> values) const {
  if (!comm || world <= 1) return;
  std::vector<double> all(values.begin(), values.end());
  all.push_back(failed.empty() ? 0.0 : 1.0);  // ranks whose part ran out of memory
  comm->all_reduce_sum(all);
  if (all.back() > 0) {
    throw RanksOutOfMemoryError(
        failed.empty() ? detail::concat(static_cast<long long>(all.back()), " other rank(s) ran out of memory in the evaluation")
                       : failed);
  }
  std::copy(all.begin(), all.end() - 1, values.begin());
}

double EvalShard::max(double value) const {
  if (!comm || world <= 1) return value;
  return -static_cast<double>(comm->all_reduce_min(-std::llround(value * 1e6))) * 1e-6;
}

EvalShard eval_shard(ModelRuntime& rt) {
  Communicator& c = rt.comm();
  return EvalShard{c.rank(), c.world_size(), &c, {}};
}

uint64_t eval_samples(const RunConfig& rc) {
  return rc.eval_batches > 0 ? static_cast<uint64_t>(rc.eval_batches) * static_cast<uint64_t>(rc.global_batch_size) : 0;
}

double evaluate(ModelRuntime& rt, const Task& task, const SampleSource& data, int64_t eval_batch,
                uint64_t max_samples) {
  const EvalShard shard = eval_shard(rt);
  BatchLoader loader(data, eval_batch, /*background=*/false);
  std::vector<uint64_t> idx(static_cast<size_t>(eval_batch));
  const uint64_t n = max_samples > 0 ? std::min<uint64_t>(data.num_samples(), max_samples) : data.num_samples();
  double sums[2] = {0, 0};  // loss, units
  shard.part([&] {
    uint64_t batch = 0;
    for (uint64_t start = 0; start < n; start += eval_batch, ++batch) {
      if (!shard.mine(batch)) continue;
      const size_t b = static_cast<size_t>(std::min<uint64_t>(eval_batch, n - start));
      std::iota(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(b), start);
      const std::span<const uint64_t> samples(idx.data(), b);
      loader.request(samples);
      if (std::exchange(testing::fail_next_eval_batch, false))
        throw OutOfMemoryError("injected by FT_TEST_EVAL_OOM_AT (test hook)");
      sums[0] += rt.eval_loss(loader.get());
      sums[1] += task.loss_units(data, samples);
    }
  });
  shard.sum(sums);
  return sums[1] > 0 ? sums[0] / sums[1] : std::numeric_limits<double>::quiet_NaN();
}

void check_loss_units(const Task& task, const SampleSource& data, uint64_t max_samples, const std::string& what,
                      bool training) {
  const uint64_t n = max_samples > 0 ? std::min<uint64_t>(data.num_samples(), max_samples) : data.num_samples();
  std::vector<uint64_t> idx;
  for (uint64_t start = 0; start < n; start += 4096) {
    idx.resize(static_cast<size_t>(std::min<uint64_t>(4096, n - start)));
    std::iota(idx.begin(), idx.end(), start);
    if (task.loss_units(data, idx) > 0) return;
  }
  const bool more = n < data.num_samples();
  // Training on it would skip every update and end "successfully" having learned nothing.
  FT_USER_CHECK(!training, what, ": none of the ", n, " training sample", n == 1 ? "" : "s", " holds a loss unit ",
                "(each row's response was cut by prepare's --seq-len), so there is nothing to learn; prepare the ",
                "data again with a longer --seq-len (or --loss-on all)");
  FT_USER_CHECK(false, what, ": the ", n, " sample", n == 1 ? "" : "s", " evaluated hold no loss unit (each row's ",
                "response was cut by prepare's --seq-len), so there is no loss to evaluate; ",
                more ? "pass a larger --eval-batches (0: all), or " : "", "prepare the data again with a longer --seq-len");
}

std::string data_identity_of(const Task& task, const RunConfig& rc, bool training) {
  const std::string train = rc.data_path.empty() ? "the built-in corpus in --results-dir " + rc.results_dir
                                                 : "--data-path " + rc.data_path;
  const SampleSource* val = task.val_data();
  if (!training) return val ? data_identity(*val, "the " + task.test_split() + " `test` evaluates, from " + train) : "";
  std::string out = data_identity(task.train_data(), train);
  if (val)
    out += data_identity(*val, rc.val_data_path.empty() ? train + " (its validation part)"
                                                        : "--val-data-path " + rc.val_data_path);
  return out;
}

std::string same_data_reason(bool training) {
  return std::string("every rank must read the same data (over several machines, the same files at that path on "
                     "each): ") +
         (training ? "the ranks draw every global batch from one order of its samples, and a rank reading another "
                     "copy trains on other samples, or repeats some and skips others"
                   : "the ranks split the evaluation by its batches, and a rank reading another copy evaluates other "
                     "samples");
}

std::string data_apart(const std::string& here, const std::string& rank0) {
  const std::string differs = first_data_difference(here, rank0);
  return differs.empty() ? differs : "reads other data than rank 0: " + differs;
}

}  // namespace ft
