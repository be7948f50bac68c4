#include "train/lm_task.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <unordered_map>

#include "core/error.h"
#include "core/rng.h"
#include "data/builtin_corpus.h"
#include "data/prepare.h"
#include "data/tokenizer.h"
#include "train/runtime.h"

namespace ft {

namespace {

// Prints what decoding `generated` adds to `printed`. The byte tokenizer decodes token by
// token, so this prints exactly what it always did; for subwords the decoded text of all
// tokens can change its end (U+FFFD while a character's bytes are incomplete), so the tail
// waits until it is final (or `last`).
void print_new_text(const Tokenizer& tok, std::span<const uint32_t> generated, std::string& printed, bool last) {
  if (tok.kind() == "byte") {
    if (last || generated.empty()) return;
    std::printf("%s", tok.decode(generated.subspan(generated.size() - 1)).c_str());
    std::fflush(stdout);
    return;
  }
  const std::string text = tok.decode(generated);
  static constexpr std::string_view kReplacement = "\xef\xbf\xbd";
  if (!last && text.size() >= kReplacement.size() && text.ends_with(kReplacement)) return;
  size_t same = 0;  // what is on the screen already
  while (same < printed.size() && same < text.size() && printed[same] == text[same]) ++same;
  if (same < printed.size() && !last) return;  // the text changed behind us: wait for it to settle
  if (text.size() > same) std::printf("%s", text.c_str() + same);
  std::fflush(stdout);
  printed = text;
}

}  // namespace


DataFiles resolve_data(const RunConfig& rc) {
  DataFiles d;
  std::string spec = rc.data_path;
  if (spec.empty()) {
    // The built-in default: a generated English-like corpus, byte-tokenized. Regenerated
    // each time (deterministic, a second or so) so a stale or edited copy is never used.
    const std::string dir = rc.results_dir + "/data";
    const std::string txt = dir + "/builtin_corpus.txt";
    if (!rc.results_read_only) {
      std::filesystem::create_directories(dir);
      std::ofstream f(txt, std::ios::binary | std::ios::trunc);
      FT_USER_CHECK(f.good(), "--results-dir: cannot write ", txt);
      f << builtin_corpus();
      f.close();
      prepare_text({txt}, dir, 0.1, 0);
    }
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


std::optional<TokenizerRecord> data_tokenizer(const std::vector<std::string>& files, const std::string& flag) {
  std::optional<TokenizerRecord> found;
  std::string found_dir;
  bool first = true;
  std::vector<std::string> seen;
  for (const auto& f : files) {
    const std::string dir = std::filesystem::path(f).parent_path().string();
    if (std::find(seen.begin(), seen.end(), dir) != seen.end()) continue;
    seen.push_back(dir);
    std::optional<TokenizerRecord> r = read_tokenizer_record(dir.empty() ? "." : dir);
    auto name = [](const std::optional<TokenizerRecord>& t) {
      return t ? t->kind + " " + t->identity + " (" + std::to_string(t->vocab_size) + " tokens)"
               : std::string("the byte tokenizer (no ") + kTokenizerRecordFile + ")";
    };
    if (first) {
      found = r, found_dir = dir, first = false;
    } else {
      // Shards of two tokenizers in one run would train on two meanings of each id.
      FT_USER_CHECK(r.has_value() == found.has_value() && (!r || r->identity == found->identity), flag,
                    ": the data mixes tokenizers: ", found_dir, " holds shards of ", name(found), ", ", dir,
                    " shards of ", name(r));
    }
  }
  return found;
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

LanguageModelTask::LanguageModelTask(const RunConfig& rc, int seq_len, uint32_t vocab_size, bool need_train)
    : seq_len_(seq_len) {
  DataFiles files = resolve_data(rc);
  description_ = files.description;
  const std::string flag = rc.data_path.empty() ? "--results-dir" : "--data-path";
  has_val_split_ = !files.val.empty();
  std::vector<std::string> all = files.train;
  all.insert(all.end(), files.val.begin(), files.val.end());
  tokenizer_ = data_tokenizer(all, flag);
  FT_USER_CHECK(!tokenizer_ || vocab_size >= tokenizer_->vocab_size, flag, " ", files.description,
                ": the shards were made by tokenizer ",
                tokenizer_ ? tokenizer_->identity : "", " with ", tokenizer_ ? tokenizer_->vocab_size : 0,
                " tokens, but the model's vocabulary is ", vocab_size, ": pass --vocab-size ",
                tokenizer_ ? tokenizer_->vocab_size : 0, " (or more)");
  if (need_train) {
    train_ = std::make_unique<TokenDataset>(files.train, seq_len, vocab_size, flag);
    if (!files.val.empty())
      val_ = std::make_unique<TokenDataset>(files.val, seq_len, vocab_size,
                                            rc.val_data_path.empty() ? "--data-path" : "--val-data-path");
  } else {
    // Evaluation only: the validation split when there is one, else the data itself.
    val_ = std::make_unique<TokenDataset>(files.val.empty() ? files.train : files.val, seq_len, vocab_size,
                                          files.val.empty() || rc.val_data_path.empty() ? flag : "--val-data-path");
  }
}

std::string LanguageModelTask::describe_data() const { return description_; }

double LanguageModelTask::loss_units(const SampleSource&, std::span<const uint64_t> samples) const {
  // Every window has a target at each of its T positions.
  return static_cast<double>(samples.size()) * static_cast<double>(seq_len_);
}

std::vector<Metric> LanguageModelTask::metrics(double mean_loss) const {
  return {Metric{"perplexity", std::exp(mean_loss)}};
}

std::string LanguageModelTask::data_summary() const {
  if (!val_) return "";
  char line[128];
  std::snprintf(line, sizeof line, "val        unigram entropy %.4f nats/token\n", unigram_entropy(*val_, 10'000'000));
  return line;
}

int LanguageModelTask::sample(ModelRuntime& rt, const RunConfig& rc) const {
  const std::unique_ptr<Tokenizer> tok =
      load_tokenizer(tokenizer_ ? tokenizer_->model_path : std::string(), "--data-path");
  return sample_language_model(rt, rc, *tok);
}

int sample_language_model(ModelRuntime& rt, const RunConfig& rc, const Tokenizer& tok) {
  Generator* gen = rt.model().generator();
  FT_USER_CHECK(gen, "sample: model family ", rt.model().family(), " does not generate tokens");
  if (tok.kind() == "byte") {
    FT_USER_CHECK(gen->vocab_size() == static_cast<int64_t>(ByteTokenizer::kVocabSize), "sample: vocabulary of ",
                  gen->vocab_size(), " tokens but the checkpoint records no tokenizer, so `sample` decodes ",
                  "with the byte-level tokenizer (257): pass --tokenizer DIR_OR_MODEL");
  } else {
    FT_USER_CHECK(gen->vocab_size() >= static_cast<int64_t>(tok.vocab_size()), "sample: the model's vocabulary of ",
                  gen->vocab_size(), " tokens is smaller than tokenizer ", tok.identity(), "'s ", tok.vocab_size());
  }
  const int64_t ctx_len = gen->context_length();
  std::vector<uint32_t> ids = tok.encode(rc.prompt);
  if (ids.empty()) ids.push_back(tok.end_of_text());
  const size_t prompt_len = ids.size();
  // Text is printed as it is decoded from all generated tokens so far: a subword's leading
  // space and a character split over byte-fallback tokens only exist in context. Output is
  // held back while it ends in an incomplete character (U+FFFD).
  std::string printed;
  std::vector<int32_t> ctx;
  std::vector<float> logits(static_cast<size_t>(gen->vocab_size()));
  std::vector<std::pair<float, int>> order;
  Rng rng(rc.global_seed ^ 0x5a5a5a5aull);
  std::printf("%s", rc.prompt.c_str());
  for (int64_t n = 0; n < rc.max_new_tokens; ++n) {
    // The context window is the model's sequence length: keep the most recent tokens.
    const size_t start = ids.size() > static_cast<size_t>(ctx_len) ? ids.size() - ctx_len : 0;
    ctx.assign(ids.begin() + static_cast<long>(start), ids.end());
    gen->next_token_logits(ctx.data(), static_cast<int64_t>(ctx.size()), logits.data());
    int next = 0;
    if (rc.temperature == 0) {
      next = static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    } else {
      order.clear();
      for (size_t i = 0; i < logits.size(); ++i)
        order.emplace_back(logits[i] / static_cast<float>(rc.temperature), static_cast<int>(i));
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
    print_new_text(tok, std::span<const uint32_t>(ids).subspan(prompt_len), printed, false);
  }
  print_new_text(tok, std::span<const uint32_t>(ids).subspan(prompt_len), printed, true);
  std::printf("\n");
  return 0;
}

}  // namespace ft
