#!/usr/bin/env bash
# GPT-2 124M data parallelism with the GPUs' clocks, power and throttle reasons sampled every
# 100 ms by nvidia-smi during each run (bench/smi_summary.py): whether N GPUs run lower clocks
# than one (an H100 at its power cap does: docs/PERFORMANCE.md, session 17). ZeRO-1 on N > 1,
# 32 sequences per GPU, ${STEPS:-40} steps. Device machine, repo root:
#   bash bench/dp_clocks.sh ["1 2"]
set -uo pipefail
GPUS=${1:-"1 2"}
OUT=${OUT:-/tmp/bench_out}
mkdir -p "$OUT"
source bench/gpu_bench_lib.sh
STEPS=${STEPS:-40}
ft_dp_setup || exit 1
for n in $GPUS; do
  z=1
  [ "$n" = 1 ] && z=0
  nvidia-smi --query-gpu=index,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active \
    --format=csv,noheader,nounits -lms 100 >"$OUT/smi_N$n.csv" 2>/dev/null &
  sp=$!
  ft_dp_train "$n" "$z" /tmp/ft_clocks >"$OUT/clocks_N$n.log" 2>&1 || { echo "N=$n failed"; tail -3 "$OUT/clocks_N$n.log"; }
  kill "$sp" 2>/dev/null
  wait "$sp" 2>/dev/null
  echo "N=$n: $(ft_tps /tmp/ft_clocks/m.jsonl) tokens/s"
  python3 bench/smi_summary.py "$OUT/smi_N$n.csv" | sed 's/^/  /'
done
