// SentencePieceTokenizer and train_sentencepiece; see sentencepiece_tokenizer.h.
#include "data/sentencepiece_tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "core/crc32c.h"
#include "core/error.h"
#include "data/prepared_folder.h"

namespace ft {
namespace fs = std::filesystem;

namespace {

constexpr std::string_view kSpaceMark = "\xe2\x96\x81";    // "▁", SentencePiece's space
constexpr std::string_view kReservedUnk = "\xe2\x81\x87";  // U+2047: lines holding it are skipped by the trainer

std::string read_bytes(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  FT_USER_CHECK(in.good(), what, ": cannot open for reading");
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  FT_USER_CHECK(!in.bad(), what, ": error while reading");
  return s;
}

// Atomic: a reader never sees half a file.
void write_bytes(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    FT_USER_CHECK(out.good(), tmp, ": cannot open for writing");
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.flush();
    FT_USER_CHECK(out.good(), tmp, ": error while writing");
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  FT_USER_CHECK(!ec, path, ": cannot write: ", ec.message());
}

// Largest cut <= limit that does not split a UTF-8 character (never 0 when limit > 0).
size_t utf8_cut(std::string_view s, size_t limit) {
  if (limit >= s.size()) return s.size();
  size_t cut = limit;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  return cut > 0 ? cut : limit;
}

// Where to end a piece of an over-long line: after the last space or tab in its second
// half, so words stay whole; else at a character boundary.
size_t sentence_cut(std::string_view s, size_t limit) {
  const size_t cut = utf8_cut(s, limit);
  const size_t ws = s.substr(0, cut).find_last_of(" \t");
  return ws != std::string_view::npos && ws + 1 >= cut / 2 ? ws + 1 : cut;
}

// Reads files line by line through a fixed buffer: a line longer than kMaxSentenceBytes
// comes out in pieces, so no line, however long, is held whole.
class ChunkedLineReader {
 public:
  explicit ChunkedLineReader(std::vector<std::string> files) : files_(std::move(files)) {}
  ~ChunkedLineReader() { close(); }

  // The next non-empty sentence; false at the end of the last file.
  bool next(std::string& out, SentencePieceTrainReport& rep) {
    for (;;) {
      const std::string_view avail(buf_.data() + pos_, buf_.size() - pos_);
      const size_t nl = avail.substr(0, std::min(avail.size(), kMaxSentenceBytes + 1)).find('\n');
      if (nl != std::string_view::npos || (eof_ && !avail.empty()) || avail.size() > kMaxSentenceBytes) {
        size_t take, skip;
        if (nl != std::string_view::npos && nl <= kMaxSentenceBytes) {
          take = nl, skip = nl + 1;
        } else if (avail.size() <= kMaxSentenceBytes && eof_) {
          take = skip = avail.size();
        } else {
          take = skip = sentence_cut(avail, kMaxSentenceBytes);
          if (!in_long_line_) ++rep.split_lines;
          in_long_line_ = true;
        }
        const bool line_ends = skip > take || (eof_ && skip == avail.size());
        // Not text (a NUL: UTF-8, but in no text), or not UTF-8 (Latin-1, say): SentencePiece
        // would fail on it with an internal error, or learn U+FFFD for every such byte.
        if (const size_t nul = avail.substr(0, take).find('\0'); nul != std::string_view::npos)
          throw UserError("--input " + current_ + ": not text (" +
                          describe_byte_at(avail, nul, base_ + pos_, file_lines_) +
                          "): tokenizer train reads UTF-8 text, which holds no NUL bytes");
        if (const size_t bad = first_invalid_utf8(avail.substr(0, take)); bad != std::string_view::npos)
          throw UserError("--input " + current_ + ": not UTF-8 text (" +
                          describe_byte_at(avail, bad, base_ + pos_, file_lines_) +
                          "): tokenizer train reads UTF-8 text; convert it (e.g. iconv -f latin1 -t utf-8)");
        out.assign(avail.substr(0, take));
        pos_ += skip;
        if (line_ends) {
          if (!out.empty() || in_long_line_) ++rep.lines;
          in_long_line_ = false;
          ++file_lines_;
        }
        if (out.empty()) continue;
        return true;
      }
      if (!refill()) return false;
    }
  }

 private:
  bool refill() {
    base_ += pos_;
    buf_.erase(0, pos_);
    pos_ = 0;
    while (!f_ || eof_) {
      if (f_ && !buf_.empty()) return true;  // the last partial line of a file, handled above
      close();
      if (next_file_ == files_.size()) return false;
      const std::string& path = files_[next_file_++];
      f_ = std::fopen(path.c_str(), "rb");
      FT_USER_CHECK(f_, "--input ", path, ": cannot open for reading");
      current_ = path;
      eof_ = false;
      base_ = file_lines_ = 0;
    }
    const size_t old = buf_.size();
    buf_.resize(old + kReadBytes);
    const size_t n = std::fread(buf_.data() + old, 1, kReadBytes, f_);
    buf_.resize(old + n);
    FT_USER_CHECK(!std::ferror(f_), "--input ", current_, ": error while reading");
    if (n < kReadBytes) eof_ = true;
    return true;
  }
  void close() {
    if (f_) std::fclose(f_);
    f_ = nullptr;
  }

  static constexpr size_t kReadBytes = 1 << 20;
  std::vector<std::string> files_;
  size_t next_file_ = 0;
  std::FILE* f_ = nullptr;
  std::string current_;
  bool eof_ = false, in_long_line_ = false;
  std::string buf_;
  size_t pos_ = 0;
  uint64_t base_ = 0, file_lines_ = 0;  // the current file's bytes before buf_, lines ended so far
};

// The trainer's view of the input: SentencePiece pulls sentences one at a time.
class FileSentenceIterator : public sentencepiece::SentenceIterator {
 public:
  FileSentenceIterator(const std::vector<std::string>& files, SentencePieceTrainReport& rep)
      : reader_(files), rep_(rep) {
    Next();
  }
  bool done() const override { return done_; }
  void Next() override {
    try {
      done_ = !reader_.next(value_, rep_);
    } catch (const UserError& e) {
      error_ = e.what();
      done_ = true;
      return;
    }
    if (done_) return;
    ++rep_.sentences;
    // SentencePiece skips a sentence holding its reserved "unknown" mark: drop the mark
    // instead, so the rest of the line still counts.
    bool removed = false;
    for (size_t at; (at = value_.find(kReservedUnk)) != std::string::npos; removed = true)
      value_.erase(at, kReservedUnk.size());
    if (removed) ++rep_.reserved_chars_removed;
    if (value_.empty()) Next();
  }
  const std::string& value() const override { return value_; }
  sentencepiece::util::Status status() const override {
    if (error_.empty()) return sentencepiece::util::Status();
    return sentencepiece::util::Status(sentencepiece::util::StatusCode::kInternal, error_);
  }
  const std::string& error() const { return error_; }

 private:
  ChunkedLineReader reader_;
  SentencePieceTrainReport& rep_;
  std::string value_, error_;
  bool done_ = false;
};

// SentencePiece's messages name its own options, which fittrain spells otherwise: "Increase
// vocab_size or decrease character_coverage with --character_coverage option", or a failed
// check on "trainer_spec.input_sentence_size()". A user following them would pass a flag
// fittrain does not have. The options fittrain sets from a flag of its own are renamed to that
// flag in each form (the option, a check's trainer_spec accessor, the bare name); others
// (fixed by fittrain) are left as SentencePiece wrote them.
std::string with_fittrain_flags(std::string msg) {
  static constexpr std::pair<std::string_view, std::string_view> kFlags[] = {
      {"vocab_size", "--vocab-size"},
      {"character_coverage", "--character-coverage"},
      {"model_type", "--model-type"},
      {"input_sentence_size", "--sample-sentences"},
  };
  const auto word_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  for (const auto& [name, flag] : kFlags) {
    const std::string forms[] = {"trainer_spec_." + std::string(name) + "()",
                                 "trainer_spec." + std::string(name) + "()", "--" + std::string(name)};
    for (const std::string& form : forms)
      for (size_t at = 0; (at = msg.find(form, at)) != std::string::npos; at += flag.size())
        msg.replace(at, form.size(), flag);
    // The bare name, as a whole word only (not inside input_sentence_size_max or the like).
    for (size_t at = 0; (at = msg.find(name, at)) != std::string::npos;) {
      const size_t end = at + name.size();
      if ((at > 0 && (word_char(msg[at - 1]) || msg[at - 1] == '-')) || (end < msg.size() && word_char(msg[end]))) {
        at = end;
        continue;
      }
      msg.replace(at, name.size(), flag);
      at += flag.size();
    }
  }
  return msg;
}

}  // namespace

std::string tokenizer_identity(const std::string& model_bytes) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "crc32c:%08x", crc32c(model_bytes.data(), model_bytes.size()));
  return buf;
}

std::string tokenizer_identity_of_file(const std::string& path, const std::string& what) {
  return tokenizer_identity(read_bytes(path, what));
}

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& model_path, const std::string& flag)
    : path_(model_path), sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {
  const std::string what = flag + " " + model_path;
  std::error_code ec;
  FT_USER_CHECK(fs::is_regular_file(model_path, ec), what, ": not a file");
  bytes_ = read_bytes(model_path, what);
  FT_USER_CHECK(!bytes_.empty(), what, ": empty file, not a SentencePiece model");
  const auto st = sp_->LoadFromSerializedProto(bytes_);
  FT_USER_CHECK(st.ok(), what, ": not a SentencePiece model (", st.ToString(), ")");
  FT_USER_CHECK(sp_->GetPieceSize() > 0, what, ": SentencePiece model has no pieces");
  FT_USER_CHECK(sp_->eos_id() >= 0, what, ": SentencePiece model has no end-of-sentence piece (</s>), which ",
                "separates documents");
  vocab_size_ = static_cast<uint32_t>(sp_->GetPieceSize());
  eos_ = static_cast<uint32_t>(sp_->eos_id());
  identity_ = tokenizer_identity(bytes_);
  std::vector<std::string> pieces;
  dummy_prefix_ = sp_->Encode("a", &pieces).ok() && !pieces.empty() && pieces[0].rfind(kSpaceMark, 0) == 0;
}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

std::vector<uint32_t> SentencePieceTokenizer::encode(std::string_view text) const {
  std::vector<uint32_t> out;
  std::vector<int> ids;
  auto run = [&](std::string_view part) {
    const auto st = sp_->Encode(part, &ids);
    FT_USER_CHECK(st.ok(), path_, ": SentencePiece cannot encode the text (", st.ToString(), ")");
    for (int id : ids) out.push_back(static_cast<uint32_t>(id));
  };
  if (dummy_prefix_) {
    run(text);
    return out;
  }
  // Pieces of about 64 KiB ending at a line end (a line over 1 MiB at a character
  // boundary): the same tokens as one call for our models, with bounded working memory.
  constexpr size_t kPart = 64 << 10, kMaxPart = 1 << 20;
  while (!text.empty()) {
    size_t end = text.size();
    if (end > kPart) {
      const size_t nl = text.find('\n', kPart);
      end = nl != std::string_view::npos && nl < kMaxPart ? nl + 1 : utf8_cut(text, std::min(text.size(), kMaxPart));
    }
    run(text.substr(0, end));
    text.remove_prefix(end);
  }
  return out;
}

std::string SentencePieceTokenizer::decode(std::span<const uint32_t> tokens) const {
  std::string out, part;
  std::vector<int> run;
  auto flush = [&] {
    if (run.empty()) return;
    const auto st = sp_->Decode(run, &part);
    FT_USER_CHECK(st.ok(), path_, ": SentencePiece cannot decode (", st.ToString(), ")");
    out += part;
    run.clear();
  };
  for (uint32_t t : tokens) {
    if (t == eos_) {
      flush();
      out.append(kEndOfTextMarker);
    } else if (t >= vocab_size_) {
      flush();
      out.append("<|").append(std::to_string(t)).append("|>");
    } else {
      run.push_back(static_cast<int>(t));
    }
  }
  flush();
  return out;
}

SentencePieceTrainReport train_sentencepiece(const SentencePieceTrainOptions& opt) {
  FT_USER_CHECK(!opt.inputs.empty(), "--input: give at least one text file");
  FT_USER_CHECK(!opt.out_dir.empty(), "--out: give the folder for tokenizer.model");
  FT_USER_CHECK(opt.vocab_size >= 260, "--vocab-size ", opt.vocab_size,
                ": must be at least 260 (256 byte-fallback pieces, <unk>, <s>, </s> and one more)");
  FT_USER_CHECK(opt.model_type == "unigram" || opt.model_type == "bpe", "--model-type ", opt.model_type,
                ": must be unigram or bpe");
  // SentencePiece's own ranges (its trainer refuses values outside them), checked here so that
  // the message is fittrain's.
  FT_USER_CHECK(opt.sample_sentences > 100, "--sample-sentences ", opt.sample_sentences,
                ": must be more than 100 (SentencePiece samples at least that many lines)");
  FT_USER_CHECK(opt.character_coverage >= 0.98 && opt.character_coverage <= 1, "--character-coverage ",
                opt.character_coverage, ": must be in [0.98, 1] (SentencePiece's range)");
  std::vector<std::string> sources;
  for (const auto& f : opt.inputs) {
    std::error_code ec;
    FT_USER_CHECK(fs::exists(f, ec), "--input ", f, ": no such file");
    FT_USER_CHECK(fs::is_regular_file(f, ec), "--input ", f, ": not a regular file");
    sources.push_back(fs::absolute(f).lexically_normal().string());
  }
  std::error_code ec;
  // Locked before the folder is looked at: a preparation running there would otherwise commit
  // shards between the check below and our model.
  const PrepareLock lock(opt.out_dir);
  // Prepared shards keep the token ids of the tokenizer recorded beside them: a new one
  // there would pair them with other pieces, with nothing to tell.
  const std::string shard = first_prepared_shard(opt.out_dir);
  FT_USER_CHECK(shard.empty(), "--out ", opt.out_dir, " holds prepared shards (", shard,
                ", ...) whose token ids belong to its tokenizer: give another --out");
  FT_USER_CHECK(opt.overwrite || !fs::exists(fs::path(opt.out_dir) / kTokenizerModelFile, ec), "--out ", opt.out_dir,
                " already holds ", kTokenizerModelFile, ": pass --overwrite to replace it, or another --out");

  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  const std::unordered_map<std::string, std::string> args = {
      {"model_type", opt.model_type},
      {"vocab_size", std::to_string(opt.vocab_size)},
      {"character_coverage", std::to_string(opt.character_coverage)},
      {"input_sentence_size", std::to_string(opt.sample_sentences)},
      {"shuffle_input_sentence", "true"},
      // Pieces are cut below this already; the margin keeps SentencePiece from ever
      // dropping one.
      {"max_sentence_length", std::to_string(2 * kMaxSentenceBytes)},
      {"byte_fallback", "true"},
      // Text comes back exactly (see the header): no normalization, no dummy prefix, spaces kept.
      {"normalization_rule_name", "identity"},
      {"add_dummy_prefix", "false"},
      {"remove_extra_whitespaces", "false"},
      // A tiny corpus may not support the asked size: take what it supports.
      {"hard_vocab_limit", "false"},
      {"num_threads", std::to_string(threads)},
      {"minloglevel", "2"},
  };
  sentencepiece::SetRandomGeneratorSeed(opt.seed + 1);  // deterministic sampling (0 means "random")
  SentencePieceTrainReport rep;
  FileSentenceIterator it(opt.inputs, rep);
  std::string model;
  const auto st = sentencepiece::SentencePieceTrainer::Train(args, &it, &model);
  FT_USER_CHECK(it.error().empty(), it.error());
  FT_USER_CHECK(rep.sentences > 0, "--input: the files hold no text to train on");
  FT_USER_CHECK(st.ok(), "tokenizer train (--vocab-size ", opt.vocab_size, ", --model-type ", opt.model_type,
                "): SentencePiece failed: ", with_fittrain_flags(st.ToString()));

  rep.model_path = (fs::path(opt.out_dir) / kTokenizerModelFile).string();
  rep.record_path = (fs::path(opt.out_dir) / kTokenizerRecordFile).string();
  write_bytes(rep.model_path, model);
  const SentencePieceTokenizer tok(rep.model_path, "--out");
  rep.vocab_size = tok.vocab_size();
  rep.identity = tok.identity();
  const nlohmann::json record = {
      {"kind", "sentencepiece"},
      {"identity", rep.identity},
      {"vocab_size", rep.vocab_size},
      {"model_type", opt.model_type},
      {"end_of_text", tok.end_of_text()},
      {"sources", sources},
      {"character_coverage", opt.character_coverage},
      {"sample_sentences", opt.sample_sentences},
      {"lines", rep.lines},
      {"split_lines", rep.split_lines},
  };
  write_bytes(rep.record_path, record.dump(2) + "\n");
  return rep;
}

}  // namespace ft
