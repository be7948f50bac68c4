// SentencePiece tokenizer: training (long lines kept), exact round trips of English and
// Chinese, byte fallback, both model types, refused files, and prepare's tokenizer record.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "core/rng.h"
#include "data/prepare.h"
#include "data/sentencepiece_tokenizer.h"
#include "data/token_shard.h"
#include "data/tokenizer.h"
#include "test_util.h"

namespace ft {
namespace {

using test::expect_user_error;
using test::TempDir;

// A few hundred lines of English and Chinese, and one line over 10 kB whose Cyrillic
// letters appear nowhere else: they can only be learned if that line is not skipped.
std::string mixed_corpus() {
  const std::vector<std::string> en = {"the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog",
                                       "training", "language", "models", "on", "small", "machines", "is", "fun"};
  const std::vector<std::string> zh = {"我们", "今天", "学习", "中文", "和", "英文", "的", "分词", "模型",
                                       "这个", "方法", "很", "好用", "数据", "训练"};
  Rng rng(7);
  auto pick = [&](const std::vector<std::string>& v) { return v[rng.next_u64() % v.size()]; };
  std::string text;
  for (int i = 0; i < 300; ++i) {
    const int n = 4 + static_cast<int>(rng.next_u64() % 12);
    for (int w = 0; w < n; ++w) {
      if (i % 2) text += (w ? " " : "") + pick(en);
      else text += pick(zh);
    }
    text += i % 2 ? ".\n" : "。\n";
  }
  for (int w = 0; w < 800; ++w) text += "zebracorn жук ";
  text += "\n";
  return text;
}

struct Trained {
  std::string dir;
  SentencePieceTrainReport report;
};

Trained train(const TempDir& tmp, const std::string& type, int vocab = 400) {
  test::write_bytes(tmp.file("corpus.txt"), mixed_corpus());
  SentencePieceTrainOptions opt;
  opt.inputs = {tmp.file("corpus.txt")};
  opt.vocab_size = vocab;
  opt.model_type = type;
  opt.out_dir = tmp.file("tok_" + type);
  return {opt.out_dir, train_sentencepiece(opt)};
}

const std::vector<std::string> kTexts = {
    "the quick brown fox jumps over a lazy dog",
    "我们今天学习中文的分词模型。",
    " leading space, two  spaces\tand a tab\nand new lines\n\n",
    "mixed 中文 and English: 训练 language models 很好用!",
    "unseen: emoji 🦊🚀, accents éü, symbols ∑∫ and 𝔘 (4-byte)",
};

TEST(SentencePiece, TrainsBothModelTypesAndRoundTripsExactly) {
  TempDir tmp;
  for (const std::string type : {"unigram", "bpe"}) {
    SCOPED_TRACE(type);
    const Trained t = train(tmp, type);
    EXPECT_EQ(t.report.vocab_size, 400u);
    EXPECT_EQ(t.report.lines, 301u);
    EXPECT_EQ(t.report.split_lines, 1u);  // the 12 kB line, cut into pieces, not skipped
    ASSERT_TRUE(std::filesystem::exists(t.dir + "/tokenizer.model"));
    const auto rec = read_tokenizer_record(t.dir);
    ASSERT_TRUE(rec.has_value());
    EXPECT_EQ(rec->vocab_size, 400u);
    EXPECT_EQ(rec->model_type, type);
    const SentencePieceTokenizer tok(t.dir + "/tokenizer.model", "--tokenizer");
    EXPECT_EQ(tok.vocab_size(), 400u);
    EXPECT_EQ(tok.identity(), rec->identity);
    EXPECT_EQ(tok.identity(), t.report.identity);
    for (const auto& text : kTexts) {
      const std::vector<uint32_t> ids = tok.encode(text);
      for (uint32_t id : ids) EXPECT_LT(id, tok.vocab_size());
      EXPECT_EQ(tok.decode(ids), text);
    }
    // Subwords, not bytes: the common words take fewer tokens than characters.
    EXPECT_LT(tok.encode(kTexts[0]).size(), kTexts[0].size() / 2);
    // Only the long line has "ж": one piece (not its two UTF-8 bytes by byte fallback)
    // shows that the line was trained on.
    EXPECT_EQ(tok.encode("ж").size(), 1u);
    // The end-of-text token separates documents and decodes to the visible marker.
    std::vector<uint32_t> two = tok.encode("a");
    two.push_back(tok.end_of_text());
    EXPECT_EQ(tok.decode(two), "a" + std::string(kEndOfTextMarker));
    EXPECT_EQ(tok.decode(std::vector<uint32_t>{tok.vocab_size() + 3}), "<|403|>");
  }
}

TEST(SentencePiece, ByteFallbackRoundTripsUnseenCharacters) {
  TempDir tmp;
  const Trained t = train(tmp, "unigram");
  const SentencePieceTokenizer tok(t.dir + "/tokenizer.model", "--tokenizer");
  const std::string emoji = "🦊";  // 4 UTF-8 bytes, never in the corpus
  const std::vector<uint32_t> ids = tok.encode(emoji);
  EXPECT_EQ(ids.size(), 4u);  // one byte piece each
  EXPECT_EQ(tok.decode(ids), emoji);
  const std::string many = "🤖🦊 hello 😀 世界 ∑";
  EXPECT_EQ(tok.decode(tok.encode(many)), many);
}

TEST(SentencePiece, LongDocumentsEncodeInPiecesLikeOneCall) {
  TempDir tmp;
  const Trained t = train(tmp, "bpe");
  const SentencePieceTokenizer tok(t.dir + "/tokenizer.model", "--tokenizer");
  const std::string doc = mixed_corpus() + mixed_corpus() + mixed_corpus();  // > 64 KiB: several pieces
  ASSERT_GT(doc.size(), 64u << 10);
  EXPECT_EQ(tok.decode(tok.encode(doc)), doc);
}

TEST(SentencePiece, RefusesFilesThatAreNotModels) {
  TempDir tmp;
  test::write_bytes(tmp.file("bad.model"), "this is not a sentencepiece model\n");
  expect_user_error([&] { SentencePieceTokenizer(tmp.file("bad.model"), "--tokenizer"); },
                    {tmp.file("bad.model"), "not a SentencePiece model", "--tokenizer"});
  test::write_bytes(tmp.file("empty.model"), "");
  expect_user_error([&] { SentencePieceTokenizer(tmp.file("empty.model"), "--tokenizer"); },
                    {tmp.file("empty.model"), "empty"});
  expect_user_error([&] { load_tokenizer(tmp.file("missing.model"), "--tokenizer"); },
                    {tmp.file("missing.model"), "--tokenizer"});
  expect_user_error([&] { load_tokenizer(tmp.str(), "--tokenizer"); }, {"tokenizer.model", "--tokenizer"});
  // A truncated real model.
  const Trained t = train(tmp, "unigram");
  const std::string bytes = test::read_bytes(t.dir + "/tokenizer.model");
  test::write_bytes(tmp.file("cut.model"), bytes.substr(0, bytes.size() / 2));
  expect_user_error([&] { SentencePieceTokenizer(tmp.file("cut.model"), "--tokenizer"); }, {tmp.file("cut.model")});
}

TEST(SentencePiece, TrainRefusesBadOptions) {
  TempDir tmp;
  test::write_bytes(tmp.file("c.txt"), mixed_corpus());
  SentencePieceTrainOptions opt;
  opt.inputs = {tmp.file("c.txt")};
  opt.out_dir = tmp.file("out");
  opt.vocab_size = 100;
  expect_user_error([&] { train_sentencepiece(opt); }, {"--vocab-size 100"});
  opt.vocab_size = 400;
  opt.model_type = "word2vec";
  expect_user_error([&] { train_sentencepiece(opt); }, {"--model-type word2vec"});
  opt.model_type = "bpe";
  opt.inputs = {tmp.file("nope.txt")};
  expect_user_error([&] { train_sentencepiece(opt); }, {"--input", tmp.file("nope.txt")});
}

TEST(Tokenizer, FirstInvalidUtf8FollowsRfc3629) {
  const size_t none = std::string_view::npos;
  EXPECT_EQ(first_invalid_utf8(""), none);
  EXPECT_EQ(first_invalid_utf8("plain ascii\n\t"), none);
  EXPECT_EQ(first_invalid_utf8("caf\xC3\xA9 \xE4\xB8\xAD \xF0\x9F\x98\x80 \xF4\x8F\xBF\xBF"), none);  // é 中 😀 U+10FFFF
  EXPECT_EQ(first_invalid_utf8("caf\xE9 latin-1"), 3u);
  EXPECT_EQ(first_invalid_utf8(std::string_view("a\0b", 3)), none);              // NUL is UTF-8
  EXPECT_EQ(first_invalid_utf8("x\xC0\x80"), 1u);                                // overlong NUL
  EXPECT_EQ(first_invalid_utf8("x\xE0\x80\x80"), 1u);                           // overlong 3-byte
  EXPECT_EQ(first_invalid_utf8("x\xED\xA0\x80"), 1u);                           // a surrogate
  EXPECT_EQ(first_invalid_utf8("x\xF4\x90\x80\x80"), 1u);                      // past U+10FFFF
  EXPECT_EQ(first_invalid_utf8("ok\xE4\xB8"), 2u);                               // cut short
  EXPECT_EQ(first_invalid_utf8("ok\xE4\x41\x80"), 2u);                          // a continuation missing
  EXPECT_EQ(first_invalid_utf8("\x80"), 0u);                                      // a lone continuation
  EXPECT_EQ(describe_byte_at("ab\ncd\xE9", 5, 100, 7), "byte 0xE9 at offset 105 (line 9)");
}

TEST(Tokenizer, ByteTokenizerBehindTheInterface) {
  const std::unique_ptr<Tokenizer> tok = load_tokenizer("", "--tokenizer");
  EXPECT_EQ(tok->kind(), "byte");
  EXPECT_EQ(tok->identity(), "byte257");
  EXPECT_EQ(tok->vocab_size(), 257u);
  EXPECT_EQ(tok->end_of_text(), 256u);
  EXPECT_EQ(tok->decode(tok->encode("héllo")), "héllo");
}

TEST(Tokenizer, PrepareRecordsTheTokenizerBesideTheShards) {
  TempDir tmp;
  const Trained t = train(tmp, "unigram");
  const std::unique_ptr<Tokenizer> tok = load_tokenizer(t.dir, "--tokenizer");
  std::vector<std::string> docs;
  for (int d = 0; d < 12; ++d) {
    docs.push_back(tmp.file("doc" + std::to_string(d) + ".txt"));
    test::write_bytes(docs.back(), kTexts[static_cast<size_t>(d) % kTexts.size()] + " 文档 " + std::to_string(d));
  }
  const std::string out = tmp.file("data");
  const PrepareReport rep = prepare_text(docs, out, 0.2, 0, kDefaultMaxShardTokens, tok.get());
  const auto rec = read_tokenizer_record(out);
  ASSERT_TRUE(rec.has_value());
  EXPECT_EQ(rec->identity, tok->identity());
  EXPECT_EQ(rec->vocab_size, 400u);
  EXPECT_EQ(rec->model_type, "unigram");
  EXPECT_EQ(test::read_bytes(rec->model_path), test::read_bytes(t.dir + "/tokenizer.model"));
  // The shards hold the documents, each ended by </s>, and decode back to them exactly.
  std::vector<uint32_t> ids;
  for (const auto& f : rep.train_files) {
    TokenShard s(f);
    EXPECT_EQ(s.token_bytes(), 2);  // the llm.c format, unchanged
    for (size_t i = 0; i < s.size(); ++i) ids.push_back(s.token(i));
  }
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids.back(), tok->end_of_text());
  ids.pop_back();
  const std::string text = tok->decode(ids);
  EXPECT_NE(text.find(" 文档 "), std::string::npos);
  EXPECT_EQ(rep.documents, 12u);
  // A model replaced after the shards were made is refused, naming both.
  const Trained b = train(tmp, "bpe");
  std::filesystem::copy_file(b.dir + "/tokenizer.model", out + "/tokenizer.model",
                             std::filesystem::copy_options::overwrite_existing);
  expect_user_error([&] { read_tokenizer_record(out); }, {"tokenizer.model", rec->identity});
  // Byte shards in the same folder drop the record.
  prepare_text(docs, out, 0.2, 0);
  EXPECT_FALSE(read_tokenizer_record(out).has_value());
}

}  // namespace
}  // namespace ft
