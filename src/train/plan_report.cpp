// The `fittrain plan` output: the fitted plan as a table for people and as JSON for tools.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "core/batch.h"
#include "plan/fit.h"
#include "train/session.h"

namespace ft {

namespace {

struct Breakdown {
  size_t params, master, grads, optimizer, workspace, activations, total;
  size_t saved_sum, transient_sum, inputs_sum, kv_cache_sum;
};

Breakdown breakdown(const MemoryPlan& p) {
  Breakdown b{};
  b.params = p.class_bytes(BufferClass::params);
  b.master = p.class_bytes(BufferClass::master);
  b.grads = p.class_bytes(BufferClass::grads);
  b.optimizer = p.class_bytes(BufferClass::optimizer);
  b.workspace = p.class_bytes(BufferClass::workspace);
  b.total = p.total_bytes;
  // Everything above the persistent prefix that is not workspace: saved activations,
  // transients (sharing bytes by lifetime) and inputs. Defined so the categories add up to
  // the total exactly.
  b.activations = b.total - p.persistent_bytes - b.workspace;
  b.saved_sum = p.class_bytes(BufferClass::activations);
  b.transient_sum = p.class_bytes(BufferClass::transient);
  b.inputs_sum = p.class_bytes(BufferClass::inputs);
  b.kv_cache_sum = p.class_bytes(BufferClass::kv_cache);
  return b;
}

}  // namespace

// Cost of one more sample in the micro-batch at the chosen point (training, or evaluation
// for evaluation-only sessions).
size_t Session::marginal_sample_bytes() const {
  const FitResult& f = *fit_;
  PlanShape next = f.shape;
  (training_ ? next.micro_batch : next.eval_batch) += 1;
  return runtime_plan(*model_, *backend_, next).total_bytes - f.plan.total_bytes;
}

std::string Session::plan_table() const {
  const FitResult& f = *fit_;
  const Breakdown b = breakdown(f.plan);
  const size_t per_sample = marginal_sample_bytes();
  std::ostringstream os;
  char line[256];
  auto row = [&](const char* what, size_t bytes, const char* note = "") {
    std::snprintf(line, sizeof line, "  %-36s %12s %14zu  %s\n", what, format_bytes(bytes).c_str(), bytes, note);
    os << line;
  };
  os << "model      " << model_->describe() << ", " << model_->num_params() << " parameters\n";
  os << "device     " << backend_->describe() << ", precision " << precision_name(precision_) << "\n";
  os << "budget     " << format_bytes(f.budget) << " (" << (f.budget_source.empty() ? budget_.source : f.budget_source)
     << ")\n";
  os << "device memory plan (one arena, offsets by buffer lifetime):\n";
  row("params", b.params);
  if (b.master) row("master weights (fp32)", b.master);
  if (training_) {
    row("grads", b.grads);
    row(f.shape.ema ? "optimizer (Adam m, v; EMA of weights)" : "optimizer (Adam m, v)", b.optimizer);
  }
  row("activations", b.activations, "peak of saved + transient + inputs, shared by lifetime");
  std::snprintf(line, sizeof line, "      saved %s, transient %s (before sharing), inputs %s\n",
                format_bytes(b.saved_sum).c_str(), format_bytes(b.transient_sum).c_str(),
                format_bytes(b.inputs_sum).c_str());
  os << line;
  if (b.kv_cache_sum) {
    // generation's cache lives in the evaluation phases, on the training activations' bytes
    std::snprintf(line, sizeof line, "      generation KV cache %s (evaluation batch x context, every layer)\n",
                  format_bytes(b.kv_cache_sum).c_str());
    os << line;
  }
  row("workspace", b.workspace);
  row("total (arena)", b.total);
  if (budget_.runtime_bytes) {
    row("runtime (CUDA context, libraries)", budget_.measured_runtime_bytes(), "measured at start, outside the arena");
    if (budget_.comm_estimate_bytes)
      row("NCCL buffers (estimated)", budget_.comm_estimate_bytes,
          "planning ranks in one process: a run on them measures these");
    row("process total", b.total + budget_.runtime_bytes);
  }
  row("per extra sample", per_sample);
  os << "host memory plan (" << format_bytes(budget_.host_bytes) << " budget, " << budget_.host_source << "):\n";
  if (host_plan_.runtime_bytes) row("runtime (held when planned)", host_plan_.runtime_bytes, "measured: libraries, CUDA's and NCCL's host side");
  for (const HostItem& i : host_plan_.items)
    row(i.name.c_str(), i.bytes, i.one_at_a_time ? "one staging buffer at a time: the largest counts" : "");
  row("host total", host_plan_.total());
  if (training_) {
    const bool ragged = rc_.global_batch_size % f.shape.world_size != 0;  // shares one sample apart
    std::snprintf(line, sizeof line,
                  "chosen     global batch %lld = micro-batch %lld x %lld accumulation x %d rank(s)%s\n",
                  static_cast<long long>(rc_.global_batch_size), static_cast<long long>(f.shape.micro_batch),
                  static_cast<long long>(f.grad_accum), f.shape.world_size,
                  ragged                                       ? " (the largest share; the shares below)"
                  : f.last_micro_batch != f.shape.micro_batch ? " (last micro-batch smaller)"
                                                              : "");
    os << line;
    if (f.last_micro_batch != f.shape.micro_batch)
      os << "           last micro-batch of each step: " << f.last_micro_batch << "\n";
    if (ragged) {
      os << "           ranks' shares: "
         << rank_shares_text(static_cast<uint64_t>(rc_.global_batch_size), f.shape.world_size)
         << " samples (the smaller ones' micro-batches:";
      const std::vector<int64_t> smaller = micro_batch_sizes(f, f.per_rank_batch - 1);
      for (int64_t n : smaller) os << " " << n;
      os << (smaller.front() == 0 ? "; the empty one is skipped)\n" : ")\n");
    }
    os << "           largest micro-batch that fits: " << f.max_fitting_micro_batch
       << ", recompute " << recompute_name(f.shape.recompute) << ", ZeRO stage " << f.shape.zero_stage
       << (model_->has_item_cache() ? (f.shape.item_cache ? ", item table on" : ", item table off") : "")
       << (model_->max_keep_level() > 0
               ? ", kept intermediates in " + std::to_string(model_->kept_blocks(f.shape.keep_level)) + " of " +
                     std::to_string(model_->kept_blocks(model_->max_keep_level())) + " blocks (level " +
                     std::to_string(f.shape.keep_level) + " of " + std::to_string(model_->max_keep_level()) + ")"
               : "")
       << "\n";
    if (f.micro_batch_without_recompute > 0) {
      std::snprintf(line, sizeof line,
                    "           recompute for speed: without it micro-batch %lld at most; predicted %.0f%% of its "
                    "time per sample\n",
                    static_cast<long long>(f.micro_batch_without_recompute), 100 * f.predicted_time_ratio);
      os << line;
    }
  }
  os << "           evaluation micro-batch " << f.shape.eval_batch << " (same arena)\n";
  return os.str();
}

std::string Session::plan_json() const {
  const FitResult& f = *fit_;
  const Breakdown b = breakdown(f.plan);
  const size_t per_sample = marginal_sample_bytes();
  nlohmann::json j;
  j["model"] = model_->config();
  j["model"]["num_params"] = model_->num_params();
  j["device"] = device_name(backend_->device());
  j["precision"] = precision_name(precision_);
  j["micro_batch_size"] = f.shape.micro_batch;
  j["grad_accum_steps"] = f.grad_accum;
  j["last_micro_batch_size"] = f.last_micro_batch;
  j["max_fitting_micro_batch"] = f.max_fitting_micro_batch;
  j["eval_batch_size"] = f.shape.eval_batch;
  j["world_size"] = f.shape.world_size;
  // Each rank's share of the global batch (the last ones one fewer when it does not divide).
  if (training_) {
    std::vector<int64_t> shares;
    for (int r = 0; r < f.shape.world_size; ++r)
      shares.push_back(static_cast<int64_t>(rank_share(static_cast<uint64_t>(rc_.global_batch_size), f.shape.world_size, r)));
    j["rank_batch_sizes"] = shares;
  }
  j["global_batch_size"] = training_ ? rc_.global_batch_size : 0;
  j["recompute"] = recompute_name(f.shape.recompute);
  if (f.micro_batch_without_recompute > 0) {  // recompute taken for speed (plan/fit.h, SpeedModel)
    j["micro_batch_without_recompute"] = f.micro_batch_without_recompute;
    j["predicted_time_ratio"] = f.predicted_time_ratio;
  }
  j["zero_stage"] = f.shape.zero_stage;
  j["ema"] = f.shape.ema;
  if (model_->has_item_cache()) j["item_cache"] = f.shape.item_cache;
  if (model_->max_keep_level() > 0) {
    j["keep_level"] = f.shape.keep_level;
    j["kept_blocks"] = model_->kept_blocks(f.shape.keep_level);
  }
  j["budget_bytes"] = f.budget;
  j["budget_source"] = budget_.source;
  j["bytes_per_sample"] = per_sample;
  j["bytes"] = {{"params", b.params},   {"master", b.master},       {"grads", b.grads},
                {"optimizer", b.optimizer}, {"activations", b.activations}, {"workspace", b.workspace},
                {"kv_cache", b.kv_cache_sum}, {"total", b.total}, {"runtime", budget_.runtime_bytes},
                {"runtime_comm_estimate", budget_.comm_estimate_bytes}, {"process_total", b.total + budget_.runtime_bytes}};
  nlohmann::json host = nlohmann::json::object(), one_at_a_time = nlohmann::json::array();
  for (const HostItem& i : host_plan_.items) {
    host[i.name] = i.bytes;
    if (i.one_at_a_time) one_at_a_time.push_back(i.name);
  }
  j["host_bytes"] = {{"items", host},   {"one_at_a_time", one_at_a_time}, {"runtime", host_plan_.runtime_bytes},
                     {"total", host_plan_.total()}, {"budget", budget_.host_bytes}, {"local_ranks", budget_.local_ranks}};
  return j.dump();
}

}  // namespace ft
