// Corpus BLEU equal to sacrebleu 2.x with its defaults (train/bleu.h): hand-computed corpora,
// sacrebleu's README example, the 13a and zh tokenizers' quirks, and a generated fixture
// (scripts/check_bleu_vs_sacrebleu.py) compared with sacrebleu's own numbers.
#include "train/bleu.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"

namespace ft {
namespace {

using Strings = std::vector<std::string>;

BleuResult bleu(const Strings& hyps, const Strings& refs, BleuTokenize tok = BleuTokenize::t13a) {
  return corpus_bleu(hyps, refs, tok);
}

// ---- BLEU on hand-computed corpora ----------------------------------------------------------

// Corpus BLEU is a function of counts summed over segments: the counts of two parts of a
// corpus (two ranks' parts of an evaluation), added, score the whole corpus exactly.
TEST(Bleu, CountsOfPartsScoreTheWhole) {
  const Strings hyps = {"the cat sat on the mat", "a dog ran in the park today", "hello world",
                        "the quick brown fox jumps", "one two three four five six"};
  const Strings refs = {"the cat sat on a mat", "the dog ran in the park", "hello there world",
                        "a quick brown fox jumped over", "one two three four five"};
  const BleuResult whole = corpus_bleu(hyps, refs);
  const BleuResult a = corpus_bleu(Strings(hyps.begin(), hyps.begin() + 2), Strings(refs.begin(), refs.begin() + 2));
  const BleuResult b = corpus_bleu(Strings(hyps.begin() + 2, hyps.end()), Strings(refs.begin() + 2, refs.end()));
  std::array<int64_t, 4> correct{}, total{};
  for (int n = 0; n < 4; ++n) correct[n] = a.correct[n] + b.correct[n], total[n] = a.total[n] + b.total[n];
  const BleuResult sum = bleu_from_counts(correct, total, a.hyp_len + b.hyp_len, a.ref_len + b.ref_len);
  EXPECT_GT(whole.score, 10.0);
  EXPECT_NE(a.score, whole.score);
  EXPECT_EQ(sum.score, whole.score);
  EXPECT_EQ(sum.bp, whole.bp);
  EXPECT_EQ(sum.correct, whole.correct);
  EXPECT_EQ(sum.total, whole.total);
}

TEST(Bleu, PerfectMatchIs100) {
  const BleuResult r = bleu({"The cat sat on the mat.", "Hello there, world!"},
                            {"The cat sat on the mat.", "Hello there, world!"});
  EXPECT_DOUBLE_EQ(r.score, 100.0);
  EXPECT_DOUBLE_EQ(r.bp, 1.0);
  EXPECT_DOUBLE_EQ(r.ratio, 1.0);
  EXPECT_EQ(r.hyp_len, 12);  // "The cat sat on the mat ." + "Hello there , world !"
  EXPECT_EQ(r.ref_len, 12);
  EXPECT_EQ(r.correct, (std::array<int64_t, 4>{12, 10, 8, 6}));
  EXPECT_EQ(r.total, (std::array<int64_t, 4>{12, 10, 8, 6}));
  for (double p : r.precisions) EXPECT_DOUBLE_EQ(p, 100.0);
}

// sacrebleu returns 0 (precisions 0) as soon as no order has a match, before smoothing: a
// corpus with no overlap is 0, not a small smoothed number.
TEST(Bleu, NoOverlapIsZero) {
  const BleuResult r = bleu({"alpha beta gamma delta"}, {"one two three four five"});
  EXPECT_EQ(r.score, 0.0);
  EXPECT_EQ(r.correct, (std::array<int64_t, 4>{0, 0, 0, 0}));
  EXPECT_EQ(r.total, (std::array<int64_t, 4>{4, 3, 2, 1}));
  for (double p : r.precisions) EXPECT_EQ(p, 0.0);
  EXPECT_DOUBLE_EQ(r.bp, std::exp(1.0 - 5.0 / 4.0));  // the BP is still reported
}

// Unigrams all match, nothing longer: 'exp' smoothing gives the k-th empty order
// 100 / (2^k * total).
TEST(Bleu, ExpSmoothingOfEmptyOrders) {
  const BleuResult r = bleu({"a b c d e"}, {"e d c b a"});
  EXPECT_EQ(r.correct, (std::array<int64_t, 4>{5, 0, 0, 0}));
  EXPECT_EQ(r.total, (std::array<int64_t, 4>{5, 4, 3, 2}));
  EXPECT_DOUBLE_EQ(r.precisions[0], 100.0);
  EXPECT_DOUBLE_EQ(r.precisions[1], 100.0 / (2 * 4));
  EXPECT_DOUBLE_EQ(r.precisions[2], 100.0 / (4 * 3));
  EXPECT_DOUBLE_EQ(r.precisions[3], 100.0 / (8 * 2));
  EXPECT_NEAR(r.score, std::pow(100.0 * 12.5 * (100.0 / 12) * 6.25, 0.25), 1e-12);
  EXPECT_NEAR(r.score, 15.97357760615681, 1e-12);  // sacrebleu 2.6.0
  // The doubling counts only empty orders: a match in between does not reset or advance it.
  const BleuResult s = bleu({"a b c x a b"}, {"a b c y"});
  EXPECT_EQ(s.correct, (std::array<int64_t, 4>{3, 2, 1, 0}));  // a, b, c (clipped); ab, bc; abc
  EXPECT_DOUBLE_EQ(s.precisions[3], 100.0 / (2 * 3));
}

TEST(Bleu, BrevityPenalty) {
  const BleuResult r = bleu({"the cat sat on the"}, {"the cat sat on the mat"});
  for (double p : r.precisions) EXPECT_DOUBLE_EQ(p, 100.0);
  EXPECT_DOUBLE_EQ(r.bp, std::exp(1.0 - 6.0 / 5.0));
  EXPECT_DOUBLE_EQ(r.score, 100.0 * std::exp(1.0 - 6.0 / 5.0));
  EXPECT_DOUBLE_EQ(r.ratio, 5.0 / 6.0);
  // Longer hypotheses are not penalised by BP (only by precision).
  const BleuResult l = bleu({"the cat sat on the mat mat"}, {"the cat sat on the mat"});
  EXPECT_DOUBLE_EQ(l.bp, 1.0);
  EXPECT_DOUBLE_EQ(l.ratio, 7.0 / 6.0);
}

TEST(Bleu, EmptyHypothesis) {
  const BleuResult r = bleu({""}, {"a b c"});
  EXPECT_EQ(r.score, 0.0);
  EXPECT_EQ(r.bp, 0.0);  // sys_len 0 < ref_len: sacrebleu's bp is 0, not exp(-inf) via 1/0
  EXPECT_EQ(r.hyp_len, 0);
  EXPECT_EQ(r.ref_len, 3);
  EXPECT_EQ(r.ratio, 0.0);
  // One empty segment among good ones only shortens the corpus.
  const BleuResult c = bleu({"the cat sat on the mat", "  "}, {"the cat sat on the mat", "hello world"});
  EXPECT_DOUBLE_EQ(c.score, 100.0 * std::exp(1.0 - 8.0 / 6.0));
  // An empty corpus, and empty hypotheses against empty references: 0 with bp 1 (0 < 0 is false).
  EXPECT_EQ(bleu({}, {}).score, 0.0);
  EXPECT_EQ(bleu({}, {}).bp, 1.0);
  EXPECT_EQ(bleu({""}, {""}).bp, 1.0);
}

// An order with no hypothesis n-gram at all (a corpus of short segments) has precision 0,
// which sacrebleu's my_log floors to -9999999999: the score is 0 even for a perfect match.
TEST(Bleu, FewerThanFourTokensScoresZero) {
  const BleuResult r = bleu({"hello world"}, {"hello world"});
  EXPECT_EQ(r.total, (std::array<int64_t, 4>{2, 1, 0, 0}));
  EXPECT_EQ(r.score, 0.0);
  EXPECT_DOUBLE_EQ(r.precisions[0], 100.0);
  EXPECT_DOUBLE_EQ(r.precisions[1], 100.0);
  EXPECT_EQ(r.precisions[2], 0.0);
}

TEST(Bleu, ClippedCounts) {
  const BleuResult r = bleu({"the the the the the the the"}, {"the cat is on the mat"});
  EXPECT_EQ(r.correct[0], 2);
  EXPECT_EQ(r.total[0], 7);
}

// sacrebleu's README: BLEU = 48.53 82.4/50.0/45.5/37.5 (BP = 0.943 ratio = 0.944 hyp_len = 17
// ref_len = 18) with two reference streams.
const Strings kReadmeHyps = {"The dog bit the man.", "It wasn't surprising.",
                             "The man had just bitten him."};
const Strings kReadmeRefs1 = {"The dog bit the man.", "It was not unexpected.",
                              "The man bit him first."};
const Strings kReadmeRefs2 = {"The dog had bit the man.", "No one was surprised.",
                              "The man had bitten the dog."};

TEST(Bleu, SacrebleuReadmeTwoReferences) {
  const std::vector<Strings> streams = {kReadmeRefs1, kReadmeRefs2};
  const BleuResult r = corpus_bleu(kReadmeHyps, streams);
  EXPECT_EQ(r.hyp_len, 17);
  EXPECT_EQ(r.ref_len, 18);  // closest reference lengths 6 (of 6,7), 5 (of 5,5), 7 (of 6,7)
  EXPECT_EQ(r.correct, (std::array<int64_t, 4>{14, 7, 5, 3}));
  EXPECT_EQ(r.total, (std::array<int64_t, 4>{17, 14, 11, 8}));
  EXPECT_NEAR(r.bp, 0.943, 5e-4);
  EXPECT_NEAR(r.ratio, 0.944, 5e-4);
  EXPECT_NEAR(r.score, 48.530827009929865, 1e-9);  // sacrebleu 2.6.0's repr(score)
  EXPECT_EQ(std::round(r.score * 100) / 100, 48.53);
}

// With the first stream alone: lengths 6+5+6 = 17, so no brevity penalty, and matches
// 12/17 ("wasn't", "surprising", "had", "just", "bitten" miss), 6/14, 4/11, 3/8:
// 100 * (12/17 * 6/14 * 4/11 * 3/8)^(1/4) = 45.0675 (sacrebleu: BLEU = 45.07).
TEST(Bleu, SacrebleuReadmeFirstReferenceOnly) {
  const BleuResult r = bleu(kReadmeHyps, kReadmeRefs1);
  EXPECT_EQ(r.correct, (std::array<int64_t, 4>{12, 6, 4, 3}));
  EXPECT_EQ(r.total, (std::array<int64_t, 4>{17, 14, 11, 8}));
  EXPECT_DOUBLE_EQ(r.bp, 1.0);
  EXPECT_NEAR(r.score, 100 * std::pow(12.0 / 17 * 6.0 / 14 * 4.0 / 11 * 3.0 / 8, 0.25), 1e-9);
  EXPECT_NEAR(r.score, 45.06750632106114, 1e-9);  // sacrebleu 2.6.0's repr(score)
}

// Ties between reference lengths go to the shorter one.
TEST(Bleu, ClosestReferenceLengthTiesToShorter) {
  const std::vector<Strings> streams = {{"a b c d e f"}, {"a b c d"}};
  EXPECT_EQ(corpus_bleu(Strings{"a b c d e"}, streams).ref_len, 4);
  const std::vector<Strings> reversed = {{"a b c d"}, {"a b c d e f"}};
  EXPECT_EQ(corpus_bleu(Strings{"a b c d e"}, reversed).ref_len, 4);
}

TEST(Bleu, RejectsMismatchedStreams) {
  EXPECT_THROW(bleu({"a", "b"}, {"a"}), UserError);
  const std::vector<Strings> none;
  EXPECT_THROW(corpus_bleu(Strings{"a"}, none), UserError);
  const std::vector<Strings> ragged = {{"a"}, {"a", "b"}};
  EXPECT_THROW(corpus_bleu(Strings{"a"}, ragged), UserError);
}

TEST(Bleu, TokenizeNoneSplitsOnWhitespaceOnly) {
  EXPECT_EQ(tokenize_none("  a,b \t c.\u00a0d  "), "a,b c. d");
  const BleuResult r = bleu({"The cat, the mat."}, {"The cat , the mat ."}, BleuTokenize::none);
  EXPECT_EQ(r.hyp_len, 4);
  EXPECT_EQ(r.ref_len, 6);
}

// ---- 13a ------------------------------------------------------------------------------------

TEST(Bleu, Tokenize13aPunctuation) {
  EXPECT_EQ(tokenize_13a("Hello, world!"), "Hello , world !");
  EXPECT_EQ(tokenize_13a("It wasn't (really) \"fine\"; ok?"),
            "It wasn't ( really ) \" fine \" ; ok ?");  // the apostrophe is never split
  EXPECT_EQ(tokenize_13a("a/b $5 50% x=y #t @u [1] {x} a_b `c` ~|^*+"),
            "a / b $ 5 50 % x = y # t @ u [ 1 ] { x } a _ b ` c ` ~ | ^ * +");
  EXPECT_EQ(tokenize_13a("wait... what?!"), "wait . . . what ? !");
  EXPECT_EQ(tokenize_13a("  lots \t of\n space  "), "lots of space");
  EXPECT_EQ(tokenize_13a(""), "");
}

TEST(Bleu, Tokenize13aAbbreviationsAndNumbers) {
  EXPECT_EQ(tokenize_13a("The U.S. economy grew 3.5% in 2019."),
            "The U . S . economy grew 3.5 % in 2019 .");
  EXPECT_EQ(tokenize_13a("e.g. this"), "e . g . this");
  // A period or comma stays attached when a digit is on either side.
  EXPECT_EQ(tokenize_13a("It costs 1,000.5 dollars."), "It costs 1,000.5 dollars .");
  EXPECT_EQ(tokenize_13a("a,b 1,a a,1 1,2"), "a , b 1 , a a , 1 1,2");
  // The padding space gives a leading '.' a non-digit left neighbour.
  EXPECT_EQ(tokenize_13a(".5 and 5."), ". 5 and 5 .");
  EXPECT_EQ(tokenize_13a("1.2.3"), "1.2.3");
}

TEST(Bleu, Tokenize13aDashes) {
  EXPECT_EQ(tokenize_13a("well-known state-of-the-art"), "well-known state-of-the-art");
  EXPECT_EQ(tokenize_13a("1990-2000"), "1990 - 2000");  // a dash after a digit is split
  EXPECT_EQ(tokenize_13a("-5 a-5 5-a"), "-5 a-5 5 - a");
  EXPECT_EQ(tokenize_13a("5--6 x--y"), "5 - -6 x--y");
  EXPECT_EQ(tokenize_13a("COVID-19"), "COVID-19");
}

TEST(Bleu, Tokenize13aEntitiesSkippedAndNewlines) {
  EXPECT_EQ(tokenize_13a("&quot;Hi&quot; &amp; &lt;b&gt;"), "\" Hi \" & < b >");
  EXPECT_EQ(tokenize_13a("AT&amp;T"), "AT & T");
  // The replacements run in sequence: &amp;lt; becomes &lt; and then <, but &amp;quot; stays
  // &quot; because &quot; was replaced before &amp;.
  EXPECT_EQ(tokenize_13a("&amp;lt;"), "<");
  EXPECT_EQ(tokenize_13a("&amp;quot;"), "& quot ;");
  EXPECT_EQ(tokenize_13a("&#39; &nbsp;"), "& # 39 ; & nbsp ;");
  // <skipped> is removed before the entities are unescaped.
  EXPECT_EQ(tokenize_13a("a <skipped> b"), "a b");
  EXPECT_EQ(tokenize_13a("&lt;skipped&gt;"), "< skipped >");
  EXPECT_EQ(tokenize_13a("foo-\nbar a\nb"), "foobar a b");
  // corpus_bleu rstrips first, so a trailing "-\n" keeps its dash there.
  EXPECT_EQ(tokenize_13a("foo-\n"), "foo");
  EXPECT_DOUBLE_EQ(bleu({"a b c foo-\n"}, {"a b c foo-"}).score, 100.0);
}

TEST(Bleu, Tokenize13aUnicode) {
  EXPECT_EQ(tokenize_13a("café, naïve."), "café , naïve .");
  EXPECT_EQ(tokenize_13a("\u201cquoted\u201d \u2014 \u20ac5"), "\u201cquoted\u201d \u2014 \u20ac5");
  // Python's whitespace: NBSP, ideographic space, thin space, U+2028, U+0085, U+001F split;
  // the zero-width space U+200B does not.
  EXPECT_EQ(tokenize_13a("a\u00a0b\u3000c\u2009d\u2028e\u0085f\x1fg"), "a b c d e f g");
  EXPECT_EQ(tokenize_13a("a\u200bb"), "a\u200bb");
  EXPECT_EQ(tokenize_13a("über.Straße,"), "über . Straße ,");
}

// ---- zh -------------------------------------------------------------------------------------

TEST(Bleu, TokenizeZhSeparatesChineseCharacters) {
  EXPECT_EQ(tokenize_zh("我爱北京天安门。"), "我 爱 北 京 天 安 门 。");
  EXPECT_EQ(tokenize_zh("我用Python 3.8写代码，it's fun!"),
            "我 用 Python 3.8 写 代 码 ， it's fun !");
  EXPECT_EQ(tokenize_zh("ＡＢＣ１２"), "Ａ Ｂ Ｃ １ ２");  // full-width forms U+FF00..U+FFEF
  EXPECT_EQ(tokenize_zh("\u3000你好\u3000"), "你 好");
}

// sacrebleu's ranges written '\u20000'..'\u2a6d6' are two-character strings in Python, which
// makes U+2001..U+2A6D (quotes, dashes, the ellipsis, currency, arrows) "Chinese" and leaves
// the real Extension B ideographs (U+20000..) alone.
TEST(Bleu, TokenizeZhKeepsSacrebleuRangeQuirks) {
  EXPECT_EQ(tokenize_zh("\u201c你好\u201d"), "\u201c 你 好 \u201d");
  EXPECT_EQ(tokenize_zh("a\u2014b\u20ac5\u2192c"), "a \u2014 b \u20ac 5 \u2192 c");
  EXPECT_EQ(tokenize_zh("x\U00020000y"), "x\U00020000y");
  EXPECT_EQ(tokenize_zh("a\u2a6eb"), "a\u2a6eb");  // just past U+2A6D
  EXPECT_EQ(tokenize_zh("a\u2a6db"), "a \u2a6d b");
}

// zh runs only the regex half of 13a: no entity unescaping, no <skipped>, no padding.
TEST(Bleu, TokenizeZhHasNoEntityOrPaddingStep) {
  EXPECT_EQ(tokenize_zh("&amp;"), "& amp ;");
  EXPECT_EQ(tokenize_13a("&amp;"), "&");
  EXPECT_EQ(tokenize_zh(".5 and 5."), ".5 and 5.");
  EXPECT_EQ(tokenize_13a(".5 and 5."), ". 5 and 5 .");
  EXPECT_EQ(tokenize_zh("<skipped>"), "< skipped >");
  EXPECT_EQ(tokenize_zh("他说U.S.很大"), "他 说 U . S . 很 大");
}

TEST(Bleu, ZhCorpus) {
  const BleuResult r = bleu({"我爱北京天安门"}, {"我爱北京天安门。"}, BleuTokenize::zh);
  EXPECT_EQ(r.hyp_len, 7);
  EXPECT_EQ(r.ref_len, 8);
  EXPECT_DOUBLE_EQ(r.score, 100.0 * std::exp(1.0 - 8.0 / 7.0));
  // Under 13a the whole run of Chinese is one token.
  EXPECT_EQ(bleu({"我爱北京天安门"}, {"我爱北京天安门。"}).hyp_len, 1);
}

// ---- the sacrebleu fixture ------------------------------------------------------------------

std::string unescape_field(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) {
      out += s[i];
      continue;
    }
    const char c = s[++i];
    out += c == 't' ? '\t' : c == 'n' ? '\n' : c == 'r' ? '\r' : c;
  }
  return out;
}

TEST(Bleu, MatchesSacrebleuFixture) {
  const std::filesystem::path dir = std::filesystem::path(FITTRAIN_SOURCE_DIR) / "tests/fixtures/bleu";
  if (!std::filesystem::exists(dir / "expected.json"))
    GTEST_SKIP() << "tests/fixtures/bleu/expected.json is absent: on a machine with sacrebleu "
                    "(pip install sacrebleu) run python3 scripts/check_bleu_vs_sacrebleu.py";
  std::ifstream tsv(dir / "cases.tsv", std::ios::binary);
  ASSERT_TRUE(tsv) << "tests/fixtures/bleu/cases.tsv is missing";
  Strings hyps, refs;
  for (std::string line; std::getline(tsv, line);) {
    const size_t tab = line.find('\t');
    ASSERT_NE(tab, std::string::npos) << "cases.tsv line " << hyps.size() + 1 << " has no tab";
    hyps.push_back(unescape_field(line.substr(0, tab)));
    refs.push_back(unescape_field(line.substr(tab + 1)));
  }
  std::ifstream jf(dir / "expected.json");
  const nlohmann::json exp = nlohmann::json::parse(jf);
  ASSERT_EQ(exp["tokenize_13a"].size(), hyps.size()) << "expected.json is not for this cases.tsv";

  for (size_t i = 0; i < hyps.size(); ++i) {
    EXPECT_EQ(tokenize_13a(hyps[i]), exp["tokenize_13a"][i][0].get<std::string>()) << "hyp " << i;
    EXPECT_EQ(tokenize_13a(refs[i]), exp["tokenize_13a"][i][1].get<std::string>()) << "ref " << i;
    EXPECT_EQ(tokenize_zh(hyps[i]), exp["tokenize_zh"][i][0].get<std::string>()) << "hyp " << i;
    EXPECT_EQ(tokenize_zh(refs[i]), exp["tokenize_zh"][i][1].get<std::string>()) << "ref " << i;
  }
  const std::map<std::string, BleuTokenize> toks = {
      {"13a", BleuTokenize::t13a}, {"zh", BleuTokenize::zh}, {"none", BleuTokenize::none}};
  size_t corpora = 0;
  for (const auto& c : exp["corpora"]) {
    const auto begin = c["begin"].get<size_t>(), end = c["end"].get<size_t>();
    const auto shift = c["ref_shift"].get<size_t>();
    const Strings h(hyps.begin() + begin, hyps.begin() + end);
    std::vector<Strings> streams = {Strings(refs.begin() + begin, refs.begin() + end)};
    if (shift) {
      Strings rotated = streams[0];
      std::rotate(rotated.begin(), rotated.begin() + shift, rotated.end());
      streams.push_back(rotated);
    }
    const BleuResult r = corpus_bleu(h, streams, toks.at(c["tokenize"].get<std::string>()));
    const std::string what = c["tokenize"].get<std::string>() + " [" + std::to_string(begin) + "," +
                             std::to_string(end) + ") shift " + std::to_string(shift);
    EXPECT_NEAR(r.score, c["score"].get<double>(), 1e-6) << what;
    EXPECT_NEAR(r.bp, c["bp"].get<double>(), 1e-9) << what;
    EXPECT_NEAR(r.ratio, c["ratio"].get<double>(), 1e-9) << what;
    EXPECT_EQ(r.hyp_len, c["hyp_len"].get<int64_t>()) << what;
    EXPECT_EQ(r.ref_len, c["ref_len"].get<int64_t>()) << what;
    for (int n = 0; n < 4; ++n) {
      EXPECT_EQ(r.correct[n], c["correct"][n].get<int64_t>()) << what << " order " << n + 1;
      EXPECT_EQ(r.total[n], c["total"][n].get<int64_t>()) << what << " order " << n + 1;
      EXPECT_NEAR(r.precisions[n], c["precisions"][n].get<double>(), 1e-9) << what;
    }
    ++corpora;
  }
  EXPECT_GT(corpora, 100u);
}

}  // namespace
}  // namespace ft
