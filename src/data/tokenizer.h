// Tokenizers: text <-> token ids, behind one small interface so that `prepare` and `sample`
// work with any of them.
//  - ByteTokenizer: the simplest tokenizer that handles any text: one token per byte.
//    Vocabulary 257: tokens 0..255 are the bytes, 256 (kEndOfText) separates documents.
//  - SentencePieceTokenizer (data/sentencepiece_tokenizer.h): a trained subword model.
// A tokenizer's identity() names it in records (a prepared data folder's tokenizer.json, a
// checkpoint's metadata) so that shards, model and `sample` can be checked to agree.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ft {

// Visible marker that decode() writes for the end-of-text token, on its own line so that
// generated samples show document boundaries. Decoding is therefore not the exact inverse of
// encode() across documents; encode() never produces end-of-text (the caller appends it),
// so encode(text) followed by decode() returns text exactly.
inline constexpr std::string_view kEndOfTextMarker = "\n<|endoftext|>\n";

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual uint32_t vocab_size() const = 0;
  // The token that `prepare` appends after every document.
  virtual uint32_t end_of_text() const = 0;
  virtual std::vector<uint32_t> encode(std::string_view text) const = 0;
  // Tokens >= vocab_size() (e.g. from a model whose vocabulary is padded) decode as "<|N|>";
  // end_of_text() as kEndOfTextMarker.
  virtual std::string decode(std::span<const uint32_t> tokens) const = 0;
  // "byte" or "sentencepiece".
  virtual std::string kind() const = 0;
  // What makes two tokenizers the same: "byte257", or "crc32c:xxxxxxxx" of a model file.
  virtual std::string identity() const = 0;
};

// The offset of the first byte of `text` that does not start a well-formed UTF-8 character
// (RFC 3629: no overlong forms, surrogates or code points past U+10FFFF; NUL is well-formed,
// and a SentencePiece model with byte fallback keeps it), or npos. A SentencePiece tokenizer
// would turn such bytes into U+FFFD and lose them, so its inputs are checked; the byte
// tokenizer keeps any byte.
size_t first_invalid_utf8(std::string_view text);
// For messages: "byte 0xE9 at offset 3 (line 1)" of text[at], offsets and lines counted from
// `base` bytes and `base_line` lines before text (a chunk of a longer file); without the line
// for a field of a record (with_line false).
std::string describe_byte_at(std::string_view text, size_t at, uint64_t base = 0, uint64_t base_line = 0,
                             bool with_line = true);

// The rest of a preparation's refusal of text that is not UTF-8, after "X is not UTF-8 text
// (where)": what `tok` would do with those bytes and the two ways out.
std::string non_utf8_remedy(const Tokenizer& tok);

class ByteTokenizer final : public Tokenizer {
 public:
  static constexpr uint32_t kEndOfText = 256;
  static constexpr uint32_t kVocabSize = 257;
  static constexpr std::string_view kEndOfTextMarker = ft::kEndOfTextMarker;

  uint32_t vocab_size() const override { return kVocabSize; }
  uint32_t end_of_text() const override { return kEndOfText; }
  std::vector<uint32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const uint32_t> tokens) const override;
  std::string kind() const override { return "byte"; }
  std::string identity() const override { return "byte257"; }
};

// What a prepared data folder (and a checkpoint trained on it) records about the tokenizer
// that made its shards: `tokenizer.json` beside the shards, with the model file copied as
// `tokenizer.model`. Folders without a record were made by the byte tokenizer.
struct TokenizerRecord {
  std::string kind;        // "sentencepiece"
  std::string identity;    // "crc32c:xxxxxxxx" of the model file's bytes
  uint32_t vocab_size = 0;
  std::string model_type;  // "unigram", "bpe", ... ("" when unknown)
  std::string model_path;  // the model file (absolute when read from a folder)
};

inline constexpr const char* kTokenizerModelFile = "tokenizer.model";
inline constexpr const char* kTokenizerRecordFile = "tokenizer.json";

// The record in `dir` (dir/tokenizer.json), nullopt when the folder has none. UserError
// naming the file when it exists but is unreadable or malformed, or when dir/tokenizer.model
// is missing or its identity differs from the record's.
std::optional<TokenizerRecord> read_tokenizer_record(const std::string& dir);

// Loads a tokenizer: "" or "byte" gives the ByteTokenizer; a folder gives its
// tokenizer.model; a file is loaded as a SentencePiece model. UserError naming `flag` and
// the path when it does not exist or is not a SentencePiece model.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& spec, const std::string& flag);

}  // namespace ft
