// prepare_text; see prepare.h.
#include "data/prepare.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/sentencepiece_tokenizer.h"
#include "data/token_shard.h"
#include "data/tokenizer.h"

namespace ft {
namespace fs = std::filesystem;

namespace {

std::string read_document(const std::string& path) {
  std::error_code ec;
  FT_USER_CHECK(fs::exists(path, ec), path, ": input text file does not exist");
  FT_USER_CHECK(fs::is_regular_file(path, ec), path, ": input text is not a regular file");
  std::ifstream in(path, std::ios::binary);
  FT_USER_CHECK(in.good(), path, ": cannot open input text file for reading");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  FT_USER_CHECK(!in.bad(), path, ": error while reading input text file");
  FT_USER_CHECK(!text.empty(), path, ": input text file is empty");
  // Text has no NUL bytes; an image, an archive or a token shard given by mistake does.
  const size_t nul = text.find('\0');
  FT_USER_CHECK(nul == std::string::npos, path, ": not a text file (a NUL byte at offset ", nul,
                "); prepare reads UTF-8 text, one document per file");
  return text;
}

// Buffers tokens and writes numbered shards of at most max_tokens each.
class ShardSink {
 public:
  ShardSink(std::string dir, std::string prefix, uint64_t max_tokens, std::vector<std::string>& files)
      : dir_(std::move(dir)), prefix_(std::move(prefix)), max_(max_tokens), files_(files) {}
  void push(uint32_t t) {
    buf_.push_back(t);
    ++total_;
    if (buf_.size() == max_) flush();
  }
  void flush() {
    if (buf_.empty()) return;
    char name[32];
    std::snprintf(name, sizeof(name), "%s_%06zu.bin", prefix_.c_str(), files_.size());
    const std::string path = (fs::path(dir_) / name).string();
    write_shard(path, buf_);
    files_.push_back(path);
    buf_.clear();
  }
  uint64_t total() const { return total_; }

 private:
  std::string dir_, prefix_;
  uint64_t max_;
  std::vector<std::string>& files_;
  std::vector<uint32_t> buf_;
  uint64_t total_ = 0;
};

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Atomic, like the shards.
void write_file(const fs::path& path, const std::string& bytes) {
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.flush();
    FT_USER_CHECK(out.good(), tmp.string(), ": cannot write");
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  FT_USER_CHECK(!ec, path.string(), ": cannot write: ", ec.message());
}

}  // namespace

// The tokenizer record beside the shards (prepare.h); the byte tokenizer has none (commit()
// then removes an earlier run's record).
void record_tokenizer(const Tokenizer& tok, const std::string& dir) {
  const fs::path model = fs::path(dir) / kTokenizerModelFile, record = fs::path(dir) / kTokenizerRecordFile;
  const auto* sp = dynamic_cast<const SentencePieceTokenizer*>(&tok);
  if (!sp) return;
  // The model type is known from the record `tokenizer train` wrote beside the model.
  std::string model_type;
  try {
    const auto src = read_tokenizer_record(fs::path(sp->path()).parent_path().string());
    if (src && src->identity == sp->identity()) model_type = src->model_type;
  } catch (const UserError&) {
  }
  write_file(model, sp->model_bytes());
  const nlohmann::json j = {{"kind", sp->kind()},
                            {"identity", sp->identity()},
                            {"vocab_size", sp->vocab_size()},
                            {"model_type", model_type},
                            {"end_of_text", sp->end_of_text()},
                            {"source", fs::absolute(sp->path()).lexically_normal().string()}};
  write_file(record, j.dump(2) + "\n");
}

void check_out_dir_tokenizer(const std::string& out_dir, const Tokenizer& tok, bool overwrite) {
  if (overwrite) return;
  std::error_code ec;
  const fs::path model = fs::path(out_dir) / kTokenizerModelFile, record = fs::path(out_dir) / kTokenizerRecordFile;
  const auto* sp = dynamic_cast<const SentencePieceTokenizer*>(&tok);
  if (!sp) {
    FT_USER_CHECK(!fs::exists(record, ec), "--out ", out_dir, " holds a tokenizer's record (", kTokenizerRecordFile,
                  "), which byte-tokenizer shards would remove: pass --tokenizer ", out_dir,
                  " to prepare with that tokenizer, --overwrite to replace it, or another --out");
    return;
  }
  if (!fs::is_regular_file(model, ec)) return;
  const std::string there = tokenizer_identity_of_file(model.string(), "--out " + out_dir + ": its " +
                                                                          kTokenizerModelFile);
  FT_USER_CHECK(there == sp->identity(), "--out ", out_dir, " holds ", kTokenizerModelFile, " of tokenizer ", there,
                ", not --tokenizer's ", sp->identity(), ": pass --overwrite to replace it, or another --out");
}

void check_out_dir_unprepared(const std::string& out_dir, const Tokenizer& tok, bool overwrite) {
  check_no_other_preparation(out_dir, PreparedKind::shards);
  if (overwrite) return;
  const std::string shard = first_prepared_shard(out_dir);
  FT_USER_CHECK(shard.empty(), "--out ", out_dir, " already holds shards (", shard,
                ", ...): pass --overwrite to replace them, or another --out");
  std::error_code ec;
  if (fs::is_directory(out_dir, ec)) check_out_dir_tokenizer(out_dir, tok, overwrite);
}

StagedPrepare::StagedPrepare(const std::string& out_dir, const Tokenizer& tok, bool overwrite) : out_dir_(out_dir) {
  lock_.emplace(out_dir);  // before the staging folder, which another run may be writing into
  check_out_dir_unprepared(out_dir, tok, overwrite);
  std::error_code ec;
  staging_ = (fs::path(out_dir) / kStagingDir).string();
  fs::remove_all(staging_, ec);  // a stale one: an earlier run was killed before its commit
  fs::create_directory(staging_, ec);
  FT_USER_CHECK(!ec, staging_, ": cannot create the staging folder: ", ec.message());
}

StagedPrepare::~StagedPrepare() {
  std::error_code ec;
  if (!committed_) fs::remove_all(staging_, ec);
}

void StagedPrepare::commit(std::initializer_list<std::vector<std::string>*> files) {
  std::error_code ec;
  // What could stop a rename is checked before anything is removed: a target that exists but
  // is not a regular file (a folder named like a shard). Past this point only an I/O error of
  // the file system itself can interrupt the swap.
  auto check_target = [&](const fs::path& from) {
    const fs::path to = fs::path(out_dir_) / from.filename();
    FT_USER_CHECK(!fs::exists(to, ec) || fs::is_regular_file(to, ec), to.string(),
                  ": is in the way of the prepared file of that name (not a regular file); nothing was replaced");
  };
  for (std::vector<std::string>* list : files)
    for (const std::string& f : *list) check_target(f);
  for (const char* f : {kTokenizerModelFile, kTokenizerRecordFile})
    if (fs::exists(fs::path(staging_) / f)) check_target(fs::path(staging_) / f);
  // The earlier run's shards (only our own naming pattern), so a folder spec never mixes two runs.
  for (const auto& e : fs::directory_iterator(out_dir_))
    if (e.is_regular_file() && is_prepared_shard_name(e.path().filename().string())) fs::remove(e.path());
  const fs::path record = fs::path(staging_) / kTokenizerRecordFile;
  const bool has_record = fs::exists(record);  // a SentencePiece tokenizer's: its model beside it
  // No record while the model file is replaced; none at all for byte shards.
  fs::remove(fs::path(out_dir_) / kTokenizerRecordFile);
  auto move_in = [&](const fs::path& from) {
    const fs::path to = fs::path(out_dir_) / from.filename();
    fs::rename(from, to, ec);
    FT_USER_CHECK(!ec, to.string(), ": cannot move the prepared file in: ", ec.message());
    return to.string();
  };
  if (has_record) move_in(fs::path(staging_) / kTokenizerModelFile);
  for (std::vector<std::string>* list : files)
    for (std::string& f : *list) f = move_in(f);
  if (has_record) move_in(record);  // last: the record names a model already in place
  committed_ = true;
  fs::remove_all(staging_, ec);
}

PrepareReport prepare_text(const std::vector<std::string>& input_files, const std::string& out_dir,
                           double val_fraction, uint64_t seed, uint64_t max_shard_tokens,
                           const Tokenizer* tokenizer, bool overwrite) {
  FT_USER_CHECK(!input_files.empty(), "prepare: no input text files given");
  FT_USER_CHECK(val_fraction >= 0.0 && val_fraction < 1.0, "--val-fraction: ", val_fraction,
                " must be in [0, 1)");
  FT_USER_CHECK(max_shard_tokens >= 1 && max_shard_tokens <= uint64_t{INT32_MAX},
                "prepare: shard size ", max_shard_tokens, " tokens is out of range");
  std::vector<std::string> docs;
  docs.reserve(input_files.size());
  for (const auto& f : input_files) docs.push_back(read_document(f));
  const ByteTokenizer bytes;
  const Tokenizer& tok = tokenizer ? *tokenizer : bytes;
  // Bytes that are not UTF-8 (Latin-1 text, say) would become U+FFFD in SentencePiece's pieces,
  // lost without a word; the byte tokenizer keeps them.
  if (tok.kind() != "byte")
    for (size_t i = 0; i < docs.size(); ++i)
      if (const size_t at = first_invalid_utf8(docs[i]); at != std::string::npos)
        throw UserError(detail::concat(input_files[i], ": not UTF-8 text (", describe_byte_at(docs[i], at), "), ",
                                       non_utf8_remedy(tok)));

  StagedPrepare staged(out_dir, tok, overwrite);
  record_tokenizer(tok, staged.dir());

  PrepareReport rep;
  rep.documents = docs.size();
  const size_t D = docs.size();
  ShardSink train(staged.dir(), "train", max_shard_tokens, rep.train_files);
  ShardSink val(staged.dir(), "val", max_shard_tokens, rep.val_files);
  auto emit_doc = [&](const std::string& d, ShardSink& sink) {
    for (uint32_t t : tok.encode(d)) sink.push(t);
    sink.push(tok.end_of_text());
  };

  if (D >= 10) {
    rep.split_by_documents = true;
    size_t k = 0;
    if (val_fraction > 0.0) {
      k = static_cast<size_t>(std::llround(val_fraction * static_cast<double>(D)));
      k = std::clamp<size_t>(k, 1, D - 1);
    }
    // A seeded partial Fisher-Yates picks which documents go to val.
    std::vector<size_t> order(D);
    std::iota(order.begin(), order.end(), size_t{0});
    uint64_t state = seed;
    for (size_t i = 0; i < k; ++i) {
      const size_t j = i + static_cast<size_t>(splitmix64(state) % (D - i));
      std::swap(order[i], order[j]);
    }
    std::vector<char> is_val(D, 0);
    for (size_t i = 0; i < k; ++i) is_val[order[i]] = 1;
    for (size_t d = 0; d < D; ++d) emit_doc(docs[d], is_val[d] ? val : train);
    rep.val_documents = k;
  } else {
    // Fewer than 10 documents: encoded up front, since the split needs the total.
    std::vector<std::vector<uint32_t>> encoded;
    uint64_t total = 0;
    for (auto& d : docs) {
      encoded.push_back(tok.encode(d));
      total += encoded.back().size() + 1;
      std::string().swap(d);
    }
    const auto n_val = static_cast<uint64_t>(std::floor(val_fraction * static_cast<double>(total)));
    const uint64_t n_train = total - n_val;
    uint64_t pos = 0;
    for (const auto& e : encoded) {
      for (uint32_t t : e) (pos++ < n_train ? train : val).push(t);
      (pos++ < n_train ? train : val).push(tok.end_of_text());
    }
  }
  train.flush();
  val.flush();
  staged.commit({&rep.train_files, &rep.val_files});
  rep.train_tokens = train.total();
  rep.val_tokens = val.total();
  return rep;
}

}  // namespace ft
