#!/usr/bin/env bash
# GPT-2 124M, T=1024, bf16, one GPU: this tree's fittrain against another source tree's
# (e.g. the commit before a refactor), in the same call on the same card, interleaved so
# clock and power drift hit both alike. Run on the device machine from the repo root:
#   bash bench/compare_builds.sh OLD_SRC [batches=16,32,64] [steps=30] [rounds=2]
# OLD_SRC: a source tree of fittrain (git archive of the old commit, carried along).
# Prints tokens/s per run and the ratio this/old per batch (total over rounds); logs in $OUT.
set -uo pipefail
OLD=${1:?usage: compare_builds.sh OLD_SRC [batches] [steps] [rounds]}
BATCHES=${2:-16,32,64}
STEPS=${3:-30}
ROUNDS=${4:-2}
OUT=${OUT:-/tmp/bench_out}
mkdir -p "$OUT"
source bench/gpu_bench_lib.sh
ft_build_fittrain || exit 1
ft_build_fittrain "$OLD" || exit 1
DATA=/tmp/fittrain_bench_tokens.bin
[ -f "$DATA" ] || ft_make_tokens "$DATA" $((64 * 1025 * 64))
CARD=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
run() {  # run LABEL BIN B -> appends "LABEL B tokens_per_s" to $OUT/compare.txt
  local label=$1 bin=$2 B=$3 dir=/tmp/ftcmp_$1
  rm -rf "$dir"
  "$bin" train --model gpt2 --data-path "$DATA" --global-batch-size "$B" --micro-batch-size "$B" --max-steps "$STEPS" \
    --log-every 5 --eval-every 0 --ckpt-every 0 --results-dir "$dir" --metrics-file "$dir/m.jsonl" >"$OUT/${label}_B$B.log" 2>&1 ||
    { echo "$label B=$B failed"; tail -3 "$OUT/${label}_B$B.log"; return; }
  python3 - "$dir/m.jsonl" "$label" "$B" >>"$OUT/compare.txt" <<'PY'
import json, sys, statistics
rows = [json.loads(l) for l in open(sys.argv[1]) if '"tokens_per_s"' in l]
print(sys.argv[2], sys.argv[3], round(statistics.harmonic_mean([r["tokens_per_s"] for r in rows[1:]])))
PY
}
: >"$OUT/compare.txt"
IFS=, read -ra BS <<<"$BATCHES"
for ((r = 0; r < ROUNDS; ++r)); do
  for B in "${BS[@]}"; do
    if ((r % 2 == 0)); then run old "$OLD/build-gpu/fittrain" "$B"; run new build-gpu/fittrain "$B"
    else run new build-gpu/fittrain "$B"; run old "$OLD/build-gpu/fittrain" "$B"; fi
  done
done
python3 - "$OUT/compare.txt" "$CARD" <<'PY'
import sys, collections, statistics
runs = collections.defaultdict(list)
for l in open(sys.argv[1]):
    label, b, t = l.split(); runs[(label, int(b))].append(int(t))
print(f"\nGPT-2 124M, T=1024, bf16, one {sys.argv[2]}: tokens/s per run (this tree vs the old one)")
print("| B | old | new | new / old (harmonic mean over runs) |")
print("|---|---|---|---|")
for b in sorted({b for _, b in runs}):
    o, n = runs[("old", b)], runs[("new", b)]
    if o and n:
        print(f"| {b} | {', '.join(f'{x:,}' for x in o)} | {', '.join(f'{x:,}' for x in n)} | "
              f"{statistics.harmonic_mean(n) / statistics.harmonic_mean(o):.4f} |")
PY
