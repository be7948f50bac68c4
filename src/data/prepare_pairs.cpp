// prepare_pairs: streaming reader, parallel tokenizer and first-fit packer; see prepare_pairs.h.
#include "data/prepare_pairs.h"

#include <fcntl.h>
#include <omp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <future>
#include <memory>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/parquet.h"

namespace ft {
namespace fs = std::filesystem;

PairFormat pair_input_format(const std::string& path, const std::string& format) {
  if (format == "jsonl") return PairFormat::kJsonl;
  if (format == "text") return PairFormat::kText;
  if (format == "parquet") return PairFormat::kParquet;
  FT_USER_CHECK(format == "auto", "--input-format: '", format, "' is none of auto, jsonl, text, parquet");
  std::string ext = fs::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  if (ext == ".jsonl" || ext == ".json") return PairFormat::kJsonl;
  if (ext == ".parquet") return PairFormat::kParquet;
  if (ext == ".txt" || ext == ".tsv") return PairFormat::kText;
  throw UserError(detail::concat(path, ": cannot tell the input format from the extension '", ext,
                                 "' (.jsonl/.json, .parquet, .txt/.tsv): pass --input-format jsonl|text|parquet"));
}

bool implies_pairs(const std::string& path, const std::string& format) {
  if (format != "auto") return format == "jsonl" || format == "parquet";
  std::string ext = fs::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return ext == ".jsonl" || ext == ".json" || ext == ".parquet";
}

namespace {

// ---- reading lines in batches ----

// Lines of a file in batches; the views stay valid until the next call to next().
class LineReader {
 public:
  explicit LineReader(const std::string& path) : path_(path) {
    struct stat st {};
    FT_USER_CHECK(::stat(path.c_str(), &st) == 0, path, ": input file does not exist");
    FT_USER_CHECK(S_ISREG(st.st_mode), path, ": input is not a regular file");
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    FT_USER_CHECK(fd_ >= 0, path, ": cannot open input for reading: ", std::strerror(errno));
    buf_.resize(8 << 20);
  }
  ~LineReader() { ::close(fd_); }
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  bool next(size_t max, std::vector<std::string_view>& lines, std::vector<uint64_t>& numbers) {
    lines.clear();
    numbers.clear();
    std::memmove(buf_.data(), buf_.data() + pos_, end_ - pos_);  // the unfinished line to the front
    end_ -= pos_;
    pos_ = 0;
    for (;;) {
      fill();
      while (lines.size() < max) {
        const char* b = buf_.data() + pos_;
        const auto* nl = static_cast<const char*>(std::memchr(b, '\n', end_ - pos_));
        if (!nl) break;
        add(b, static_cast<size_t>(nl - b), lines, numbers);
        pos_ += static_cast<size_t>(nl - b) + 1;
      }
      if (lines.size() == max) return true;
      if (eof_) {
        if (pos_ < end_) add(buf_.data() + pos_, end_ - pos_, lines, numbers);
        pos_ = end_;
        return !lines.empty();
      }
      if (!lines.empty()) return true;
      buf_.resize(buf_.size() * 2);  // one line longer than the buffer
    }
  }

 private:
  void fill() {
    while (!eof_ && end_ < buf_.size()) {
      const ssize_t r = ::read(fd_, buf_.data() + end_, buf_.size() - end_);
      if (r < 0 && errno == EINTR) continue;
      FT_USER_CHECK(r >= 0, path_, ": error while reading: ", std::strerror(errno));
      if (r == 0) eof_ = true;
      end_ += static_cast<size_t>(r);
    }
  }
  void add(const char* b, size_t n, std::vector<std::string_view>& lines, std::vector<uint64_t>& numbers) {
    ++line_;
    if (n > 0 && b[n - 1] == '\r') --n;  // CRLF
    lines.emplace_back(b, n);
    numbers.push_back(line_);
  }

  std::string path_;
  int fd_ = -1;
  std::string buf_;
  size_t pos_ = 0, end_ = 0;
  bool eof_ = false;
  uint64_t line_ = 0;
};

// ---- parsing one record ----

// JSON Lines through nlohmann's SAX parser: strict JSON, no tree built, other fields skipped.
class PairSax {
 public:
  using json = nlohmann::json;
  PairSax(const std::string& pf, const std::string& rf, std::string& prompt, std::string& response)
      : pf_(pf), rf_(rf), prompt_(prompt), response_(response) {}
  std::string err;
  bool have_p = false, have_r = false;

  bool null() { return scalar("null"); }
  bool boolean(bool) { return scalar("a boolean"); }
  bool number_integer(json::number_integer_t) { return scalar("a number"); }
  bool number_unsigned(json::number_unsigned_t) { return scalar("a number"); }
  bool number_float(json::number_float_t, const std::string&) { return scalar("a number"); }
  bool binary(json::binary_t&) { return scalar("binary"); }
  bool string(std::string& s) {
    if (depth_ == 0) return fail("the line is a JSON string, not an object");
    if (depth_ == 1 && pending_ == 1) {
      prompt_.assign(s);
      have_p = true;
    } else if (depth_ == 1 && pending_ == 2) {
      response_.assign(s);
      have_r = true;
    }
    pending_ = 0;
    return true;
  }
  bool key(std::string& k) {
    if (depth_ == 1) pending_ = k == pf_ ? 1 : k == rf_ ? 2 : 0;
    return true;
  }
  bool start_object(size_t) { return open("an object"); }
  bool start_array(size_t) { return depth_ == 0 ? fail("the line is a JSON array, not an object (JSON Lines: one object per line)") : open("an array"); }
  bool end_object() { return --depth_, true; }
  bool end_array() { return --depth_, true; }
  bool parse_error(size_t, const std::string&, const nlohmann::detail::exception& e) {
    if (err.empty()) err = detail::concat("invalid JSON (", e.what(), ")");
    return false;
  }

 private:
  bool fail(std::string m) {
    err = std::move(m);
    return false;
  }
  bool not_string(const char* what) {
    return fail(detail::concat("field \"", pending_ == 1 ? pf_ : rf_, "\" is ", what, ", not a string"));
  }
  bool scalar(const char* what) {
    if (depth_ == 0) return fail(detail::concat("the line is ", what, ", not a JSON object"));
    if (depth_ == 1 && pending_ != 0) return not_string(what);
    return true;
  }
  bool open(const char* what) {
    if (depth_ == 1 && pending_ != 0) return not_string(what);
    ++depth_;
    return true;
  }
  const std::string &pf_, &rf_;
  std::string &prompt_, &response_;
  int depth_ = 0, pending_ = 0;
};

// "" when the line held both fields, else what is wrong.
std::string parse_jsonl(std::string_view line, const PreparePairsOptions& o, std::string& prompt,
                        std::string& response) {
  PairSax sax(o.prompt_field, o.response_field, prompt, response);
  const bool ok = nlohmann::json::sax_parse(line.begin(), line.end(), &sax);
  if (!ok || !sax.err.empty()) return sax.err.empty() ? "invalid JSON" : sax.err;
  if (!sax.have_p) return detail::concat("no \"", o.prompt_field, "\" field (--prompt-field)");
  if (!sax.have_r) return detail::concat("no \"", o.response_field, "\" field (--response-field)");
  return {};
}

// PROMPT<TAB>RESPONSE with \t \n \r \\ escapes; "" or what is wrong.
std::string parse_text(std::string_view line, std::string& prompt, std::string& response) {
  prompt.clear();
  response.clear();
  std::string* out = &prompt;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (c == '\t') {
      if (out == &response)
        return "more than one TAB (a TAB inside a prompt or response is written \\t)";
      out = &response;
    } else if (c == '\\') {
      const char e = i + 1 < line.size() ? line[++i] : '\0';
      if (e == 't') out->push_back('\t');
      else if (e == 'n') out->push_back('\n');
      else if (e == 'r') out->push_back('\r');
      else if (e == '\\') out->push_back('\\');
      else return detail::concat("unknown escape at column ", i, " (use \\t, \\n, \\r or \\\\)");
    } else if (c == '\0') {
      return "a NUL byte: not a text file";
    } else {
      out->push_back(c);
    }
  }
  if (out != &response) return "no TAB between prompt and response (one pair per line: PROMPT<TAB>RESPONSE)";
  return {};
}

// ---- tokenizing ----

struct Slot {
  std::string prompt, response, err;
  std::vector<uint32_t> toks;
  uint32_t p = 0;
  uint64_t full = 0;  // tokens before truncation
  bool truncated = false;
};

void encode_pair(const Tokenizer& tok, bool bytes, uint32_t T, std::string_view prompt, std::string_view response,
                 Slot& s) {
  s.toks.clear();
  auto append = [&](std::string_view t) {
    if (bytes) {  // the byte tokenizer, without a temporary vector per call
      for (unsigned char c : t) s.toks.push_back(c);
    } else {
      // SentencePiece would turn bytes that are not UTF-8 into U+FFFD's pieces, losing them.
      if (const size_t bad = first_invalid_utf8(t); bad != std::string_view::npos)
        throw UserError(detail::concat("the ", t.data() == prompt.data() ? "prompt" : "response", " is not UTF-8 text (",
                                       describe_byte_at(t, bad, 0, 0, false), " of it), ", non_utf8_remedy(tok)));
      const std::vector<uint32_t> v = tok.encode(t);
      s.toks.insert(s.toks.end(), v.begin(), v.end());
    }
  };
  append(prompt);
  s.p = static_cast<uint32_t>(std::min<size_t>(s.toks.size(), size_t{T} + 1));
  append(response);
  s.toks.push_back(tok.end_of_text());
  s.full = s.toks.size();
  s.truncated = s.toks.size() > size_t{T} + 1;
  if (s.truncated) s.toks.resize(size_t{T} + 1);
}

// ---- packing ----

class Packer {
 public:
  Packer(const PreparePairsOptions& o, std::string prefix, uint32_t vocab, uint32_t eot, PairsSplitReport& rep)
      : o_(o), prefix_(std::move(prefix)), vocab_(vocab), eot_(eot), rep_(rep), T_(static_cast<uint32_t>(o.seq_len)) {
    pool_.resize(static_cast<size_t>(o.open_rows));
    for (auto& r : pool_) r.toks.reserve(size_t{T_} * 2);
    for (size_t i = pool_.size(); i-- > 0;) free_.push_back(i);
  }

  void add(const Slot& s) {
    const auto n = static_cast<uint32_t>(s.toks.size());
    const uint32_t m = n - 1;
    ++rep_.samples;
    for (size_t k = 0; k < open_.size(); ++k) {
      Row& r = pool_[open_[k]];
      if (r.used + m <= T_) {
        put(r, s);
        if (r.used == T_) close(k);
        return;
      }
    }
    if (free_.empty()) close(0);  // the oldest open row
    const size_t i = free_.back();
    free_.pop_back();
    open_.push_back(i);
    put(pool_[i], s);
    if (pool_[i].used == T_) close(open_.size() - 1);
  }

  void finish() {
    while (!open_.empty()) close(0);
    if (writer_) {
      writer_->finish();
      rep_.files.push_back(writer_->path());
      writer_.reset();
    }
  }

 private:
  struct Row {
    std::vector<uint32_t> toks;
    std::vector<uint32_t> meta;  // per sample: n, p, truncated
    uint32_t used = 0;
  };
  void put(Row& r, const Slot& s) {
    r.toks.insert(r.toks.end(), s.toks.begin(), s.toks.end());
    r.meta.insert(r.meta.end(), {static_cast<uint32_t>(s.toks.size()), s.p, s.truncated ? 1u : 0u});
    r.used += static_cast<uint32_t>(s.toks.size()) - 1;
  }
  void close(size_t k) {
    Row& r = pool_[open_[k]];
    samples_.clear();
    size_t t = 0;
    for (size_t j = 0; j < r.meta.size(); j += 3) {
      samples_.push_back({std::span<const uint32_t>(r.toks.data() + t, r.meta[j]), r.meta[j + 1], r.meta[j + 2] != 0});
      rep_.loss_tokens += sample_loss_tokens(r.meta[j], r.meta[j + 1], o_.loss_on);
      t += r.meta[j];
    }
    if (!writer_) {
      char name[32];
      std::snprintf(name, sizeof name, "%s_%06zu.pairs", prefix_.c_str(), rep_.files.size());
      writer_ = std::make_unique<PackedShardWriter>((fs::path(o_.out_dir) / name).string(), T_, vocab_, eot_,
                                                    o_.loss_on);
    }
    writer_->add_row(samples_);
    ++rep_.rows;
    rep_.positions += r.used;
    if (writer_->rows() >= std::max<uint64_t>(1, o_.max_shard_positions / T_) ||
        writer_->samples() >= o_.max_shard_samples) {
      writer_->finish();
      rep_.files.push_back(writer_->path());
      writer_.reset();
    }
    r.toks.clear();
    r.meta.clear();
    r.used = 0;
    free_.push_back(open_[k]);
    open_.erase(open_.begin() + static_cast<ptrdiff_t>(k));
  }

  const PreparePairsOptions& o_;
  std::string prefix_;
  uint32_t vocab_, eot_;
  PairsSplitReport& rep_;
  uint32_t T_;
  std::vector<Row> pool_;
  std::vector<size_t> open_, free_;  // open_: pool indices, oldest first
  std::vector<PackedSample> samples_;
  std::unique_ptr<PackedShardWriter> writer_;
};

uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Runs the whole conversion; the caller removes what was written when it throws.
class Run {
 public:
  Run(const PreparePairsOptions& o, const Tokenizer& tok, PreparePairsReport& rep)
      : o_(o),
        tok_(tok),
        bytes_(dynamic_cast<const ByteTokenizer*>(&tok) != nullptr),
        rep_(rep),
        train_(o, "train", tok.vocab_size(), tok.end_of_text(), rep.train),
        val_(o, "val", tok.vocab_size(), tok.end_of_text(), rep.val),
        slots_{std::vector<Slot>(o.batch_lines), std::vector<Slot>(o.batch_lines)} {}

  void file(const std::string& path, bool is_val_file) {
    const PairFormat f = pair_input_format(path, o_.input_format);
    if (f == PairFormat::kParquet) return parquet(path, is_val_file);
    LineReader in(path);
    std::vector<std::string_view> lines;
    std::vector<uint64_t> numbers;
    const bool json = f == PairFormat::kJsonl;
    while (in.next(o_.batch_lines, lines, numbers)) {
      // Blank lines are left out before the parallel part (whitespace only, for JSONL).
      size_t n = 0;
      for (size_t i = 0; i < lines.size(); ++i) {
        const std::string_view l = lines[i];
        const bool blank = json ? l.find_first_not_of(" \t\r") == std::string_view::npos : l.empty();
        if (!blank) {
          lines[n] = l;
          numbers[n++] = numbers[i];
        }
      }
      const auto count = static_cast<ptrdiff_t>(n);
      const uint32_t T = static_cast<uint32_t>(o_.seq_len);
      std::vector<Slot>& slots = slots_[cur_];
#pragma omp parallel for schedule(dynamic, 256)
      for (ptrdiff_t i = 0; i < count; ++i) {
        const auto k = static_cast<size_t>(i);
        Slot& s = slots[k];
        try {
          s.err = json ? parse_jsonl(lines[k], o_, s.prompt, s.response) : parse_text(lines[k], s.prompt, s.response);
          if (s.err.empty()) encode_pair(tok_, bytes_, T, s.prompt, s.response, s);
        } catch (const std::exception& e) {
          s.err = e.what();
        }
        if (!s.err.empty()) s.err = detail::concat(path, ":", numbers[k], ": ", s.err);
      }
      hand_over(n, is_val_file);
    }
  }

  void finish() {
    wait();
    train_.finish();
    val_.finish();
  }

 private:
  void parquet(const std::string& path, bool is_val_file) {
    const ParquetFile pq(path);
    const std::vector<std::string> cols = pq.column_names();
    for (const std::string* c : {&o_.prompt_field, &o_.response_field}) {
      if (std::find(cols.begin(), cols.end(), *c) != cols.end()) continue;
      std::string have;
      for (const auto& n : cols) have += (have.empty() ? "" : ", ") + n;
      throw UserError(detail::concat(path, ": no column \"", *c, "\" (", c == &o_.prompt_field ? "--prompt-field" : "--response-field",
                                     "); its string columns are: ", have));
    }
    std::vector<std::string> prompts, responses;
    int64_t first_row = 0;  // of the row group, in the file
    for (int g = 0; g < pq.num_row_groups(); first_row += static_cast<int64_t>(prompts.size()), ++g) {
      for (const auto& column : {std::pair{&o_.prompt_field, &prompts}, std::pair{&o_.response_field, &responses}}) {
        // named copies, not structured bindings: lambdas cannot capture those before C++20's
        // P1091 support, which clang 14 lacks
        const std::string* col = column.first;
        std::vector<std::string>* out = column.second;
        out->clear();
        pq.read_string_column(g, *col, [&](int64_t row, std::string_view v, bool null) {
          FT_USER_CHECK(!null, path, ": row group ", g, ", row ", row, ": column \"", *col,
                        "\" is null (every pair needs a prompt and a response string)");
          out->emplace_back(v);
        });
      }
      FT_CHECK(prompts.size() == responses.size(), path, ": columns of row group ", g, " differ in length");
      const uint32_t T = static_cast<uint32_t>(o_.seq_len);
      for (size_t b = 0; b < prompts.size(); b += o_.batch_lines) {
        const size_t n = std::min(o_.batch_lines, prompts.size() - b);
        std::vector<Slot>& slots = slots_[cur_];
#pragma omp parallel for schedule(dynamic, 256)
        for (ptrdiff_t i = 0; i < static_cast<ptrdiff_t>(n); ++i) {
          const size_t k = b + static_cast<size_t>(i);
          Slot& s = slots[static_cast<size_t>(i)];
          try {
            s.err.clear();
            encode_pair(tok_, bytes_, T, prompts[k], responses[k], s);
          } catch (const std::exception& e) {
            s.err = detail::concat(path, ": row group ", g, ", row ", first_row + static_cast<int64_t>(k), ": ", e.what());
          }
        }
        hand_over(n, is_val_file);
      }
    }
  }

  // Packing and writing of a tokenized batch run on a helper thread while the OpenMP threads
  // parse and tokenize the next batch into the other slot buffer. The first bad record of a
  // batch (in input order) stops the run with its message.
  void hand_over(size_t n, bool is_val_file) {
    wait();  // the batch before, which used the other buffer
    const size_t buf = cur_;
    cur_ ^= 1;
    pending_ = std::async(std::launch::async, [this, buf, n, is_val_file] {
      for (size_t i = 0; i < n; ++i) {
        const Slot& s = slots_[buf][i];
        if (!s.err.empty()) throw UserError(s.err);
        consume(s, is_val_file);
      }
    });
  }
  void wait() {
    if (pending_.valid()) pending_.get();
  }

  void consume(const Slot& s, bool is_val_file) {
    const uint64_t k = pairs_++;
    if (s.full == 1) {  // empty prompt and response: nothing to learn or evaluate
      ++rep_.empty;
      return;
    }
    rep_.longest = std::max(rep_.longest, s.full);
    if (s.truncated) {
      ++rep_.truncated;
      if (s.p == s.toks.size()) ++rep_.prompt_only;
    }
    bool val = is_val_file;
    if (o_.val_inputs.empty() && o_.val_fraction > 0) {
      const double u = static_cast<double>(mix64(o_.seed * 0x9E3779B97F4A7C15ull + k + 1) >> 11) * 0x1.0p-53;
      val = u < o_.val_fraction;
    }
    (val ? val_ : train_).add(s);
  }

  const PreparePairsOptions& o_;
  const Tokenizer& tok_;
  bool bytes_;
  PreparePairsReport& rep_;
  Packer train_, val_;
  std::vector<Slot> slots_[2];
  size_t cur_ = 0;
  uint64_t pairs_ = 0;
  std::future<void> pending_;  // last: destroyed (waited for) before what it uses
};

}  // namespace

PreparePairsReport prepare_pairs(const PreparePairsOptions& o) {
  FT_USER_CHECK(!o.inputs.empty(), "--input: give at least one prompt/response file");
  FT_USER_CHECK(o.seq_len >= 1 && o.seq_len <= (1 << 24), "--seq-len: T=", o.seq_len, " is out of range [1, 2^24]");
  FT_USER_CHECK(o.val_fraction >= 0.0 && o.val_fraction < 1.0, "--val-fraction: ", o.val_fraction,
                " must be in [0, 1)");
  FT_USER_CHECK(!o.prompt_field.empty() && !o.response_field.empty() && o.prompt_field != o.response_field,
                "--prompt-field and --response-field must be two different, non-empty names");
  FT_CHECK(o.batch_lines >= 1 && o.open_rows >= 1 && o.max_shard_samples >= 1, "bad batching options");
  for (const auto* list : {&o.inputs, &o.val_inputs})
    for (const std::string& f : *list) pair_input_format(f, o.input_format);  // refuses unknown kinds up front
  const ByteTokenizer byte_tok;
  const Tokenizer& tok = o.tokenizer ? *o.tokenizer : byte_tok;
  // Everything is written into a staging folder and replaces the earlier preparation only
  // once all inputs are read (a missing file, a bad field or record, an interruption leave
  // it as it was; the staging folder goes with the exception).
  StagedPrepare staged(o.out_dir, tok, o.overwrite);
  record_tokenizer(tok, staged.dir());
  PreparePairsOptions in_staging = o;
  in_staging.out_dir = staged.dir();
  PreparePairsReport rep;
  {
    Run run(in_staging, tok, rep);
    for (const std::string& f : o.inputs) run.file(f, false);
    for (const std::string& f : o.val_inputs) run.file(f, true);
    run.finish();
  }
  // Refused before the commit, so an earlier preparation in out_dir stays as it was.
  const auto u = [](uint64_t v) { return static_cast<unsigned long long>(v); };
  const uint64_t pairs = rep.train.samples + rep.val.samples;
  FT_USER_CHECK(rep.train.samples > 0 || !o.val_inputs.empty() || rep.val.samples == 0, "--val-fraction ",
                o.val_fraction, " left no training pair (", u(rep.val.samples), " of ", u(pairs),
                " went to validation): lower it");
  FT_USER_CHECK(rep.train.samples > 0, "prepare: ", o.val_inputs.empty() ? "the input" : "--input",
                " holds no prompt/response pair",
                rep.empty > 0 ? " (only pairs whose prompt and response are both empty)" : "");
  // Every train sample cut inside its prompt (loss on responses): a split that trains nothing.
  // (It printed "0 loss tokens" and exited 0; train then found no loss unit.)
  FT_USER_CHECK(rep.train.loss_tokens > 0, "--seq-len ", o.seq_len, ": the train split has no loss token: all its ",
                u(rep.train.samples), " pair(s) were cut inside their prompt (", u(rep.prompt_only), " of ", u(pairs),
                " pairs in all; the longest sample has ", u(rep.longest), " tokens, a row holds T+1 = ",
                o.seq_len + 1, "), so no response token is left to learn: use a longer --seq-len, or --loss-on all; ",
                "nothing in ", o.out_dir, " was replaced");
  staged.commit({&rep.train.files, &rep.val.files});
  return rep;
}

}  // namespace ft
