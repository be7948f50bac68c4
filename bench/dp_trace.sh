#!/usr/bin/env bash
# Where data parallelism's time goes: device traces (FT_TRACE, backend/device_trace.h) of GPT-2
# 124M (T=1024, 32 sequences per GPU, bf16) on 1 GPU and on N GPUs, summarised by
# bench/trace_summary.py against the one-GPU trace; each GPU's one-GPU rate alone (a slow card
# bounds every data-parallel step); and optional variants on the largest N. Device machine:
#   bash bench/dp_trace.sh "2 4" [steps=30]
#   FT_SWEEP="NCCL_PROTO=Simple;FT_BUCKET_MB=32" bash bench/dp_trace.sh "2 4"
# $OUT: trace_summary.txt, dp_trace.txt (tokens/s), traces.tar.gz (every rank's trace), logs.
set -uo pipefail
GPUS=${1:-"2"}
STEPS=${2:-30}
OUT=${OUT:-/tmp/bench_out}
mkdir -p "$OUT"
source bench/gpu_bench_lib.sh
ft_dp_setup || exit 1
T=/tmp/ft_traces
rm -rf $T && mkdir -p $T
nvidia-smi --query-gpu=index,name,clocks.max.sm,power.limit --format=csv >"$OUT/dp_trace.txt"

run() {  # run LABEL N ZERO [env...]: one training run, its tokens/s appended to dp_trace.txt
  local label=$1 n=$2 z=$3
  shift 3
  ft_dp_train "$n" "$z" /tmp/ftdp "$@" >"$T/$label.log" 2>&1 || { echo "$label failed"; tail -5 "$T/$label.log"; }
  echo "$label N=$n zero=$z $* $(ft_tps /tmp/ftdp/m.jsonl)" | tee -a "$OUT/dp_trace.txt"
}

# Each GPU alone, and each N with ZeRO-1 (untraced): scaling against GPU 0 alone.
NG=$(nvidia-smi -L | wc -l)
for g in $(seq 0 $((NG - 1))); do run gpu$g 1 0 CUDA_VISIBLE_DEVICES=$g; done
# Traced: one GPU, then each N with ZeRO-1 and without.
run trace_N1 1 0 FT_TRACE=$T/N1 FT_TRACE_STEPS=20:24
for N in $GPUS; do
  run plain_N${N}_z1 "$N" 1
  run trace_N${N}_z1 "$N" 1 FT_TRACE=$T/N${N}_z1 FT_TRACE_STEPS=20:24
  run trace_N${N}_z0 "$N" 0 FT_TRACE=$T/N${N}_z0 FT_TRACE_STEPS=20:24
done
ft_trace_summaries $T >"$OUT/trace_summary.txt" 2>&1
# Variants on the largest N, untraced, each beside a rerun of the default.
if [ -n "${FT_SWEEP:-}" ]; then
  NMAX=$(echo $GPUS | tr ' ' '\n' | sort -n | tail -1)
  run default_N$NMAX "$NMAX" 1
  IFS=';' read -ra VARIANTS <<<"$FT_SWEEP"
  for V in "${VARIANTS[@]}"; do run "sweep" "$NMAX" "${FT_SWEEP_ZERO:-1}" $V; done
  run default_N$NMAX "$NMAX" 1
fi
tar czf "$OUT/traces.tar.gz" -C $T .
cat "$OUT/dp_trace.txt"
