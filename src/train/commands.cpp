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
#include "train/model_io.h"
#include "train/run_common.h"
#include "train/session.h"
#include "train/trainer.h"

namespace ft {

int run_plan(const RunConfig& rc) {
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

// Evaluation-only sessions take the model shape from the checkpoint, so `test` and
// `sample` need no model flags.
static RunConfig with_checkpoint_model(RunConfig rc, const std::string& path) {
  CheckpointReader r(path);
  FT_USER_CHECK(r.meta().contains("model"), path, ": checkpoint has no model configuration");
  const auto& m = r.meta()["model"];
  auto get = [&](const char* key) {
    FT_USER_CHECK(m.contains(key) && m[key].is_number_integer(), path, ": checkpoint model lacks '", key, "'");
    return m[key].get<int>();
  };
  rc.model = "tiny";
  rc.n_layer = get("n_layer");
  rc.n_head = get("n_head");
  rc.n_embd = get("n_embd");
  rc.seq_len = get("seq_len");
  rc.vocab_size = get("vocab_size");
  return rc;
}

int run_test(const RunConfig& rc0) {
  const std::string path = find_checkpoint(rc0.checkpoint, rc0.results_dir, true);
  RunConfig rc = with_checkpoint_model(rc0, path);
  Session s(rc, false);
  const GPT2Config& mc = s.model_config();
  DataFiles files = resolve_data(rc);
  // Test on the validation split when there is one, else on the given data.
  const auto& use = files.val.empty() ? files.train : files.val;
  TokenDataset data(use, mc.seq_len, static_cast<uint32_t>(mc.vocab_size),
                    rc.data_path.empty() ? "--results-dir" : "--data-path");
  s.fit();
  s.allocate();
  TrainState st = load_checkpoint(s, path, false);
  const double loss = evaluate(s.model(), data, s.fit().shape.eval_batch, rc.eval_batches);
  std::printf("test       %s (step %lld) on %s: loss %.4f | perplexity %.3f | %llu samples%s\n", path.c_str(),
              static_cast<long long>(st.step), files.val.empty() ? "data" : "validation split", loss,
              std::exp(loss), static_cast<unsigned long long>(data.num_samples()),
              rc.eval_batches > 0 ? (" (first " + std::to_string(rc.eval_batches) + " batches)").c_str() : "");
  return 0;
}

int run_sample(const RunConfig& rc0) {
  const std::string path = find_checkpoint(rc0.checkpoint, rc0.results_dir, true);
  RunConfig rc = with_checkpoint_model(rc0, path);
  FT_USER_CHECK(rc.max_new_tokens >= 0, "--max-new-tokens must be >= 0");
  FT_USER_CHECK(rc.temperature >= 0, "--temperature must be >= 0 (0: greedy)");
  FT_USER_CHECK(rc.top_k >= 0, "--top-k must be >= 0 (0: no limit)");
  rc.eval_batch_size = "1";
  Session s(rc, false);
  const GPT2Config& mc = s.model_config();
  FT_USER_CHECK(mc.vocab_size == static_cast<int>(ByteTokenizer::kVocabSize), path, ": vocabulary of ",
                mc.vocab_size, " tokens; `sample` currently decodes the byte-level tokenizer (257) only");
  s.fit();
  s.allocate();
  load_checkpoint(s, path, false);
  ByteTokenizer tok;
  std::vector<uint32_t> ids = tok.encode(rc.prompt);
  if (ids.empty()) ids.push_back(ByteTokenizer::kEndOfText);
  std::vector<int32_t> ctx;
  std::vector<float> logits(static_cast<size_t>(mc.vocab_size));
  std::vector<std::pair<float, int>> order;
  Rng rng(rc.global_seed ^ 0x5a5a5a5aull);
  std::printf("%s", rc.prompt.c_str());
  for (int64_t n = 0; n < rc.max_new_tokens; ++n) {
    // The context window is the model's sequence length: keep the most recent tokens.
    const size_t start = ids.size() > static_cast<size_t>(mc.seq_len) ? ids.size() - mc.seq_len : 0;
    ctx.assign(ids.begin() + static_cast<long>(start), ids.end());
    s.model().next_token_logits(ctx.data(), static_cast<int64_t>(ctx.size()), logits.data());
    int next = 0;
    if (rc.temperature == 0) {
      next = static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    } else {
      order.clear();
      for (int i = 0; i < mc.vocab_size; ++i) order.emplace_back(logits[i] / static_cast<float>(rc.temperature), i);
      std::sort(order.begin(), order.end(), [](auto& a, auto& b) { return a.first > b.first; });
      if (rc.top_k > 0 && static_cast<size_t>(rc.top_k) < order.size()) order.resize(static_cast<size_t>(rc.top_k));
      double z = 0;
      for (auto& [l, i] : order) z += std::exp(static_cast<double>(l - order[0].first));
      double u = rng.uniform() * z, acc = 0;
      next = order.back().second;
      for (auto& [l, i] : order) {
        acc += std::exp(static_cast<double>(l - order[0].first));
        if (u < acc) {
          next = i;
          break;
        }
      }
    }
    ids.push_back(static_cast<uint32_t>(next));
    const uint32_t one = static_cast<uint32_t>(next);
    std::printf("%s", tok.decode(std::span<const uint32_t>(&one, 1)).c_str());
    std::fflush(stdout);
  }
  std::printf("\n");
  return 0;
}

}  // namespace ft
