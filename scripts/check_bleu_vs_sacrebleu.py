#!/usr/bin/env python3
"""Fixture for fittrain's BLEU (src/train/bleu.h) against sacrebleu.

Writes, into OUT_DIR (default tests/fixtures/bleu):
  cases.tsv      a deterministic random corpus, one "hypothesis<TAB>reference" pair a line:
                 English and Chinese, punctuation, numbers, abbreviations, HTML entities,
                 <skipped>, dashes, newlines, Unicode whitespace and punctuation. It needs
                 nothing but Python, so it is the same on every machine (seeded random.Random).
  expected.json  only when sacrebleu is importable (pip install sacrebleu): sacrebleu's
                 tokenization of every field (13a and zh) and its corpus_score for the whole
                 file and for consecutive blocks of it, with tokenize=13a, zh and none, and
                 with two reference streams.

tests/train/bleu_test.cpp (Bleu.MatchesSacrebleuFixture) reads both files and compares; it skips
when expected.json is absent. Regenerate on a machine with sacrebleu:
    python3 scripts/check_bleu_vs_sacrebleu.py
and without it (cases.tsv only, expected.json left alone):
    python3 scripts/check_bleu_vs_sacrebleu.py --no-sacrebleu

Escapes: a TSV field cannot hold a tab or a newline, yet the 13a tokenizer treats "\\n" and
"-\\n" specially, so fields are written with backslash escapes: \\\\ \\t \\n \\r. The C++ test
decodes them the same way before scoring.

expected.json:
  {"sacrebleu_version": str, "python": str,
   "tokenize_13a": [[hyp, ref], ...], "tokenize_zh": [[hyp, ref], ...],   (one pair a line)
   "corpora": [{"tokenize": "13a"|"zh"|"none", "begin": i, "end": j, "ref_shift": k,
                "score", "bp", "ratio", "hyp_len", "ref_len", "correct", "total",
                "precisions"}, ...]}
A corpus is hyps[begin:end] against refs[begin:end]; ref_shift > 0 adds a second reference
stream, refs[begin:end] rotated left by ref_shift.
"""
import argparse
import json
import os
import platform
import random
import sys

SEED = 20240611
N_LINES = 400
BLOCK_SIZES = [1, 2, 3, 5, 8, 13, 21]  # cycled: single segments up to mid-size corpora

WORDS = ("the a of to and in is was for on that with as by at from it this be are have "
         "dog cat man woman city market report government economy price year week model "
         "training data result test said will would could not no new old large small first "
         "last good bad high low early late run runs ran bit bitten surprised unexpected").split()
CAP_WORDS = "The It A This President Apple London Monday EU NATO".split()
NUMBERS = ["1,000.5", "3.14", "2019", "-5", "10-20", "1990-2000", "$5.00", "50%", "0.5",
           ".5", "5.", "1,000", "7", "42", "3rd", "1.2.3", "5--6", "12:30", "+1", "1e-3"]
SPECIAL = ["U.S.", "e.g.", "i.e.", "Dr.", "Mr.", "etc.", "it's", "don't", "wasn't", "O'Neil",
           "well-known", "state-of-the-art", "--", "-", "...", "a/b", "(see", "note)", "[1]",
           "{x}", "<b>", "x=y", "#tag", "@user", "C++", "a_b", "`code`", "~", "|", "^", "*"]
ENTITIES = ["&quot;", "&amp;", "&lt;", "&gt;", "&amp;lt;", "&amp;quot;", "&#39;", "&nbsp;",
            "&lt;skipped&gt;", "<skipped>", "AT&amp;T", "&quot;quoted&quot;", "&", "&amp"]
UNICODE = ["caf\u00e9", "na\u00efve", "\u201cquoted\u201d", "\u2014", "\u2013", "\u2026",
           "\u20ac5", "\u00a35", "\u00bd", "\u00e9t\u00e9,", "stra\u00dfe.", "\u0645\u0631\u062d\u0628\u0627",
           "\u00fcber", "\u2018single\u2019", "\u00ab\u00bb", "x\u00b2", "\u2192", "\u00a9"]
SPACES = ["\u00a0", "\u3000", "\u2009", "\u200b", "\t", "  ", "\u2028", "\u0085", "\x1f"]
PUNCT = [",", ".", "!", "?", ";", ":", "\"", "'", ")", "(", "-", "/"]
ZH_CHARS = ("我你他她们的是在有不了人这中大为上个国以要会到说时和地出就分对成可主发年动同"
            "工也能下过子产种面而方后多定行学法所民得经十三之进着等部度家电力里如水化高自二"
            "理起小物现实加量都两体制机当使点从业本去把性好应开它合还因由其些然前外天政四日那"
            "社义事平形相全表间样与关各重新线内数正心反明看原又么利比或但质气第向道命此变条只"
            "没结解问意建月公无系军很情者最立代想已通并提直题党程展五果料象员革位入常文总次品"
            "式活设及管特件长求老头基资边流路级少图山统接知较将组见计别她手角期根论运农指几九"
            "区强放决西被干做必战先回则任取据处队南给色光门即保治北造百规热领七海口东导器压志"
            "世金增争济阶油思术极交受联什认六共权收证改清己美再采转更单风切打白教速花带安场身"
            "车例真务具万每目至达走积示议声报斗完类八离华名确才科张信马节话米整空元况今集温传"
            "土许步群广石记需段研界拉林律叫且究观越织装影算低持音众书布复容儿须际商非验连断深"
            "难近矿千周委素技备半办青省列习响约支般史感劳便团往酸历市克何除消构府称太准精值号"
            "率族维划选标写存候毛亲快效斯院查江型眼王按格养易置派层片始却专状育厂京识适属圆包"
            "火住调满县局照参红细引听该铁价严龙飞")
ZH_PUNCT = ["\uff0c", "\u3002", "\uff01", "\uff1f", "\u3001", "\uff1a", "\uff1b", "\u300a",
            "\u300b", "\u201c", "\u201d", "\uff08", "\uff09", "\u2014\u2014", "\u2026\u2026",
            "\uff21\uff22\uff23", "\uff11\uff12", "\U00020000", "\u2f81", "\u2fa2", "\u2a6e"]
ZH_MIXED = ["Python", "GPU", "3.8", "2024年", "100%", "iPhone 15", "AI", "U.S.", "1,000", "&amp;",
            "e.g.", "-5", "COVID-19", "\u20ac", "\u2600"]


def english_piece(rng):
    r = rng.random()
    if r < 0.55:
        return rng.choice(WORDS)
    if r < 0.62:
        return rng.choice(CAP_WORDS)
    if r < 0.72:
        return rng.choice(NUMBERS)
    if r < 0.80:
        return rng.choice(SPECIAL)
    if r < 0.86:
        return rng.choice(ENTITIES)
    if r < 0.92:
        return rng.choice(UNICODE)
    return rng.choice(WORDS) + rng.choice(PUNCT)


def english_sentence(rng):
    pieces = [english_piece(rng) for _ in range(rng.randint(0, 18))]
    text = ""
    for i, p in enumerate(pieces):
        if i:
            r = rng.random()
            text += " " if r < 0.9 else rng.choice(SPACES) if r < 0.96 else rng.choice(["-\n", "\n", ""])
        text += p
    if pieces and rng.random() < 0.7:
        text += rng.choice([".", "!", "?", " .", "...", ".\"", ""])
    return text


def chinese_sentence(rng):
    text = ""
    for _ in range(rng.randint(0, 14)):
        r = rng.random()
        if r < 0.65:
            text += "".join(rng.choice(ZH_CHARS) for _ in range(rng.randint(1, 4)))
        elif r < 0.85:
            text += rng.choice(ZH_PUNCT)
        else:
            m = rng.choice(ZH_MIXED)
            text += rng.choice([m, " " + m + " ", m + " "])
    return text


def perturb(rng, ref, chinese):
    """A hypothesis near ref: edits on its pieces (characters for Chinese, words otherwise)."""
    r = rng.random()
    if r < 0.08:
        return ref
    if r < 0.12:
        return ""
    if r < 0.17:
        return chinese_sentence(rng) if chinese else english_sentence(rng)
    units = list(ref) if chinese else ref.split(" ")
    out = []
    for u in units:
        e = rng.random()
        if e < 0.10:
            continue                                    # drop
        if e < 0.18:
            out.append(rng.choice(ZH_CHARS) if chinese else english_piece(rng))  # substitute
            continue
        out.append(u)
        if e > 0.95:
            out.append(rng.choice(ZH_CHARS) if chinese else english_piece(rng))  # insert
    for i in range(len(out) - 1):
        if rng.random() < 0.05:
            out[i], out[i + 1] = out[i + 1], out[i]     # swap neighbours
    if out and rng.random() < 0.15:
        out = out[: rng.randint(0, len(out))]           # truncate (brevity penalty)
    text = ("" if chinese else " ").join(out)
    if rng.random() < 0.1:
        text += rng.choice([" ", "\t", "\u00a0", "\n", "-\n", "  "])  # trailing space: rstrip
    if rng.random() < 0.05:
        text = rng.choice([" ", "\u3000"]) + text
    return text


def make_cases(seed=SEED, n=N_LINES):
    rng = random.Random(seed)
    cases = []
    for i in range(n):
        chinese = rng.random() < 0.4
        ref = chinese_sentence(rng) if chinese else english_sentence(rng)
        if rng.random() < 0.03:
            ref = rng.choice(["", " ", "\u3000"])
        cases.append((perturb(rng, ref, chinese), ref))
    return cases


def escape(s):
    return s.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


def unescape(s):
    out, i = [], 0
    while i < len(s):
        if s[i] == "\\" and i + 1 < len(s):
            out.append({"\\": "\\", "t": "\t", "n": "\n", "r": "\r"}[s[i + 1]])
            i += 2
        else:
            out.append(s[i])
            i += 1
    return "".join(out)


def write_cases(path, cases):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for hyp, ref in cases:
            f.write(escape(hyp) + "\t" + escape(ref) + "\n")


def read_cases(path):
    with open(path, "rb") as f:
        lines = f.read().decode("utf-8").split("\n")  # not splitlines(): U+2028 is data here
    if lines and lines[-1] == "":
        lines.pop()
    return [tuple(unescape(x) for x in line.split("\t")) for line in lines]


def blocks(n):
    """[begin, end) ranges: the whole corpus, then consecutive blocks of cycled sizes."""
    out, begin, k = [(0, n)], 0, 0
    while begin < n:
        end = min(n, begin + BLOCK_SIZES[k % len(BLOCK_SIZES)])
        out.append((begin, end))
        begin, k = end, k + 1
    return out


def expected(cases):
    import sacrebleu
    from sacrebleu.metrics import BLEU
    from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a
    from sacrebleu.tokenizers.tokenizer_zh import TokenizerZh

    t13a, tzh = Tokenizer13a(), TokenizerZh()
    hyps = [h for h, _ in cases]
    refs = [r for _, r in cases]
    result = {
        "sacrebleu_version": sacrebleu.__version__,
        "python": platform.python_version(),
        "tokenize_13a": [[t13a(h), t13a(r)] for h, r in cases],
        "tokenize_zh": [[tzh(h), tzh(r)] for h, r in cases],
        "corpora": [],
    }
    for tok in ["13a", "zh", "none"]:
        for begin, end in blocks(len(cases)):
            for shift in [0, 1] if end - begin > 1 else [0]:
                streams = [refs[begin:end]]
                if shift:
                    streams.append(streams[0][shift:] + streams[0][:shift])
                s = BLEU(tokenize=tok).corpus_score(hyps[begin:end], streams)
                result["corpora"].append({
                    "tokenize": tok, "begin": begin, "end": end, "ref_shift": shift,
                    "score": s.score, "bp": s.bp, "ratio": s.ratio, "hyp_len": s.sys_len,
                    "ref_len": s.ref_len, "correct": list(s.counts), "total": list(s.totals),
                    "precisions": list(s.precisions)})
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out-dir", default=os.path.join(here, "..", "tests", "fixtures", "bleu"))
    ap.add_argument("--no-sacrebleu", action="store_true", help="write cases.tsv only")
    args = ap.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    cases_path = os.path.join(args.out_dir, "cases.tsv")
    write_cases(cases_path, make_cases())
    cases = read_cases(cases_path)
    assert cases == make_cases(), "cases.tsv does not read back as written"
    print(f"wrote {cases_path} ({len(cases)} lines)")
    if args.no_sacrebleu:
        return
    try:
        import sacrebleu  # noqa: F401
    except ImportError:
        print("sacrebleu is not importable: expected.json not written (pip install sacrebleu)")
        return
    exp_path = os.path.join(args.out_dir, "expected.json")
    with open(exp_path, "w", encoding="utf-8") as f:
        json.dump(expected(cases), f, ensure_ascii=False, indent=0)
        f.write("\n")
    print(f"wrote {exp_path}")


if __name__ == "__main__":
    sys.exit(main())
