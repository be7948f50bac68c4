#!/usr/bin/env bash
# SASRec's MovieLens-1M comparison (issue 15): given the real ml-1m `ratings.dat`
# (https://grouplens.org/datasets/movielens/1m/, not shipped here), prepares it, trains the
# SASRec-sized configuration (2 blocks, 1 head, 50 wide, 200 items of history; the `sasrec`
# preset), then prints both metric sets of `fittrain test` on the test items (each user's last
# rating) next to the published numbers:
#   SASRec (Kang & McAuley 2018), 100 sampled negatives: HR@10 0.8245, NDCG@10 0.5905
#   full ranking (as reported since Krichene & Rendle 2020): about 0.25 / 0.13
# The CUDA attention kernels take head sizes 32, 64 and 128, so on a GPU the width is 64
# (1 head of 64) unless WIDTH says otherwise; on the CPU it is SASRec's 50.
# Usage: bash bench/rec_ml1m.sh RATINGS.dat [STEPS] [DEVICE]   (BUILD, OUT, WIDTH, LOSS, NEG)
set -euo pipefail
RATINGS=${1:?usage: bash bench/rec_ml1m.sh path/to/ml-1m/ratings.dat [STEPS] [cpu|cuda]}
STEPS=${2:-9400}   # 200 epochs of 6040 users in batches of 128 (SASRec trains 200 epochs)
DEVICE=${3:-auto}
BUILD=${BUILD:-build}
OUT=${OUT:-/tmp/ft_ml1m}
FT=$BUILD/fittrain
mkdir -p "$OUT"
[[ -f $OUT/data/interactions.rec ]] || "$FT" prepare --ratings "$RATINGS" --out "$OUT/data"
if [[ -z ${WIDTH:-} ]]; then
  if [[ $DEVICE == cpu ]] || ! command -v nvidia-smi >/dev/null; then WIDTH=50; else WIDTH=64; fi
fi
rm -rf "$OUT/run"
"$FT" train --task rec --model sasrec --n-embd "$WIDTH" --device "$DEVICE" --data-path "$OUT/data" \
  --rec-loss "${LOSS:-bpr}" --negatives "${NEG:-1}" --global-batch-size 128 --lr 1e-3 --beta2 0.98 \
  --weight-decay 0 --warmup-steps 100 --max-steps "$STEPS" --eval-every $((STEPS / 10)) --results-dir "$OUT/run" \
  --metrics-file "$OUT/metrics.jsonl" 2>&1 | tee "$OUT/train.log" | grep -E "^(chosen|eval|done)"
"$FT" test --data-path "$OUT/data" --results-dir "$OUT/run" --eval-batches 0 | tee "$OUT/test.log"
python3 - "$OUT/test.log" <<'PY'
import re, sys
line = open(sys.argv[1]).read()
m = {k: float(v) for k, v in re.findall(r"\| (\w+) ([0-9.]+)", line)}
print(f"{'':22}{'HR@10':>8}{'NDCG@10':>9}   {'full HR@10':>11}{'full NDCG@10':>13}")
print(f"{'fittrain (test items)':22}{m['hr10']:8.4f}{m['ndcg10']:9.4f}   {m['full_hr10']:11.4f}{m['full_ndcg10']:13.4f}")
print(f"{'popularity (same code)':22}{m['pop_hr10']:8.4f}{m['pop_ndcg10']:9.4f}   {m['pop_full_hr10']:11.4f}{m['pop_full_ndcg10']:13.4f}")
print(f"{'SASRec, published':22}{0.8245:8.4f}{0.5905:9.4f}   {'~0.25':>11}{'~0.13':>13}")
PY
