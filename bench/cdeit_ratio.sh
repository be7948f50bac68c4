#!/usr/bin/env bash
# fittrain's CDEIT against torch.compile with each side's spread averaged (issue 13): ROUNDS
# rounds, each one fittrain run and one fresh torch.compile process per batch, interleaved so
# that clock and neighbour drift hit both. torch.compile's rate moved by up to 6% between calls
# of the same session (590-623 images/s at batch 32, docs/PERFORMANCE.md session 14) while
# fittrain's stayed within 1%, so one process each is not a ratio to rely on. Prints every run
# and, per batch, the median of each side and their ratio. Device machine, after a build:
#   BUILD=build-gpu bash bench/cdeit_ratio.sh [ROUNDS=3] [BATCHES="32 16"] [STEPS=30]
# Logs in $OUT; TORCH_WINDOWS (default 3) timing windows in each torch process (the median).
set -uo pipefail
BUILD=${BUILD:-build-gpu}
OUT=${OUT:-/tmp}
ROUNDS=${1:-3}
BATCHES=${2:-"32 16"}
STEPS=${3:-30}
FT=$BUILD/fittrain
D=${CDEIT_DIR:-/tmp/ftcdeit}
mkdir -p "$D" "$OUT"
R=$OUT/cdeit_ratio.jsonl
: >"$R"
nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || true
[[ -f $D/eit/mean.pth ]] || "$FT" prepare --synthetic eit --train 512 --valid 16 --test 16 --out "$D/eit" \
  >"$OUT/cdeit_prepare.log" 2>&1 || { tail -5 "$OUT/cdeit_prepare.log"; exit 2; }
for r in $(seq 1 "$ROUNDS"); do
  for b in $BATCHES; do
    name=cdeit-b$b-r$r
    rm -rf "${D:?}/$name"
    "$FT" train --task diffusion --model cdeit --data-path "$D/eit" --global-batch-size "$b" --max-steps "$STEPS" \
      --eval-every 0 --ckpt-every 0 --log-every 5 --warmup-steps 5 --results-dir "$D/$name" \
      --metrics-file "$OUT/$name.jsonl" ${FT_TRAIN_EXTRA:-} >"$OUT/$name.log" 2>&1 &&
      python3 bench/fittrain_summary.py "$OUT/$name.jsonl" "$name" $((STEPS / 3)) | tee -a "$R" ||
      { echo "$name failed:"; tail -3 "$OUT/$name.log"; }
    python3 bench/torch_cdeit_bench.py --compile --batches "$b" --windows "${TORCH_WINDOWS:-3}" 2>"$OUT/torch-b$b-r$r.err" |
      grep '^{' | tee -a "$R" || { echo "torch B=$b round $r failed:"; tail -3 "$OUT/torch-b$b-r$r.err"; }
  done
done
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
