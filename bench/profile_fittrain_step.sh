#!/usr/bin/env bash
# Where fittrain's time goes on the GPT-2 124M training step: every kernel of two steps timed
# by Nsight Compute (gpu__time_duration only: one pass, no replay), grouped by kernel name.
# Run on the device machine from the repo root: bash bench/profile_fittrain_step.sh [B=16]
# Writes $OUT/fittrain_kernels_B<B>.txt (ms per step, launches per step, name).
set -uo pipefail
B=${1:-16}
OUT=${OUT:-/tmp}
source bench/gpu_bench_lib.sh
ft_build_fittrain || exit 1
DATA=/tmp/fittrain_prof_tokens.bin
ft_make_tokens "$DATA" $((B * 1025 * 8))
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
rm -rf /tmp/ftprof
"$NCU" --clock-control none --metrics gpu__time_duration.sum --csv --print-units base \
  ./build-gpu/fittrain train --model gpt2 --data-path "$DATA" --global-batch-size "$B" --micro-batch-size "$B" \
  --max-steps 3 --log-every 1 --eval-every 0 --ckpt-every 0 --results-dir /tmp/ftprof >/tmp/ncu_raw.csv 2>/tmp/ncu.err \
  || { tail -20 /tmp/ncu.err; exit 1; }
python3 bench/ncu_kernels.py /tmp/ncu_raw.csv "$OUT/fittrain_kernels_B$B.txt" "fittrain GPT-2 B=$B"
