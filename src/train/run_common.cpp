#include "train/run_common.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <unordered_map>

#include "core/error.h"
#include "data/builtin_corpus.h"
#include "data/prepare.h"
#include "models/gpt2.h"

namespace ft {

DataFiles resolve_data(const RunConfig& rc) {
  DataFiles d;
  std::string spec = rc.data_path;
  if (spec.empty()) {
    // The built-in default: a generated English-like corpus, byte-tokenized. Regenerated
    // each time (deterministic, a second or so) so a stale or edited copy is never used.
    const std::string dir = rc.results_dir + "/data";
    std::filesystem::create_directories(dir);
    const std::string txt = dir + "/builtin_corpus.txt";
    {
      std::ofstream f(txt, std::ios::binary | std::ios::trunc);
      FT_USER_CHECK(f.good(), "--results-dir: cannot write ", txt);
      f << builtin_corpus();
    }
    prepare_text({txt}, dir, 0.1, 0);
    spec = dir;
    d.description = "built-in corpus (" + dir + ")";
  } else {
    d.description = spec;
  }
  d.train = resolve_split(spec, "train", rc.data_path.empty() ? "--results-dir" : "--data-path");
  if (!rc.val_data_path.empty()) d.val = resolve_data_files(rc.val_data_path, "--val-data-path");
  else d.val = resolve_split(spec, "val", "--data-path");
  return d;
}

double evaluate(GPT2& model, const TokenDataset& data, int64_t eval_batch, int64_t max_batches) {
  const int64_t T = data.seq_len();
  const uint64_t n = data.num_samples();
  std::vector<int32_t> tok(static_cast<size_t>(eval_batch * T)), tgt(tok.size());
  double sum = 0;
  uint64_t tokens = 0;
  int64_t batches = 0;
  for (uint64_t start = 0; start < n && (max_batches <= 0 || batches < max_batches); start += eval_batch, ++batches) {
    const int64_t b = static_cast<int64_t>(std::min<uint64_t>(eval_batch, n - start));
    for (int64_t i = 0; i < b; ++i) data.read_sample(start + i, tok.data() + i * T, tgt.data() + i * T);
    sum += model.eval_loss(tok.data(), tgt.data(), b);
    tokens += static_cast<uint64_t>(b * T);
  }
  return tokens ? sum / static_cast<double>(tokens) : 0.0;
}

double unigram_entropy(const TokenDataset& data, uint64_t max_tokens) {
  std::unordered_map<uint32_t, uint64_t> counts;
  uint64_t total = 0;
  for (size_t s = 0; s < data.num_shards() && total < max_tokens; ++s) {
    const auto& sh = data.shard(s);
    for (size_t i = 0; i < sh.size() && total < max_tokens; ++i, ++total) counts[sh.token(i)]++;
  }
  double h = 0;
  for (auto& [tok, c] : counts) {
    double p = static_cast<double>(c) / static_cast<double>(total);
    h -= p * std::log(p);
  }
  return h;
}

}  // namespace ft
