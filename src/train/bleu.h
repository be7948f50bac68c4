// Corpus BLEU-4 that reproduces sacrebleu 2.x (checked against 2.6.0, whose BLEU and 13a/zh
// tokenizers are unchanged since 2.0) with its defaults: sacrebleu.corpus_bleu(hyps, refs),
// i.e. BLEU(tokenize="13a", smooth_method="exp", lowercase=False, force=False,
// effective_order=False, max_ngram_order=4).corpus_score. Evaluation scores of translation
// runs are compared with published numbers, which are sacrebleu numbers: an approximate BLEU
// would make them incomparable, so every quirk of sacrebleu is kept on purpose (bleu.cpp says
// which). Only core/ and the standard library are used, so any layer above can call it.
#pragma once
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ft {

// sacrebleu's tokenize= values that fittrain supports: "13a" (the default), "zh" and "none"
// (whitespace split only).
enum class BleuTokenize { t13a, zh, none };

// The fields of sacrebleu's BLEUScore.
struct BleuResult {
  double score = 0;                     // 0..100, as sacrebleu reports it
  double bp = 0;                        // brevity penalty
  double ratio = 0;                     // hyp_len / ref_len (0 when ref_len is 0)
  int64_t hyp_len = 0, ref_len = 0;     // sys_len and the summed closest reference lengths
  std::array<double, 4> precisions{};   // percent; the smoothed value where correct is 0
  std::array<int64_t, 4> correct{}, total{};  // clipped matches and hypothesis n-grams, per order
};

// The score of a corpus from its counts (sacrebleu's BLEU.compute_bleu, as corpus_bleu ends):
// counts of several parts of a corpus, summed, score the whole of it.
BleuResult bleu_from_counts(const std::array<int64_t, 4>& correct, const std::array<int64_t, 4>& total,
                            int64_t hyp_len, int64_t ref_len);

// Corpus BLEU of hypotheses[i] against references[i] (one reference per segment). Every
// segment is right-stripped of Unicode whitespace (sacrebleu's rstrip) and tokenized with tok.
// Throws UserError when the two spans differ in length. An empty corpus scores 0 (sacrebleu
// raises an IndexError there).
BleuResult corpus_bleu(std::span<const std::string> hypotheses,
                       std::span<const std::string> references,
                       BleuTokenize tok = BleuTokenize::t13a);

// Several reference streams, as sacrebleu.corpus_bleu(hyps, [stream0, stream1, ...]): each
// stream holds one reference per hypothesis. An n-gram's match is clipped by its largest count
// in any reference of the segment, and the segment's reference length is the one closest to
// the hypothesis length (ties go to the shorter). Throws UserError when there is no stream or
// a stream's length differs from the hypotheses'.
BleuResult corpus_bleu(std::span<const std::string> hypotheses,
                       std::span<const std::vector<std::string>> reference_streams,
                       BleuTokenize tok = BleuTokenize::t13a);

// sacrebleu's Tokenizer13a (mteval-v13a.pl) applied to one line, without the rstrip that
// corpus_bleu applies first. Input is UTF-8; the output's tokens are separated by one space.
std::string tokenize_13a(std::string_view line);

// sacrebleu's TokenizerZh: strip, a space either side of every character in sacrebleu's
// "Chinese" ranges, then the regex half of 13a (not the entity/<skipped> half; see bleu.cpp).
std::string tokenize_zh(std::string_view line);

// What BleuTokenize::none does to a line: Python's str.split() joined by single spaces.
std::string tokenize_none(std::string_view line);

}  // namespace ft
