#include "train/lm_task.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <unordered_map>

#include "core/error.h"
#include "core/rng.h"
#include "data/builtin_corpus.h"
#include "data/prepare.h"
#include "data/tokenizer.h"
#include "train/run_checks.h"
#include "train/runtime.h"

namespace ft {



DataFiles resolve_data(const RunConfig& rc) {
  DataFiles d;
  std::string spec = rc.data_path;
  if (spec.empty()) {
    // The built-in default: a generated English-like corpus, byte-tokenized. Prepared again
    // unless the folder holds it already (the very text, and shards), so a stale or edited
    // copy is never used, and a `test` beside a run on the folder does not rewrite it.
    const std::string dir = rc.results_dir + "/data";
    const std::string txt = dir + "/builtin_corpus.txt";
    if (!rc.results_read_only) {
      const std::string corpus = builtin_corpus();
      std::ifstream in(txt, std::ios::binary);  // none yet: read as empty, so prepared
      const std::string have((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      in.close();
      if (have != corpus || first_prepared_shard(dir).empty()) {
        std::filesystem::create_directories(dir);
        std::ofstream f(txt, std::ios::binary | std::ios::trunc);
        FT_USER_CHECK(f.good(), "--results-dir: cannot write ", txt);
        f << corpus;
        f.close();
        prepare_text({txt}, dir, 0.1, 0);
      }
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


std::optional<TokenizerRecord> data_tokenizer(const std::vector<std::string>& train, const std::string& train_flag,
                                              const std::vector<std::string>& val, const std::string& val_flag) {
  std::optional<TokenizerRecord> found;
  std::string found_dir;
  bool first = true;
  std::vector<std::string> seen;
  std::vector<std::string> files = train;
  files.insert(files.end(), val.begin(), val.end());
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string& f = files[i];
    const std::string& flag = i < train.size() ? train_flag : val_flag;  // where the odd one came from
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
  check_builtin_corpus_vocab(rc, vocab_size);  // the model's (a preset's, --init-from's)
  DataFiles files = resolve_data(rc);
  description_ = files.description;
  const std::string flag = rc.data_path.empty() ? "--results-dir" : "--data-path";
  test_split_ = token_test_split(!files.val.empty(), !rc.val_data_path.empty());
  tokenizer_ = data_tokenizer(files.train, flag, files.val, rc.val_data_path.empty() ? flag : "--val-data-path");
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

std::vector<std::string> sample_prompts(const RunConfig& rc) {
  std::vector<std::string> prompts = rc.prompts;
  if (!rc.prompts_file.empty()) {
    std::ifstream f(rc.prompts_file, std::ios::binary);
    FT_USER_CHECK(f.good(), "--prompts-file: cannot read ", rc.prompts_file);
    std::string line;
    while (std::getline(f, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (!line.empty()) prompts.push_back(line);
    }
    FT_USER_CHECK(!prompts.empty(), "--prompts-file ", rc.prompts_file, ": no prompt in it (one per line)");
  }
  if (prompts.empty()) prompts.push_back(rc.prompt);
  return prompts;
}

int sample_language_model(ModelRuntime& rt, const RunConfig& rc, const Tokenizer& tok) {
  Generator* gen = rt.model().generator();
  FT_USER_CHECK(gen, "sample: model family ", rt.model().family(), " does not generate tokens");
  if (tok.kind() == "byte") {
    // A checkpoint that records no tokenizer may come from shards tokenized elsewhere: bytes
    // are assumed only for the byte tokenizer's own vocabulary, or when --tokenizer byte says so.
    const int64_t V = gen->vocab_size(), bytes = static_cast<int64_t>(ByteTokenizer::kVocabSize);
    FT_USER_CHECK(V == bytes || (rc.tokenizer == "byte" && V > bytes), "sample: vocabulary of ", V,
                  " tokens but the checkpoint records no tokenizer, so `sample` would decode with the byte-level ",
                  "tokenizer (", bytes, " tokens): pass --tokenizer DIR_OR_MODEL",
                  V > bytes ? " (or --tokenizer byte if the model was trained on byte-level data)" : "");
  } else {
    FT_USER_CHECK(gen->vocab_size() >= static_cast<int64_t>(tok.vocab_size()), "sample: the model's vocabulary of ",
                  gen->vocab_size(), " tokens is smaller than tokenizer ", tok.identity(), "'s ", tok.vocab_size());
  }
  const int64_t ctx_len = gen->context_length();
  const std::vector<std::string> texts = sample_prompts(rc);
  const size_t n = texts.size();
  std::vector<std::vector<int32_t>> ids(n), generated(n);
  for (size_t i = 0; i < n; ++i) {
    for (uint32_t t : tok.encode(texts[i])) ids[i].push_back(static_cast<int32_t>(t));
    if (ids[i].empty()) ids[i].push_back(static_cast<int32_t>(tok.end_of_text()));
  }
  GenerateOptions opt;
  opt.temperature = rc.temperature;
  opt.top_k = static_cast<int>(rc.top_k);
  opt.top_p = rc.top_p;
  opt.seed = rc.global_seed ^ 0x5a5a5a5aull;
  opt.vocab_limit = std::min(gen->vocab_size(), static_cast<int64_t>(tok.vocab_size()));  // ids past it decode to nothing
  // A chat model's response ends with the end-of-text token it was trained to produce.
  const bool stop_at_end = rc.task == "chat";
  if (stop_at_end) opt.stop_token = static_cast<int32_t>(tok.end_of_text());
  std::vector<bool> ended(n, false);
  // The KV cache holds one context: a continuation longer than it goes on in rounds, each
  // from the last half context of its text so far (a prompt longer than the context keeps
  // its most recent tokens, as the model only ever saw that many).
  const int64_t keep = std::max<int64_t>(1, ctx_len / 2);
  for (int64_t round = 0;; ++round) {
    std::vector<std::vector<int32_t>> prompts;
    std::vector<size_t> rows;
    for (size_t i = 0; i < n; ++i) {
      if (ended[i] || static_cast<int64_t>(generated[i].size()) >= rc.max_new_tokens) continue;
      std::vector<int32_t> all = ids[i];
      all.insert(all.end(), generated[i].begin(), generated[i].end());
      const int64_t room = round == 0 ? ctx_len - 1 : keep;
      if (static_cast<int64_t>(all.size()) > room) all.erase(all.begin(), all.end() - room);
      prompts.push_back(std::move(all));
      rows.push_back(i);
    }
    if (prompts.empty()) break;
    opt.max_new_tokens = 0;
    for (size_t r : rows) opt.max_new_tokens = std::max<int64_t>(opt.max_new_tokens, rc.max_new_tokens - generated[r].size());
    opt.seed = splitmix64(opt.seed);  // each round draws afresh
    const std::vector<std::vector<int32_t>> more = gen->generate(prompts, opt);
    for (size_t j = 0; j < rows.size(); ++j) {
      std::vector<int32_t>& g = generated[rows[j]];
      const size_t want = static_cast<size_t>(rc.max_new_tokens) - g.size();
      g.insert(g.end(), more[j].begin(), more[j].begin() + std::min(want, more[j].size()));
      // fewer tokens than asked and room left in the context: the row produced the stop token
      if (stop_at_end && static_cast<int64_t>(more[j].size()) < opt.max_new_tokens &&
          static_cast<int64_t>(prompts[j].size() + more[j].size()) < ctx_len)
        ended[rows[j]] = true;
    }
  }
  // Whole continuations, decoded at once: a subword's leading space and a character split
  // over byte-fallback tokens only exist in context.
  for (size_t i = 0; i < n; ++i) {
    std::vector<uint32_t> u(generated[i].begin(), generated[i].end());
    if (n > 1) std::printf("%s[%zu] ", i ? "\n" : "", i + 1);
    std::printf("%s%s\n", texts[i].c_str(), tok.decode(u).c_str());
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace ft
