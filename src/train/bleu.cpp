// sacrebleu 2.x corpus BLEU (see bleu.h). The reference is sacrebleu 2.6.0's
// metrics/bleu.py, metrics/helpers.py, utils.my_log and tokenizers/tokenizer_{13a,zh,re}.py;
// none of the behaviour reproduced here changed between 2.0 and 2.6. Every place where the
// obvious C++ would differ from sacrebleu is marked "sacrebleu:".
//
// Text is handled as UTF-8 bytes wherever that gives the same result as Python's code points:
// all the patterns of the 13a tokenizer are ASCII, and UTF-8 never puts an ASCII byte inside a
// multi-byte character, so a byte-wise search finds exactly the matches Python's code-point
// search finds (see regex_half). Only whitespace (Python's str.split/strip know Unicode
// whitespace) and the zh character ranges need decoded code points.
#include "train/bleu.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <unordered_map>

#include "core/error.h"

namespace ft {
namespace {

// ---- UTF-8 and Python's notion of whitespace ------------------------------------------------

// One decoded character: its code point and its length in bytes. A byte that does not start
// a well-formed sequence decodes alone to kInvalid, which is neither whitespace nor Chinese.
// (sacrebleu reads files as strict UTF-8, so it never sees such bytes; keeping them as opaque
// one-byte characters is the most useful thing to do with them.)
constexpr uint32_t kInvalid = 0xFFFFFFFF;
struct Char {
  uint32_t cp;
  size_t len;
};

Char decode(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return {c, 1};
  size_t len;
  uint32_t cp, min;
  if ((c & 0xE0) == 0xC0) len = 2, cp = c & 0x1F, min = 0x80;
  else if ((c & 0xF0) == 0xE0) len = 3, cp = c & 0x0F, min = 0x800;
  else if ((c & 0xF8) == 0xF0) len = 4, cp = c & 0x07, min = 0x10000;
  else return {kInvalid, 1};
  if (i + len > s.size()) return {kInvalid, 1};
  for (size_t k = 1; k < len; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return {kInvalid, 1};
    cp = (cp << 6) | (b(i + k) & 0x3F);
  }
  // Overlong forms, surrogates and values past U+10FFFF are not UTF-8 either.
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return {kInvalid, 1};
  return {cp, len};
}

// Python 3's str.isspace(), which str.split(), strip() and rstrip() use: bidi class WS, B or S,
// or category Zs. Note U+001C..U+001F and U+0085 are included and U+200B and U+180E are not.
bool py_space(uint32_t cp) {
  if (cp <= 0x20) return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20);
  switch (cp) {
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

// Python's str.split() with no argument: runs of whitespace separate, none are kept, and
// leading/trailing whitespace gives no empty token.
std::vector<std::string_view> py_split(std::string_view s) {
  std::vector<std::string_view> out;
  size_t i = 0, start = std::string_view::npos;
  while (i < s.size()) {
    const Char c = decode(s, i);
    if (py_space(c.cp)) {
      if (start != std::string_view::npos) out.push_back(s.substr(start, i - start));
      start = std::string_view::npos;
    } else if (start == std::string_view::npos) {
      start = i;
    }
    i += c.len;
  }
  if (start != std::string_view::npos) out.push_back(s.substr(start));
  return out;
}

std::string join_tokens(const std::vector<std::string_view>& tokens) {
  std::string out;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i) out += ' ';
    out += tokens[i];
  }
  return out;
}

// Python's str.rstrip() / str.strip() with no argument (Unicode whitespace).
std::string_view py_rstrip(std::string_view s) {
  size_t end = 0;  // one past the last non-space character
  for (size_t i = 0; i < s.size();) {
    const Char c = decode(s, i);
    i += c.len;
    if (!py_space(c.cp)) end = i;
  }
  return s.substr(0, end);
}

std::string_view py_strip(std::string_view s) {
  s = py_rstrip(s);
  size_t i = 0;
  while (i < s.size()) {
    const Char c = decode(s, i);
    if (!py_space(c.cp)) break;
    i += c.len;
  }
  return s.substr(i);
}

// Python's str.replace(from, to): non-overlapping, left to right, over the result of the
// previous call (so "&amp;lt;" becomes "&lt;" and then "<", as in sacrebleu).
void replace_all(std::string& s, std::string_view from, std::string_view to) {
  std::string out;
  size_t pos = 0;
  for (size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
    out.append(s, pos, hit - pos);
    out += to;
  }
  if (pos == 0) return;  // no match: leave s as it is
  out.append(s, pos, std::string::npos);
  s = std::move(out);
}

// ---- the regex half of 13a (sacrebleu's TokenizerRegexp) ------------------------------------

bool is_digit(char c) { return c >= '0' && c <= '9'; }  // Python's [0-9]: ASCII only
bool is_dot_comma(char c) { return c == '.' || c == ','; }

// The class [\{-\~\[-\` -\&\(-\+\:-\@\/]: the ranges {-~, [-`, space-&, (-+, :-@ and '/', that
// is every printable ASCII punctuation except the apostrophe, ',', '-' and '.' (and the space).
bool is_split_punct(char c) {
  const auto u = static_cast<unsigned char>(c);
  return (u >= 0x7B && u <= 0x7E) || (u >= 0x5B && u <= 0x60) || (u >= 0x20 && u <= 0x26) ||
         (u >= 0x28 && u <= 0x2B) || (u >= 0x3A && u <= 0x40) || u == '/';
}

// re.sub of a two-character pattern (a)(b) -> repl(a, b): Python scans left to right, and after
// a match resumes after both characters, so in "a.." only the first '.' is matched by
// ([^0-9])([\.,]) (the second would need the consumed first '.' as its left neighbour).
// Scanning bytes is equivalent: a and b are ASCII in every pattern except [^0-9], and a
// [^0-9] that is a multi-byte character can only be matched by its last byte when it is the
// left character (its other bytes are followed by continuation bytes, never by b), and by its
// first byte when it is the right one; the bytes not consumed are copied unchanged either way,
// and none of them can start a match, since the left character of every pattern whose right one
// is [^0-9] is '.' or ','.
template <class Left, class Right, class Repl>
std::string sub_pairs(const std::string& s, Left left, Right right, Repl repl) {
  std::string out;
  out.reserve(s.size() + s.size() / 4);
  size_t i = 0;
  while (i < s.size()) {
    if (i + 1 < s.size() && left(s[i]) && right(s[i + 1])) {
      repl(out, s[i], s[i + 1]);
      i += 2;
    } else {
      out += s[i++];
    }
  }
  return out;
}

std::string regex_half(const std::string& line) {
  // ([\{-\~\[-\` -\&\(-\+\:-\@\/]) -> ' \1 ' (one character: no overlap question).
  std::string s;
  s.reserve(line.size() * 2);
  for (char c : line) {
    if (is_split_punct(c)) {
      s += ' ';
      s += c;
      s += ' ';
    } else {
      s += c;
    }
  }
  const auto not_digit = [](char c) { return !is_digit(c); };
  // Period and comma unless preceded by a digit: ([^0-9])([\.,]) -> '\1 \2 '.
  s = sub_pairs(s, not_digit, is_dot_comma, [](std::string& o, char a, char b) {
    o += a, o += ' ', o += b, o += ' ';
  });
  // Period and comma unless followed by a digit: ([\.,])([^0-9]) -> ' \1 \2'.
  s = sub_pairs(s, is_dot_comma, not_digit, [](std::string& o, char a, char b) {
    o += ' ', o += a, o += ' ', o += b;
  });
  // Dash preceded by a digit: ([0-9])(-) -> '\1 \2 '.
  s = sub_pairs(s, is_digit, [](char c) { return c == '-'; },
                [](std::string& o, char a, char b) { o += a, o += ' ', o += b, o += ' '; });
  // sacrebleu: ' '.join(line.split()), with Python's Unicode whitespace.
  return join_tokens(py_split(s));
}

// ---- zh: sacrebleu's _UCODE_RANGES ----------------------------------------------------------

// sacrebleu compares one-character strings with the bounds of _UCODE_RANGES. Two entries meant
// for the supplementary planes are written '\u20000'..'\u2a6d6' and '\u2f800'..'\u2fa1d', which
// Python reads as two-character strings ('\u2000' + '0', '\u2a6d' + '6', ...). A single
// character c then satisfies '\u2000'+'0' <= c <= '\u2a6d'+'6' exactly when
// U+2001 <= c <= U+2A6D (a proper prefix sorts first), and likewise U+2F81..U+2FA1 for the
// second: so general punctuation (curly quotes, dashes, the ellipsis), currency, arrows,
// mathematical operators and more are "Chinese" to sacrebleu and get split apart, while the
// real Extension B ideographs (U+20000..) are not. Kept as is, because it changes scores.
constexpr std::array<std::pair<uint32_t, uint32_t>, 22> kZhRanges = {{
    {0x3400, 0x4DB5}, {0x4E00, 0x9FA5}, {0x9FA6, 0x9FBB}, {0xF900, 0xFA2D}, {0xFA30, 0xFA6A},
    {0xFA70, 0xFAD9}, {0x2001, 0x2A6D}, {0x2F81, 0x2FA1}, {0xFF00, 0xFFEF}, {0x2E80, 0x2EFF},
    {0x3000, 0x303F}, {0x31C0, 0x31EF}, {0x2F00, 0x2FDF}, {0x2FF0, 0x2FFF}, {0x3100, 0x312F},
    {0x31A0, 0x31BF}, {0xFE10, 0xFE1F}, {0xFE30, 0xFE4F}, {0x2600, 0x26FF}, {0x2700, 0x27BF},
    {0x3200, 0x32FF}, {0x3300, 0x33FF},
}};

bool is_zh_char(uint32_t cp) {
  for (const auto& [lo, hi] : kZhRanges)
    if (cp >= lo && cp <= hi) return true;
  return false;
}

// ---- BLEU statistics ------------------------------------------------------------------------

constexpr int kOrder = 4;

// A segment's n-gram counts, one table per order. The key is the n-gram's tokens joined by a
// single space, which is unambiguous because no token contains whitespace.
using NgramCounts = std::array<std::unordered_map<std::string, int64_t>, kOrder>;

NgramCounts count_ngrams(const std::vector<std::string_view>& tokens) {
  NgramCounts counts;
  for (int n = 1; n <= kOrder; ++n) {
    for (size_t i = 0; i + n <= tokens.size(); ++i) {
      std::string key(tokens[i]);
      for (int k = 1; k < n; ++k) key.append(" ").append(tokens[i + k]);
      ++counts[n - 1][key];
    }
  }
  return counts;
}

std::string tokenize(std::string_view line, BleuTokenize tok) {
  switch (tok) {
    case BleuTokenize::t13a: return tokenize_13a(line);
    case BleuTokenize::zh: return tokenize_zh(line);
    case BleuTokenize::none: return std::string(line);  // sacrebleu's NoneTokenizer: unchanged
  }
  FT_CHECK(false, "unknown BleuTokenize ", static_cast<int>(tok));
  return {};
}

// sacrebleu's BLEU._preprocess_segment (lowercase=False): tokenizer(sent.rstrip()), then
// helpers.extract_all_word_ngrams splits the result with str.split().
std::vector<std::string> preprocess(std::string_view segment, BleuTokenize tok) {
  const std::string text = tokenize(py_rstrip(segment), tok);
  std::vector<std::string> tokens;
  for (std::string_view t : py_split(text)) tokens.emplace_back(t);
  return tokens;
}

std::vector<std::string_view> views(const std::vector<std::string>& tokens) {
  return {tokens.begin(), tokens.end()};
}

// sacrebleu's utils.my_log: log with log(0) "floored" to -9999999999 instead of -inf, so a
// zero precision makes the score exp(-2.5e9) = exactly 0.
double my_log(double x) { return x == 0.0 ? -9999999999.0 : std::log(x); }

// sacrebleu's BLEU.compute_bleu with smooth_method='exp', effective_order=False.
BleuResult compute_bleu(const std::array<int64_t, kOrder>& correct,
                        const std::array<int64_t, kOrder>& total, int64_t sys_len,
                        int64_t ref_len) {
  BleuResult r;
  r.correct = correct;
  r.total = total;
  r.hyp_len = sys_len;
  r.ref_len = ref_len;
  // BLEUScore.ratio: sys_len / ref_len if ref_len else 0.
  r.ratio = ref_len ? static_cast<double>(sys_len) / static_cast<double>(ref_len) : 0.0;
  // Brevity penalty: only when the hypotheses are shorter; an empty output gets 0, and an
  // empty output against empty references 1 (0 < 0 is false).
  if (sys_len < ref_len)
    r.bp = sys_len > 0 ? std::exp(1.0 - static_cast<double>(ref_len) / static_cast<double>(sys_len))
                       : 0.0;
  else
    r.bp = 1.0;
  // sacrebleu (#141): no match of any order scores 0 with all precisions 0, before any
  // smoothing; so a corpus with no overlap at all is 0, not a small smoothed number.
  if (std::all_of(correct.begin(), correct.end(), [](int64_t c) { return c == 0; })) {
    r.score = 0.0;
    return r;
  }
  // 'exp' smoothing (NIST mteval-v13a, Chen & Cherry method 3): the k-th order (counting from
  // 1) that has n-grams but no match gets 100 / (2^k * total). An order without any hypothesis
  // n-gram stops the loop: it and all higher orders keep precision 0, and the score is 0.
  double smooth_mteval = 1.0;
  for (int n = 0; n < kOrder; ++n) {
    if (total[n] == 0) break;
    if (correct[n] == 0) {
      smooth_mteval *= 2;
      r.precisions[n] = 100.0 / (smooth_mteval * static_cast<double>(total[n]));
    } else {
      // Same operation order as sacrebleu's 100. * correct / total, for the same rounding.
      r.precisions[n] = 100.0 * static_cast<double>(correct[n]) / static_cast<double>(total[n]);
    }
  }
  // score = bp * exp(sum(my_log(p)) / 4). Python < 3.12 sums left to right like this loop;
  // 3.12's compensated sum() can differ in the last bit, far below any printed digit.
  double sum = 0.0;
  for (double p : r.precisions) sum += my_log(p);
  r.score = r.bp * std::exp(sum / kOrder);
  return r;
}

}  // namespace

std::string tokenize_13a(std::string_view line) {
  // The language-independent part of mteval-v13a, in sacrebleu's order. The entity
  // replacements run only when the line has a '&' (an optimisation in sacrebleu with no effect
  // on the output). Note the order: <skipped> is removed before "&lt;skipped&gt;" could form it,
  // and "-\n" is joined before the remaining newlines become spaces.
  std::string s(line);
  replace_all(s, "<skipped>", "");
  replace_all(s, "-\n", "");
  replace_all(s, "\n", " ");
  if (s.find('&') != std::string::npos) {
    replace_all(s, "&quot;", "\"");
    replace_all(s, "&amp;", "&");
    replace_all(s, "&lt;", "<");
    replace_all(s, "&gt;", ">");
  }
  // sacrebleu pads with one space either side, which gives a leading '.' or ',' a non-digit
  // left neighbour (so ".5" becomes ". 5") and a trailing one a non-digit right neighbour.
  return regex_half(" " + s + " ");
}

std::string tokenize_zh(std::string_view line) {
  // sacrebleu's TokenizerZh strips the line, spaces out the "Chinese" characters and then runs
  // only TokenizerRegexp: unlike 13a there is no entity unescaping, no <skipped> or "-\n"
  // handling and no padding with spaces (so ".5" stays ".5" here).
  const std::string_view s = py_strip(line);
  std::string spaced;
  spaced.reserve(s.size() * 2);
  for (size_t i = 0; i < s.size();) {
    const Char c = decode(s, i);
    if (is_zh_char(c.cp)) spaced += ' ';
    spaced.append(s.substr(i, c.len));
    if (is_zh_char(c.cp)) spaced += ' ';
    i += c.len;
  }
  return regex_half(spaced);
}

std::string tokenize_none(std::string_view line) { return join_tokens(py_split(line)); }

BleuResult bleu_from_counts(const std::array<int64_t, kOrder>& correct, const std::array<int64_t, kOrder>& total,
                            int64_t hyp_len, int64_t ref_len) {
  return compute_bleu(correct, total, hyp_len, ref_len);
}

BleuResult corpus_bleu(std::span<const std::string> hypotheses,
                       std::span<const std::string> references, BleuTokenize tok) {
  const std::vector<std::string> stream(references.begin(), references.end());
  return corpus_bleu(hypotheses, std::span<const std::vector<std::string>>(&stream, 1), tok);
}

BleuResult corpus_bleu(std::span<const std::string> hypotheses,
                       std::span<const std::vector<std::string>> reference_streams,
                       BleuTokenize tok) {
  FT_USER_CHECK(!reference_streams.empty(), "BLEU needs at least one reference stream");
  for (size_t s = 0; s < reference_streams.size(); ++s)
    FT_USER_CHECK(reference_streams[s].size() == hypotheses.size(), "BLEU: reference stream ", s,
                  " has ", reference_streams[s].size(), " segments but there are ",
                  hypotheses.size(), " hypotheses");

  std::array<int64_t, kOrder> correct{}, total{};
  int64_t sys_len = 0, ref_len = 0;
  for (size_t i = 0; i < hypotheses.size(); ++i) {
    // sacrebleu's _extract_reference_info: per n-gram the largest count over the references
    // (a reference that lacks it counts 0), and every reference's length.
    NgramCounts ref_max;
    std::vector<int64_t> ref_lens;
    for (const auto& stream : reference_streams) {
      const std::vector<std::string> tokens = preprocess(stream[i], tok);
      ref_lens.push_back(static_cast<int64_t>(tokens.size()));
      NgramCounts counts = count_ngrams(views(tokens));
      for (int n = 0; n < kOrder; ++n)
        for (auto& [gram, c] : counts[n]) {
          int64_t& m = ref_max[n][gram];
          m = std::max(m, c);
        }
    }
    const std::vector<std::string> hyp = preprocess(hypotheses[i], tok);
    const auto hyp_len = static_cast<int64_t>(hyp.size());
    // sacrebleu's _get_closest_ref_len: the smallest |hyp_len - ref_len|, ties to the shorter.
    int64_t closest_diff = -1, closest_len = -1;
    for (int64_t len : ref_lens) {
      const int64_t diff = std::llabs(hyp_len - len);
      if (closest_diff == -1 || diff < closest_diff) {
        closest_diff = diff;
        closest_len = len;
      } else if (diff == closest_diff && len < closest_len) {
        closest_len = len;
      }
    }
    // sacrebleu's _compute_segment_statistics: clipped matches and all hypothesis n-grams.
    const NgramCounts hyp_counts = count_ngrams(views(hyp));
    for (int n = 0; n < kOrder; ++n)
      for (const auto& [gram, c] : hyp_counts[n]) {
        total[n] += c;
        auto it = ref_max[n].find(gram);
        if (it != ref_max[n].end()) correct[n] += std::min(c, it->second);
      }
    sys_len += hyp_len;
    ref_len += closest_len;
  }
  return compute_bleu(correct, total, sys_len, ref_len);
}

}  // namespace ft
