// ByteTokenizer: the simplest tokenizer that handles any text: one token per byte.
// Vocabulary 257: tokens 0..255 are the bytes, 256 (kEndOfText) separates documents.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ft {

class ByteTokenizer {
 public:
  static constexpr uint32_t kEndOfText = 256;
  static constexpr uint32_t kVocabSize = 257;
  // Visible marker that decode() writes for kEndOfText, on its own line so that generated
  // samples show document boundaries. Decoding is therefore not the exact inverse of
  // encode() across documents; encode() never produces kEndOfText (the caller appends it),
  // so encode(text) followed by decode() returns text exactly.
  static constexpr std::string_view kEndOfTextMarker = "\n<|endoftext|>\n";

  uint32_t vocab_size() const { return kVocabSize; }
  std::vector<uint32_t> encode(std::string_view text) const;
  // Tokens >= kVocabSize (e.g. from a model whose vocabulary is padded) decode as "<|N|>".
  std::string decode(std::span<const uint32_t> tokens) const;
};

}  // namespace ft
