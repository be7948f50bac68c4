// `fittrain tokenizer train`, `prepare --tokenizer`, training on its shards and `sample`
// decoding with the tokenizer the checkpoint records, as a user runs them.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "cli/cli_util.h"
#include "train/model_io.h"

namespace ft::testing {
namespace {

namespace fs = std::filesystem;

// English and Chinese lines, and one line over 10 kB.
std::string corpus_lines(int n, int salt) {
  const char* en[] = {"the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "models", "learn"};
  const char* zh[] = {"我们", "今天", "学习", "中文", "和", "英文", "的", "分词", "模型", "数据", "训练"};
  std::string text;
  unsigned s = 12345u + static_cast<unsigned>(salt);
  auto next = [&] { return (s = s * 1103515245u + 12345u) >> 16; };
  for (int i = 0; i < n; ++i) {
    for (int w = 0; w < 8; ++w) text += i % 2 ? std::string(w ? " " : "") + en[next() % 11] : zh[next() % 11];
    text += "\n";
  }
  return text;
}

struct Prepared {
  std::string dir, tok, data;
};

// A tokenizer of 320 pieces and a data folder of its shards.
Prepared prepare(const std::string& name) {
  Prepared p;
  p.dir = temp_dir(name);
  p.tok = p.dir + "/tok";
  p.data = p.dir + "/data";
  std::string corpus = corpus_lines(300, 0);
  for (int w = 0; w < 1200; ++w) corpus += "longline ";
  corpus += "\n";
  {
    std::ofstream(p.dir + "/corpus.txt", std::ios::binary) << corpus;
  }
  CmdResult r = run_fittrain("tokenizer train --input " + p.dir + "/corpus.txt --vocab-size 320 --out " + p.tok, 60);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("1 line(s) longer than"), std::string::npos) << r.output;
  std::string docs;
  for (int d = 0; d < 12; ++d) {
    const std::string f = p.dir + "/doc" + std::to_string(d) + ".txt";
    std::ofstream(f, std::ios::binary) << corpus_lines(40, d + 1);
    docs += " " + f;
  }
  r = run_fittrain("prepare --input" + docs + " --out " + p.data + " --tokenizer " + p.tok, 60);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("--vocab-size 320"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(p.data + "/tokenizer.json"));
  EXPECT_TRUE(fs::exists(p.data + "/tokenizer.model"));
  return p;
}

// The tests run on the CPU everywhere (cli_util.h hides the GPUs); head size 32 all the same.
const std::string kModel = " --n-layer 1 --n-head 1 --n-embd 32 --seq-len 32 --global-batch-size 4 --eval-batches 2";

TEST(TokenizerE2E, TrainPrepareTrainSample) {
  const Prepared p = prepare("tokenizer_e2e");
  const std::string res = p.dir + "/results";
  CmdResult r = run_fittrain("train --data-path " + p.data + " --vocab-size 320 --max-steps 3" + kModel +
                                 " --results-dir " + res, 60);
  ASSERT_EQ(r.status, 0) << r.output;
  // The checkpoint records the tokenizer: identity, size and where the model file is.
  const std::string ckpt = find_checkpoint("auto", res, true);
  const auto rec = checkpoint_tokenizer(ckpt);
  ASSERT_TRUE(rec.has_value());
  EXPECT_EQ(rec->vocab_size, 320u);
  EXPECT_EQ(rec->kind, "sentencepiece");
  EXPECT_EQ(fs::path(rec->model_path), fs::absolute(p.data + "/tokenizer.model"));

  r = run_fittrain("sample --results-dir " + res + " --prompt '我们 the' --max-new-tokens 16 --temperature 0", 60);
  ASSERT_EQ(r.status, 0) << r.output;
  ASSERT_EQ(r.output.rfind("我们 the", 0), 0u) << r.output;
  EXPECT_GT(r.output.size(), std::string("我们 the\n").size()) << r.output;
  EXPECT_EQ(r.output.find("<|"), std::string::npos) << r.output;  // no id outside the tokenizer

  // The model file gone: a clear error, and --tokenizer points to another copy of it.
  fs::rename(p.data + "/tokenizer.model", p.dir + "/moved.model");
  r = run_fittrain("sample --results-dir " + res + " --max-new-tokens 4", 60);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("no longer exists"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--tokenizer"), std::string::npos) << r.output;
  r = run_fittrain("sample --results-dir " + res + " --max-new-tokens 4 --tokenizer " + p.dir + "/moved.model", 60);
  EXPECT_EQ(r.status, 0) << r.output;
  // Another tokenizer in its place: refused, naming both identities.
  std::ofstream(p.dir + "/other.txt", std::ios::binary) << corpus_lines(200, 99);
  r = run_fittrain("tokenizer train --input " + p.dir + "/other.txt --vocab-size 360 --model-type bpe --out " + p.dir +
                       "/other", 60);
  ASSERT_EQ(r.status, 0) << r.output;
  fs::copy_file(p.dir + "/other/tokenizer.model", p.data + "/tokenizer.model");
  r = run_fittrain("sample --results-dir " + res + " --max-new-tokens 4", 60);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find(rec->identity), std::string::npos) << r.output;
}

// Nothing replaces or removes a tokenizer already saved in a folder without --overwrite: byte
// shards prepared into a `tokenizer train` folder removed its record, shards of another
// tokenizer replaced its model, and `tokenizer train` over prepared shards paired them with
// other pieces.
TEST(TokenizerE2E, ATokenizerAlreadyInAFolderIsReplacedOnlyWhenAsked) {
  const Prepared p = prepare("tokenizer_e2e_keep");
  const std::string model = read_file(p.tok + "/tokenizer.model"), record = read_file(p.tok + "/tokenizer.json");
  const std::string doc = p.dir + "/doc0.txt";
  CmdResult r = run_fittrain("prepare --input " + doc + " --out " + p.tok, 60);  // byte shards
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("holds a tokenizer's record (tokenizer.json)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--tokenizer " + p.tok), std::string::npos) << r.output;
  std::ofstream(p.dir + "/other.txt", std::ios::binary) << corpus_lines(200, 7);
  r = run_fittrain("tokenizer train --input " + p.dir + "/other.txt --vocab-size 360 --model-type bpe --out " + p.dir + "/other", 60);
  ASSERT_EQ(r.status, 0) << r.output;
  r = run_fittrain("prepare --input " + doc + " --out " + p.tok + " --tokenizer " + p.dir + "/other", 60);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("holds tokenizer.model of tokenizer"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--overwrite"), std::string::npos) << r.output;
  r = run_fittrain("tokenizer train --input " + p.dir + "/other.txt --vocab-size 360 --model-type bpe --out " + p.tok, 60);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("already holds tokenizer.model"), std::string::npos) << r.output;
  r = run_fittrain("tokenizer train --input " + p.dir + "/other.txt --vocab-size 360 --model-type bpe --out " + p.data + " --overwrite",
                   60);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("holds prepared shards"), std::string::npos) << r.output;
  EXPECT_EQ(read_file(p.tok + "/tokenizer.model"), model);
  EXPECT_EQ(read_file(p.tok + "/tokenizer.json"), record);
  EXPECT_FALSE(fs::exists(p.tok + "/train_000000.bin"));
  // Its own tokenizer into its own folder is what a user does: allowed, the model kept.
  r = run_fittrain("prepare --input " + doc + " --out " + p.tok + " --tokenizer " + p.tok, 60);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(read_file(p.tok + "/tokenizer.model"), model);
  EXPECT_TRUE(fs::exists(p.tok + "/train_000000.bin"));
  // A folder in the way of the tokenizer's files is found before the earlier shards go.
  for (const char* name : {"tokenizer.model", "tokenizer.json"}) {
    const std::string blocked = p.dir + "/blocked_" + name;
    fs::create_directories(blocked + "/" + name);
    std::ofstream(blocked + "/train_000000.bin", std::ios::binary) << "old";
    r = run_fittrain("prepare --input " + doc + " --out " + blocked + " --tokenizer " + p.tok + " --overwrite", 60);
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_NE(r.output.find(blocked + "/" + name + ": is in the way of the prepared file of that name"),
              std::string::npos) << r.output;
    EXPECT_NE(r.output.find("nothing was replaced"), std::string::npos) << r.output;
    EXPECT_EQ(read_file(blocked + "/train_000000.bin"), "old");
    EXPECT_FALSE(fs::exists(blocked + "/.prepare-staging"));
  }
  // Asked for: replaced.
  r = run_fittrain("tokenizer train --input " + p.dir + "/other.txt --vocab-size 360 --model-type bpe --out " + p.dir +
                       "/other --overwrite", 60);
  EXPECT_EQ(r.status, 0) << r.output;
}

// SentencePiece's own refusal of a vocabulary too small for the input's characters names its
// options ("Increase vocab_size or decrease character_coverage with --character_coverage
// option"): relayed with fittrain's flags, which are spelled with dashes.
TEST(TokenizerE2E, SentencePiecesRefusalNamesFittrainsFlags) {
  const std::string d = temp_dir("tokenizer_e2e_flags");
  // Some 70 distinct characters: more than 300 pieces hold beside 259 byte and control pieces.
  std::ofstream(d + "/small.txt") << "The Quick Brown Fox Jumps Over The Lazy Dog!\n"
                                  << "THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG? 0123456789\n"
                                  << "the quick brown fox jumps over the lazy dog: (a), [b], {c}; #1 @2 $3 %4\n";
  const std::string args = "tokenizer train --input " + d + "/small.txt --vocab-size 300 --out " + d + "/tok";
  expect_error(args, {"SentencePiece failed", "Increase --vocab-size", "--character-coverage"});
  const CmdResult r = run_fittrain(args);
  for (const char* theirs : {"--character_coverage", "character_coverage", "vocab_size"})
    EXPECT_EQ(r.output.find(theirs), std::string::npos) << theirs << " in: " << r.output;
  EXPECT_FALSE(fs::exists(d + "/tok/tokenizer.model"));
  // Values SentencePiece refuses are refused by fittrain first, in its own words.
  expect_error(args + " --character-coverage 0.9", {"--character-coverage 0.9: must be in [0.98, 1]"});
  expect_error(args + " --sample-sentences 50", {"--sample-sentences 50: must be more than 100"});
}

// Text that is not UTF-8 (Latin-1) or not text at all: `tokenizer train` and a SentencePiece
// `prepare` refuse it naming the file, the byte and where it is (SentencePiece failed with an
// internal error on binary input, and prepare turned each such byte into U+FFFD's pieces);
// the byte tokenizer keeps every byte and prepares it.
TEST(TokenizerE2E, TextThatIsNotUtf8IsRefusedNamingTheByte) {
  const Prepared p = prepare("tokenizer_e2e_utf8");
  const std::string latin1 = p.dir + "/latin1.txt", bin = p.dir + "/bin.dat";
  std::ofstream(latin1, std::ios::binary) << "the first line\nun caf\xE9 noir\n";
  std::ofstream(bin, std::ios::binary) << std::string("\x7F" "ELF\x02\x01\x00\x00\xFF\xFE", 10) << "\n";
  expect_error("tokenizer train --input " + latin1 + " --vocab-size 300 --out " + p.dir + "/t1",
               {"--input " + latin1 + ": not UTF-8 text (byte 0xE9 at offset 21 (line 2))", "iconv"});
  expect_error("tokenizer train --input " + bin + " --vocab-size 300 --out " + p.dir + "/t2",
               {"--input " + bin + ": not text (byte 0x00 at offset 6 (line 1))", "no NUL bytes"});
  expect_error("prepare --input " + latin1 + " --out " + p.dir + "/d1 --tokenizer " + p.tok,
               {latin1 + ": not UTF-8 text (byte 0xE9 at offset 21 (line 2))", "without --tokenizer"});
  EXPECT_EQ(run_fittrain("prepare --input " + latin1 + " --out " + p.dir + "/d2").status, 0);
  // A NUL is UTF-8 (JSON's \u0000): a SentencePiece model with byte fallback keeps it (a pair
  // holding one was refused as "not UTF-8", with iconv's advice, which cannot remove it).
  const std::string nul = p.dir + "/nul.jsonl";
  std::ofstream(nul) << "{\"prompt\": \"q\\u0000x\", \"response\": \"ok\"}\n{\"prompt\": \"a\", \"response\": \"b\"}\n";
  const CmdResult with_nul = run_fittrain("prepare --input " + nul + " --out " + p.dir + "/d5 --tokenizer " + p.tok);
  EXPECT_EQ(with_nul.status, 0) << with_nul.output;
  // prompt/response pairs too (text pairs: JSON's parser already refuses such bytes)
  const std::string pairs = p.dir + "/pairs.txt";
  std::ofstream(pairs, std::ios::binary) << "hello\tworld\nun caf\xE9\tnoir\n";
  expect_error("prepare --pairs --input " + pairs + " --out " + p.dir + "/d3 --tokenizer " + p.tok,
               {pairs + ":2: the prompt is not UTF-8 text (byte 0xE9 at offset 6 of it)"});
  EXPECT_FALSE(fs::exists(p.dir + "/d3"));
  EXPECT_EQ(run_fittrain("prepare --pairs --input " + pairs + " --out " + p.dir + "/d4").status, 0);
}

// Validation data of another tokenizer than the training data's is refused naming
// --val-data-path (it named --data-path, or --results-dir for the built-in corpus).
TEST(TokenizerE2E, ValidationDataOfAnotherTokenizerNamesValDataPath) {
  const Prepared p = prepare("tokenizer_e2e_mix");
  std::ofstream(p.dir + "/bytes.txt") << corpus_lines(40, 9);
  ASSERT_EQ(run_fittrain("prepare --input " + p.dir + "/bytes.txt --out " + p.dir + "/bytes").status, 0);
  for (const std::string& train : {" --data-path " + p.dir + "/bytes", std::string()})
    expect_error("train" + train + " --val-data-path " + p.data + " --vocab-size 400 --max-steps 1" + kModel +
                     " --results-dir " + p.dir + "/r" + std::to_string(train.size()),
                 {"--val-data-path: the data mixes tokenizers", "sentencepiece"});
}

TEST(TokenizerE2E, TooSmallVocabSizeIsRefused) {
  const Prepared p = prepare("tokenizer_e2e_small");
  // Default tiny model: the byte tokenizer's 257 < 320.
  CmdResult r = run_fittrain("train --data-path " + p.data + " --max-steps 1" + kModel + " --results-dir " + p.dir +
                                 "/r1", 60);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--vocab-size 320"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("257"), std::string::npos) << r.output;
  r = run_fittrain("train --data-path " + p.data + " --vocab-size 300 --max-steps 1" + kModel + " --results-dir " +
                       p.dir + "/r2", 60);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--vocab-size"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(p.data), std::string::npos) << r.output;
}

}  // namespace
}  // namespace ft::testing
