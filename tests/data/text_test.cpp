// Tokenizer, prepare_text and builtin corpus tests.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <sstream>
#include <vector>

#include "data/builtin_corpus.h"
#include "data/dataset.h"
#include "data/prepare.h"
#include "data/token_shard.h"
#include "data/tokenizer.h"
#include "test_util.h"

namespace ft {
namespace {

using test::expect_user_error;
using test::TempDir;

TEST(ByteTokenizer, RoundTrip) {
  ByteTokenizer tok;
  using namespace std::string_literals;
  std::string text = "Hello, world!\n\xC3\xA9\x00\xFF end"s;
  text.push_back('\0');
  const auto ids = tok.encode(text);
  ASSERT_EQ(ids.size(), text.size());
  EXPECT_EQ(ids[0], uint32_t('H'));
  for (uint32_t id : ids) EXPECT_LT(id, 256u);
  EXPECT_EQ(tok.decode(ids), text);
  EXPECT_EQ(tok.vocab_size(), 257u);
  std::vector<uint32_t> with_eot = {'a', ByteTokenizer::kEndOfText, 'b', 300};
  EXPECT_EQ(tok.decode(with_eot), "a\n<|endoftext|>\nb<|300|>");
}

TEST(Prepare, EndToEndTailSplit) {
  TempDir dir;
  test::write_bytes(dir.file("a.txt"), std::string(60, 'a'));
  test::write_bytes(dir.file("b.txt"), std::string(39, 'b'));
  const auto out = dir.file("out");
  const auto rep = prepare_text({dir.file("a.txt"), dir.file("b.txt")}, out, 0.1, 0);
  EXPECT_EQ(rep.documents, 2u);
  EXPECT_FALSE(rep.split_by_documents);
  EXPECT_EQ(rep.train_tokens + rep.val_tokens, 101u);  // 99 bytes + 2 EOT
  EXPECT_EQ(rep.val_tokens, 10u);
  ASSERT_EQ(rep.train_files.size(), 1u);
  ASSERT_EQ(rep.val_files.size(), 1u);
  EXPECT_EQ(rep.train_files[0], out + "/train_000000.bin");
  EXPECT_EQ(rep.val_files[0], out + "/val_000000.bin");
  TokenShard tr(rep.train_files[0]), va(rep.val_files[0]);
  ASSERT_EQ(tr.size(), 91u);
  EXPECT_EQ(tr.token(0), uint32_t('a'));
  EXPECT_EQ(tr.token(60), ByteTokenizer::kEndOfText);
  EXPECT_EQ(va.token(9), ByteTokenizer::kEndOfText);
  EXPECT_EQ(va.token(0), uint32_t('b'));
  // The output folder feeds resolve_split and TokenDataset directly.
  EXPECT_EQ(resolve_split(out, "train").size(), 1u);
  EXPECT_EQ(resolve_split(out, "val").size(), 1u);
  TokenDataset ds(resolve_split(out, "train"), 8, ByteTokenizer::kVocabSize, "--data-path");
  EXPECT_EQ(ds.num_samples(), 90u / 8u);
}

TEST(Prepare, DocumentSplitAndShardNumbering) {
  TempDir dir;
  std::vector<std::string> inputs;
  for (int i = 0; i < 20; ++i) {
    inputs.push_back(dir.file("d" + std::to_string(i) + ".txt"));
    test::write_bytes(inputs.back(), std::string(9, char('A' + i)));  // 10 tokens with EOT
  }
  const auto out = dir.file("out");
  // Stale shard of an earlier run must disappear.
  std::filesystem::create_directories(out);
  test::write_bytes(out + "/train_000009.bin", "stale");
  const auto rep = prepare_text(inputs, out, 0.1, 123, /*max_shard_tokens=*/64);
  EXPECT_TRUE(rep.split_by_documents);
  EXPECT_EQ(rep.val_documents, 2u);
  EXPECT_EQ(rep.val_tokens, 20u);
  EXPECT_EQ(rep.train_tokens, 180u);
  ASSERT_EQ(rep.train_files.size(), 3u);  // 64 + 64 + 52
  EXPECT_EQ(rep.train_files[2], out + "/train_000002.bin");
  EXPECT_FALSE(std::filesystem::exists(out + "/train_000009.bin"));
  EXPECT_EQ(TokenShard(rep.train_files[2]).size(), 52u);
  // Same seed, same split.
  const auto rep2 = prepare_text(inputs, dir.file("out2"), 0.1, 123, 64);
  TokenShard v1(rep.val_files[0]), v2(rep2.val_files[0]);
  EXPECT_EQ(v1.token(0), v2.token(0));
  EXPECT_EQ(v1.token(10), v2.token(10));
}

TEST(Prepare, BadInputs) {
  TempDir dir;
  const auto missing = dir.file("missing.txt");
  expect_user_error([&] { prepare_text({missing}, dir.file("out"), 0.1, 0); },
                    {missing, "does not exist"});
  const auto empty = dir.file("empty.txt");
  test::write_bytes(empty, "");
  expect_user_error([&] { prepare_text({empty}, dir.file("out"), 0.1, 0); }, {empty, "empty"});
  test::write_bytes(dir.file("ok.txt"), "text");
  expect_user_error([&] { prepare_text({dir.file("ok.txt")}, dir.file("out"), 1.0, 0); },
                    {"--val-fraction"});
}

double byte_entropy_bits(const std::string& s) {
  double counts[256] = {};
  for (unsigned char c : s) counts[c] += 1;
  double h = 0;
  for (double c : counts)
    if (c > 0) h -= c / s.size() * std::log2(c / s.size());
  return h;
}

TEST(BuiltinCorpus, DeterministicAndStructured) {
  const std::string a = builtin_corpus(200'000, 1);
  EXPECT_EQ(a, builtin_corpus(200'000, 1));
  EXPECT_NE(a, builtin_corpus(200'000, 2));
  EXPECT_GE(a.size(), 200'000u);
  EXPECT_LT(a.size(), 202'000u);
  const double h = byte_entropy_bits(a);
  EXPECT_GT(h, 3.0);
  EXPECT_LT(h, 5.0);
  std::istringstream in(a);
  std::string prev, w;
  std::set<std::string> words, bigrams;
  while (in >> w) {
    words.insert(w);
    if (!prev.empty()) bigrams.insert(prev + " " + w);
    prev = w;
  }
  EXPECT_GT(words.size(), 100u);
  EXPECT_GT(bigrams.size(), 500u);
  // Plain printable text: the byte tokenizer's vocabulary suffices and no EOT is produced.
  for (unsigned char c : a) EXPECT_TRUE(c == '\n' || (c >= 32 && c < 127));
}

}  // namespace
}  // namespace ft
