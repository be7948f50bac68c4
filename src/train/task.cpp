#include "train/task.h"

#include <algorithm>

#include "core/error.h"
#include "train/lm_task.h"
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
  std::unique_ptr<Task> task;
  if (rc.task == "lm") {
    const nlohmann::json c = model.config();
    FT_USER_CHECK(c.contains("seq_len") && c.contains("vocab_size"), "--task lm: model family ", model.family(),
                  " is not a language model (no seq_len / vocab_size)");
    task = std::make_unique<LanguageModelTask>(rc, c["seq_len"].get<int>(), c["vocab_size"].get<uint32_t>(),
                                               need_train);
  } else {
    throw UserError("--task: unknown task '" + rc.task + "' (this build knows: lm)");
  }
  if (need_train) check_fields(task->train_data(), model, "--task " + rc.task);
  if (task->val_data()) check_fields(*task->val_data(), model, "--task " + rc.task);
  return task;
}

double evaluate(ModelRuntime& rt, const Task& task, const SampleSource& data, int64_t eval_batch,
                int64_t max_batches) {
  const std::vector<FieldSpec> fields = data.fields();
  std::vector<std::vector<char>> bufs;
  for (const auto& f : fields) bufs.emplace_back(static_cast<size_t>(eval_batch) * f.sample_bytes());
  std::vector<void*> dst(fields.size());
  std::vector<uint64_t> idx(static_cast<size_t>(eval_batch));
  const uint64_t n = data.num_samples();
  double sum = 0, units = 0;
  int64_t batches = 0;
  for (uint64_t start = 0; start < n && (max_batches <= 0 || batches < max_batches); start += eval_batch, ++batches) {
    const int64_t b = static_cast<int64_t>(std::min<uint64_t>(eval_batch, n - start));
    Batch batch;
    batch.size = b;
    for (int64_t i = 0; i < b; ++i) {
      idx[i] = start + i;
      for (size_t f = 0; f < fields.size(); ++f) dst[f] = bufs[f].data() + static_cast<size_t>(i) * fields[f].sample_bytes();
      data.read(start + i, dst);
    }
    for (size_t f = 0; f < fields.size(); ++f) batch.fields.push_back(BatchField{fields[f], bufs[f].data()});
    sum += rt.eval_loss(batch);
    units += task.loss_units(data, std::span<const uint64_t>(idx.data(), static_cast<size_t>(b)));
  }
  return units > 0 ? sum / units : 0.0;
}

}  // namespace ft
