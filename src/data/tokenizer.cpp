// ByteTokenizer, tokenizer records and load_tokenizer; see tokenizer.h.
#include "data/tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/sentencepiece_tokenizer.h"

namespace ft {
namespace fs = std::filesystem;

size_t first_invalid_utf8(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    const unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    // The length a lead byte announces and the range its first continuation byte must be in
    // (which excludes overlong forms, surrogates and code points past U+10FFFF).
    size_t len = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c == 0xE0) len = 3, lo = 0xA0;
    else if (c >= 0xE1 && c <= 0xEC) len = 3;
    else if (c == 0xED) len = 3, hi = 0x9F;
    else if (c >= 0xEE && c <= 0xEF) len = 3;
    else if (c == 0xF0) len = 4, lo = 0x90;
    else if (c >= 0xF1 && c <= 0xF3) len = 4;
    else if (c == 0xF4) len = 4, hi = 0x8F;
    if (len == 0 || i + len > n || s[i + 1] < lo || s[i + 1] > hi) return i;
    for (size_t k = 2; k < len; ++k)
      if ((s[i + k] & 0xC0) != 0x80) return i;
    i += len;
  }
  return std::string_view::npos;
}

std::string describe_byte_at(std::string_view text, size_t at, uint64_t base, uint64_t base_line, bool with_line) {
  char hex[8];
  std::snprintf(hex, sizeof hex, "0x%02X", static_cast<unsigned>(static_cast<unsigned char>(text[at])));
  const uint64_t line = base_line + 1 + static_cast<uint64_t>(std::count(text.begin(), text.begin() + at, '\n'));
  return "byte " + std::string(hex) + " at offset " + std::to_string(base + at) +
         (with_line ? " (line " + std::to_string(line) + ")" : std::string());
}

std::string non_utf8_remedy(const Tokenizer& tok) {
  return "which tokenizer " + tok.identity() +
         " would replace by U+FFFD: convert the input (e.g. iconv -f latin1 -t utf-8), or prepare without "
         "--tokenizer (bytes)";
}

std::vector<uint32_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<uint32_t> out;
  out.reserve(text.size());
  for (char c : text) out.push_back(static_cast<unsigned char>(c));
  return out;
}

std::string ByteTokenizer::decode(std::span<const uint32_t> tokens) const {
  std::string out;
  out.reserve(tokens.size());
  for (uint32_t t : tokens) {
    if (t < 256) {
      out.push_back(static_cast<char>(static_cast<unsigned char>(t)));
    } else if (t == kEndOfText) {
      out.append(kEndOfTextMarker);
    } else {
      out.append("<|").append(std::to_string(t)).append("|>");
    }
  }
  return out;
}

std::optional<TokenizerRecord> read_tokenizer_record(const std::string& dir) {
  const fs::path file = fs::path(dir) / kTokenizerRecordFile;
  std::error_code ec;
  if (!fs::exists(file, ec)) return std::nullopt;
  std::ifstream in(file);
  FT_USER_CHECK(in.good(), file.string(), ": cannot open the tokenizer record for reading");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    throw UserError(file.string() + ": not a valid tokenizer record (" + e.what() + ")");
  }
  TokenizerRecord r;
  try {
    r.kind = j.at("kind").get<std::string>();
    r.identity = j.at("identity").get<std::string>();
    r.vocab_size = j.at("vocab_size").get<uint32_t>();
    r.model_type = j.value("model_type", "");
  } catch (const std::exception& e) {
    throw UserError(file.string() + ": tokenizer record lacks kind/identity/vocab_size (" + e.what() + ")");
  }
  FT_USER_CHECK(r.kind == "sentencepiece", file.string(), ": unknown tokenizer kind '", r.kind, "'");
  FT_USER_CHECK(r.vocab_size > 0, file.string(), ": tokenizer vocab_size is 0");
  // The model always sits beside the record (prepare copies it there), so a moved folder
  // still works.
  r.model_path = fs::absolute(fs::path(dir) / kTokenizerModelFile).lexically_normal().string();
  FT_USER_CHECK(fs::is_regular_file(r.model_path, ec), file.string(), ": names tokenizer ", r.identity,
                " but its model file ", r.model_path, " is missing");
  // A model swapped after the shards were made would decode them into nonsense.
  std::ifstream m(r.model_path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(m)), std::istreambuf_iterator<char>());
  const std::string have = tokenizer_identity(bytes);
  FT_USER_CHECK(have == r.identity, r.model_path, ": tokenizer identity ", have, " differs from ", r.identity,
                " recorded in ", file.string(), " (the model file was replaced after the shards were made)");
  return r;
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& spec, const std::string& flag) {
  if (spec.empty() || spec == "byte") return std::make_unique<ByteTokenizer>();
  std::error_code ec;
  FT_USER_CHECK(fs::exists(spec, ec), flag, " ", spec, ": no such file or folder");
  const std::string model = fs::is_directory(spec, ec) ? (fs::path(spec) / kTokenizerModelFile).string() : spec;
  FT_USER_CHECK(fs::exists(model, ec), flag, " ", spec, ": folder has no ", kTokenizerModelFile,
                " (train one with `fittrain tokenizer train`)");
  return std::make_unique<SentencePieceTokenizer>(model, flag);
}

}  // namespace ft
