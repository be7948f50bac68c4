#!/usr/bin/env bash
# The GPT-2 recommender at MovieLens-1M size on the device (issue 15): `fittrain prepare
# --synthetic movielens` (6040 users, 3706 items, 1,000,209 ratings, ML-1M-shaped), then
#   1. quality: the gpt2rec preset (2 blocks, 2 heads, 64 wide, 200 items of history), BPR,
#      trained STEPS steps of 128 users, evaluated on every user (HR@10/NDCG@10, sampled and
#      full ranking, beside the popularity baseline), then `fittrain test` on the test items;
#   2. throughput: sequences (users) per second with the item table on and off (and the
#      full cross-entropy head), from the metrics file's samples_per_s after warm-up.
# With DEVICES > 1 the quality run is data-parallel (--devices N) and its metrics are compared
# with a single-device run in the same call.
# Usage: BUILD=build-gpu bash bench/rec_gpu.sh [STEPS] [DEVICES]   (logs in $OUT; REC_SPEED=0 skips 2.)
set -euo pipefail
BUILD=${BUILD:-build-gpu}
OUT=${OUT:-/tmp}
STEPS=${1:-3000}
DEVICES=${2:-1}
FT=$BUILD/fittrain
D=${REC_DIR:-/tmp/ftrec}
mkdir -p "$D" "$OUT"
[[ -f $D/ml1m/interactions.rec ]] || "$FT" prepare --synthetic movielens --out "$D/ml1m" | tee "$OUT/rec_prepare.log"
COMMON=(--task rec --model gpt2rec --data-path "$D/ml1m" --global-batch-size 128 --lr 2e-3 --warmup-steps 100
        --num-workers 1 --log-every 50)

quality() {  # name devices
  local name=$1 dev=$2
  rm -rf "$D/$name"
  "$FT" train "${COMMON[@]}" --devices "$dev" --max-steps "$STEPS" --eval-every $((STEPS / 3)) --ckpt-every 0 \
    --results-dir "$D/$name" --metrics-file "$OUT/rec_$name.jsonl" >"$OUT/rec_$name.log" 2>&1
  grep -E "^chosen|largest micro|eval  " "$OUT/rec_$name.log" | tail -5
  "$FT" test --data-path "$D/ml1m" --results-dir "$D/$name" 2>&1 | grep "^test" | tee -a "$OUT/rec_$name.log"
}
speed() {  # name extra flags...
  local name=$1
  shift
  rm -rf "$D/$name"
  "$FT" train "${COMMON[@]}" --devices 1 --max-steps 400 --eval-every 0 --ckpt-every 0 --results-dir "$D/$name" \
    --metrics-file "$OUT/rec_$name.jsonl" "$@" >"$OUT/rec_$name.log" 2>&1 || { tail -5 "$OUT/rec_$name.log"; return; }
  python3 - "$OUT/rec_$name.jsonl" "$name" <<'PY'
import json, sys, statistics
rows = [json.loads(l) for l in open(sys.argv[1]) if '"samples_per_s"' in l]
sps = [r["samples_per_s"] for r in rows if r["step"] > 100]
tps = [r["tokens_per_s"] for r in rows if r["step"] > 100]
print(f"speed {sys.argv[2]:>12}: {statistics.median(sps):,.0f} sequences/s, {statistics.median(tps):,.0f} positions/s, "
      f"peak {rows[-1]['mem_peak_bytes']/2**20:.1f} MiB (planned {rows[-1]['mem_planned_bytes']/2**20:.1f} MiB)")
PY
}

nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || true
quality single 1
if [[ $DEVICES -gt 1 ]]; then quality dp$DEVICES "$DEVICES"; fi
[[ ${REC_SPEED:-1} == 0 ]] && exit 0
speed table_on --item-cache on
speed table_off --item-cache off
speed ce --rec-loss ce
