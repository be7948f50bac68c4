// SentencePieceTokenizer: a trained subword model (unigram or BPE) from libsentencepiece,
// and its training (`fittrain tokenizer train`).
//
// Models trained here keep text exact: identity normalization, no dummy "▁" prefix, extra
// whitespace kept, and byte fallback (a character the vocabulary lacks, e.g. an emoji,
// becomes its UTF-8 bytes), so decode(encode(text)) == text for any valid UTF-8 text. Because
// no dummy prefix is added, a document can be encoded in pieces (at line ends) with the same
// result as in one call, so `prepare`'s memory does not grow with a document's size. A model
// made elsewhere that adds the dummy prefix is encoded in one call per document instead.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/tokenizer.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace ft {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  // Loads a .model file. UserError naming `flag` and the file when it is missing,
  // unreadable, not a SentencePiece model, or has no end-of-sentence piece.
  SentencePieceTokenizer(const std::string& model_path, const std::string& flag);
  ~SentencePieceTokenizer() override;

  uint32_t vocab_size() const override { return vocab_size_; }
  uint32_t end_of_text() const override { return eos_; }
  std::vector<uint32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const uint32_t> tokens) const override;
  std::string kind() const override { return "sentencepiece"; }
  std::string identity() const override { return identity_; }

  const std::string& path() const { return path_; }
  // The model file's bytes, exactly as read (what identity() is computed over).
  const std::string& model_bytes() const { return bytes_; }

 private:
  std::string path_, bytes_, identity_;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  uint32_t vocab_size_ = 0, eos_ = 0;
  bool dummy_prefix_ = false;  // the model adds "▁" before every encoded text
};

// "crc32c:xxxxxxxx" of a model file's bytes: a tokenizer's identity.
std::string tokenizer_identity(const std::string& model_bytes);
// The same of the model file at `path`; UserError naming `what` when it cannot be read.
std::string tokenizer_identity_of_file(const std::string& path, const std::string& what);

struct SentencePieceTrainOptions {
  std::vector<std::string> inputs;  // text files, one sentence per line
  int vocab_size = 0;
  std::string model_type = "unigram";  // unigram | bpe
  std::string out_dir;                 // gets tokenizer.model and tokenizer.json
  int64_t sample_sentences = 2'000'000;  // at most this many lines, a uniform sample
  double character_coverage = 0.9995;
  uint32_t seed = 0;
  bool overwrite = false;  // replace a tokenizer.model already in out_dir (refused otherwise)
};

struct SentencePieceTrainReport {
  uint64_t lines = 0;        // non-empty lines read
  uint64_t sentences = 0;    // sentences given to the trainer (a long line gives several)
  uint64_t split_lines = 0;  // lines longer than kMaxSentenceBytes, cut into pieces
  uint64_t reserved_chars_removed = 0;  // lines from which U+2047 (SentencePiece's "unknown") was removed
  uint32_t vocab_size = 0;
  std::string identity, model_path, record_path;
};

// Lines longer than this are cut (at whitespace where possible, else at a UTF-8 character
// boundary) before training: SentencePiece silently drops longer ones, and the cut keeps
// the trainer's memory bounded by sample_sentences x this.
inline constexpr size_t kMaxSentenceBytes = 4096;

// Streams the input files line by line into SentencePieceTrainer (a uniform sample of
// sample_sentences lines is kept: bounded memory on large inputs) and writes
// out_dir/tokenizer.model and out_dir/tokenizer.json (kind, identity, vocab size, model
// type, sources, settings). UserError naming the flag or file on bad options or input.
SentencePieceTrainReport train_sentencepiece(const SentencePieceTrainOptions& opt);

}  // namespace ft
