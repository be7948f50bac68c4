#!/usr/bin/env bash
# Speed and peak memory of `fittrain prepare` on prompt/response pairs: writes a synthetic
# N-sample JSONL ("what is 12 plus 7?" / "19", default 1,000,000), then times prepare on it
# (byte tokenizer, or TOKENIZER=DIR_OR_MODEL) and prints samples/s and the peak RSS from
# /usr/bin/time -v. Needs a build: BUILD=build-cpu (default build).
#   bench/prepare_pairs.sh 10000000
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-1000000}
BUILD=${BUILD:-build}
T=${SEQ_LEN:-1024}
WORK=${WORK:-/tmp/fittrain_prepare_pairs_bench}
mkdir -p "$WORK"
IN="$WORK/pairs_$N.jsonl"
if [[ ! -s "$IN" ]]; then
  mawk -v n="$N" 'BEGIN { srand(1); for (i = 0; i < n; i++) { a = int(rand() * 100); b = int(rand() * 100);
    printf "{\"prompt\": \"what is %d plus %d?\", \"response\": \"%d\"}\n", a, b, a + b } }' > "$IN.tmp"
  mv "$IN.tmp" "$IN"
fi
echo "input      $IN: $N samples, $(du -h "$IN" | cut -f1)"
TOK=()
[[ -n "${TOKENIZER:-}" ]] && TOK=(--tokenizer "$TOKENIZER")
/usr/bin/time -v -o "$WORK/time.txt" "$BUILD/fittrain" prepare --input "$IN" --out "$WORK/out" --seq-len "$T" \
  --overwrite "${TOK[@]}"
WALL=$(awk -F': ' '/Elapsed \(wall clock\)/ { n = split($2, p, ":"); s = 0; for (i = 1; i <= n; i++) s = s * 60 + p[i]; print s }' "$WORK/time.txt")
RSS=$(awk -F': ' '/Maximum resident set size/ { print $2 }' "$WORK/time.txt")
CPU=$(awk -F': ' '/Percent of CPU/ { print $2 }' "$WORK/time.txt")
awk -v n="$N" -v w="$WALL" -v r="$RSS" -v c="$CPU" -v t="$(nproc)" 'BEGIN {
  printf "result     %d samples in %.1f s: %.0f samples/s, peak RSS %.0f MiB, CPU %s of %d cores\n", n, w, n / w, r / 1024, c, t }'
du -sh "$WORK/out"
