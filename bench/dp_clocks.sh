#!/usr/bin/env bash
# GPT-2 124M data parallelism with the GPUs' clocks, power and throttle reasons sampled every
# 100 ms by nvidia-smi during each run (bench/smi_summary.py): whether N GPUs run lower clocks
# than one (an H100 at its power cap does: docs/PERFORMANCE.md, session 17). ZeRO-1 on N > 1,
# 32 sequences per GPU, ${STEPS:-40} steps. Device machine, repo root:
#   bash bench/dp_clocks.sh ["1 2"]
# FT_EACH_CARD=1 runs the one-GPU case on every card in turn (CUDA_VISIBLE_DEVICES), so a card
# slower than the others alone shows as such: data parallelism waits for its slowest rank, and
# the one-GPU base of bench/dp_scaling.sh is card 0 (docs/PERFORMANCE.md, session 24).
set -uo pipefail
GPUS=${1:-"1 2"}
OUT=${OUT:-/tmp/bench_out}
mkdir -p "$OUT"
source bench/gpu_bench_lib.sh
STEPS=${STEPS:-40}
ft_dp_setup || exit 1
CARDS=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
# run NAME N [CARD]: one run sampled, on the first N GPUs or (N = 1) on card CARD alone
run() {
  local name=$1 n=$2 z=1 vis=()
  [ "$n" = 1 ] && z=0
  [ -n "${3:-}" ] && vis=(CUDA_VISIBLE_DEVICES="$3")
  nvidia-smi --query-gpu=index,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active \
    --format=csv,noheader,nounits -lms 100 >"$OUT/smi_$name.csv" 2>/dev/null &
  local sp=$!
  ft_dp_train "$n" "$z" /tmp/ft_clocks "${vis[@]}" >"$OUT/clocks_$name.log" 2>&1 ||
    { echo "$name failed"; tail -3 "$OUT/clocks_$name.log"; }
  kill "$sp" 2>/dev/null
  wait "$sp" 2>/dev/null
  echo "$name: $(ft_tps /tmp/ft_clocks/m.jsonl) tokens/s"
  python3 bench/smi_summary.py "$OUT/smi_$name.csv" | sed 's/^/  /'
}
for n in $GPUS; do
  if [ "$n" = 1 ] && [ -n "${FT_EACH_CARD:-}" ]; then
    for c in $(seq 0 $((CARDS - 1))); do run "N1_card$c" 1 "$c"; done
  else
    run "N$n" "$n"
  fi
done
