// ByteTokenizer, tokenizer records and load_tokenizer; see tokenizer.h.
#include "data/tokenizer.h"

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/sentencepiece_tokenizer.h"

namespace ft {
namespace fs = std::filesystem;

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
