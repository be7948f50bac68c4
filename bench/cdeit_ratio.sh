#!/usr/bin/env bash
# fittrain's CDEIT against torch.compile with each side's spread averaged (issue 13): ROUNDS
# rounds of bench/cdeit_gpu.sh at each batch (one fittrain run, then one fresh torch.compile
# process timed over TORCH_WINDOWS windows, default 3), interleaved so that clock and neighbour
# drift hit both. torch.compile's rate moved by up to 6% between calls of the same session
# (590-623 images/s at batch 32, docs/PERFORMANCE.md session 14) while fittrain's stayed within
# 1%, so one process each is not a ratio to rely on. Prints every run and, after every round,
# per batch, the median of each side and their ratio. Device machine, after a build:
#   BUILD=build-gpu bash bench/cdeit_ratio.sh [ROUNDS=3] [BATCHES="32 16"] [STEPS=30]
# ARENA_CAP_GIB=14.20 (bench/cdeit_gpu.sh) keeps fittrain's arena within torch.compile's peak,
# as session 23 measured it: fittrain spends memory left after the batch on kept blocks.
# STEPS=80 with FT_LOG_EVERY=20 times fittrain as the PyTorch script is timed: the median of
# three windows of 20 steps (with the defaults, 30 steps logged every 5, a window is ~0.2 s and
# one slow window of five moved a round's median by 2%: session 26).
set -uo pipefail
ROUNDS=${1:-3}
BATCHES=${2:-"32 16"}
STEPS=${3:-30}
OUT=${OUT:-/tmp}
mkdir -p "$OUT"
R=$OUT/cdeit_ratio.jsonl
: >"$R"
summary() {  # the medians so far: printed after every round, so a call cut short by its limit keeps them
python3 - "$R" <<'PY'
import json, statistics, sys
ft, tc = {}, {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r["impl"] == "fittrain":
        ft.setdefault(r["micro_batch"] * r["accum"], []).append(r["images_per_s"])
    else:
        tc.setdefault(r["B"], []).append(r["images_per_s"])
for b in sorted(set(ft) | set(tc)):
    f, t = ft.get(b, []), tc.get(b, [])
    if f and t:
        mf, mt = statistics.median(f), statistics.median(t)
        print(f"batch {b}: fittrain {mf:.1f} images/s (runs {f}), torch.compile {mt:.1f} (runs {t}): ratio {mf / mt:.3f}")
PY
}
for r in $(seq 1 "$ROUNDS"); do
  for b in $BATCHES; do
    TORCH_MODES=compile TORCH_EXTRA="--windows ${TORCH_WINDOWS:-3}" bash bench/cdeit_gpu.sh "$STEPS" "$b" 2>&1 |
      grep '^{' | tee -a "$R"
  done
  echo "after round $r:"
  summary
done
