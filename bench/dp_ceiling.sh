#!/usr/bin/env bash
# What data parallelism could reach without any communication: N independent single-GPU
# fittrain runs of GPT-2 124M (T=1024, 32 sequences) at the same time, one per GPU, against
# one run alone and one N-GPU data-parallel run, in the same call. The independent runs'
# summed tokens/s over N x the lone run's is the ceiling of the scaling efficiency on this
# machine (clocks, power and memory shared by busy GPUs), before any collective.
#   bash bench/dp_ceiling.sh N [steps=30]        (device machine, repo root; logs in $OUT)
set -uo pipefail
N=${1:-2}
STEPS=${2:-30}
OUT=${OUT:-/tmp/bench_out}
mkdir -p "$OUT"
CARD=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
source bench/gpu_bench_lib.sh
ft_dp_setup || exit 1
DATA=$FT_DP_DATA
run() {  # NAME GPUS(list for CUDA_VISIBLE_DEVICES) DEVICES GLOBAL
  rm -rf "/tmp/ftc_$1"
  CUDA_VISIBLE_DEVICES=$2 ./build-gpu/fittrain train --model gpt2 --data-path "$DATA" --global-batch-size "$4" \
    --micro-batch-size 32 --devices "$3" --max-steps "$STEPS" --log-every 5 --eval-every 0 --ckpt-every 0 \
    --keep-checkpoints 1 --results-dir "/tmp/ftc_$1" --metrics-file "/tmp/ftc_$1/m.jsonl" >"$OUT/ceiling_$1.log" 2>&1
}
run alone 0 1 32
alone=$(ft_tps /tmp/ftc_alone/m.jsonl)
for ((i = 0; i < N; ++i)); do run "indep$i" "$i" 1 32 & done
wait
sum=0
for ((i = 0; i < N; ++i)); do sum=$((sum + $(ft_tps /tmp/ftc_indep$i/m.jsonl))); done
all=$(seq -s, 0 $((N - 1)))
run dp "$all" "$N" $((32 * N))
dp=$(ft_tps /tmp/ftc_dp/m.jsonl)
python3 - "$CARD" "$N" "$alone" "$sum" "$dp" <<'PY'
import sys
card, n, alone, indep, dp = sys.argv[1], int(sys.argv[2]), *map(int, sys.argv[3:6])
print(f"{card}, GPT-2 124M T=1024 32 seq/GPU: one GPU alone {alone/1e3:,.0f}k tok/s; {n} independent runs at once "
      f"{indep/1e3:,.0f}k ({100*indep/(n*alone):.1f}% of {n} x alone: the ceiling); data-parallel on {n} "
      f"{dp/1e3:,.0f}k ({100*dp/(n*alone):.1f}% of {n} x alone, {100*dp/indep:.1f}% of the independent runs)")
PY
