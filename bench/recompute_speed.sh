#!/usr/bin/env bash
# Does the planner's recompute choice pick the faster plan? GPT-2 XL (or MODEL) on DEVICES GPUs
# under --memory-limit LIMIT, global batch 64: the planner's choice (auto) against
# --recompute none and --recompute block, each with its largest micro-batch spread evenly,
# round by round; tokens/s over steps 3-8 of each run, killed after step 8 (before the end's
# checkpoint: GPT-2 XL writes 21.8 GB). Device machine, repo root:
#   [MODEL=gpt2-xl] [ROUNDS=2] bash bench/recompute_speed.sh DEVICES LIMIT
# e.g. bash bench/recompute_speed.sh 2 20GiB (session 37, by hand: auto = none at 1 x 32,
# 78.5k tokens/s; block at 11 x 3, 87.0k; the planner now takes block there, plan/fit.h).
# A configuration memory cannot hold is reported as refused. Logs in $OUT/recompute_*.log.
set -uo pipefail
DEVICES=${1:?devices}
LIMIT=${2:?memory limit, e.g. 20GiB}
MODEL=${MODEL:-gpt2-xl}
OUT=${OUT:-/tmp}
source bench/gpu_bench_lib.sh
ft_dp_setup || exit 1
run() {  # run LABEL FLAGS...: one run; prints "LABEL | chosen | median tokens/s"
  local label=$1 dir=/tmp/recompute_$1
  shift
  rm -rf "$dir"
  ./build-gpu/fittrain train --model "$MODEL" --data-path "$FT_DP_DATA" --global-batch-size 64 --devices "$DEVICES" \
    --memory-limit "$LIMIT" --max-steps 8 --log-every 1 --eval-every 0 --ckpt-every 0 --results-dir "$dir" \
    --metrics-file "$dir/m.jsonl" "$@" >"$OUT/recompute_$label.log" 2>&1 &
  local pid=$! i
  for i in $(seq 1800); do  # up to 180 s for 8 logged steps
    [ "$(grep -c tokens_per_s "$dir/m.jsonl" 2>/dev/null)" = 8 ] && break
    kill -0 $pid 2>/dev/null || break
    sleep 0.1
  done
  pkill -9 -x fittrain  # SIGKILL: SIGTERM would write a checkpoint
  wait $pid 2>/dev/null
  local chosen
  chosen=$(grep -E "^chosen" "$OUT/recompute_$label.log" | sed 's/^chosen *//')
  [ -n "$chosen" ] || { echo "$label | refused: $(grep -m1 -i error "$OUT/recompute_$label.log" | cut -c1-160)"; return; }
  echo "$label | $chosen | $(grep -E "largest micro-batch" "$OUT/recompute_$label.log" | sed 's/^ *//') | $(python3 - "$dir/m.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"tokens_per_s"' in l]
t = [r["tokens_per_s"] for r in rows[2:]]
print(f"{statistics.median(t):,.0f} tokens/s (steps 3-{len(rows)})" if t else "no steps logged")
PY
)"
  rm -rf "$dir"
}
echo "$MODEL on $DEVICES GPU(s) at --memory-limit $LIMIT, global batch 64 ($(nvidia-smi --query-gpu=name --format=csv,noheader | head -1))"
for r in $(seq "${ROUNDS:-2}"); do
  run "auto_r$r"
  run "none_r$r" --recompute none
  run "block_r$r" --recompute block
done
