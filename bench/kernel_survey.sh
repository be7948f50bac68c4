#!/usr/bin/env bash
# Element-wise kernels of the diffusion blocks, timed by fittrain's op table under each
# measurement variant (device machine, repo root, after a build in $BUILD): one line a
# (variant, op, shape) with time and bandwidth, in $OUT/survey.txt; each
# (variant, op) is first checked against the CPU reference (fittrain_ops --mode test). FT_NCU=1 adds Nsight
# Compute's DRAM throughput, occupancy and registers for each op's kernels (default variant);
# FT_NCU_DETAIL="op ..." Nsight Compute's speed-of-light, memory and warp-state sections of
# the first kernel of each such op (default variant), in $OUT/ncu_detail.txt.
#   bash bench/kernel_survey.sh
set -uo pipefail
BUILD=${BUILD:-build-gpu}
OUT=${OUT:-/tmp/survey}
mkdir -p "$OUT"
S=$OUT/survey.txt
OPS=${SURVEY_OPS:-"silu_bwd_recompute silu_bwd_recompute_bias gated_residual_bwd gated_residual_bwd_bias
  gated_residual_win_bwd gated_residual_win_bwd_bias norm_modulate_fwd_rms norm_modulate_win_fwd_rms
  norm_modulate_bwd_rms norm_modulate_win_bwd_rms gated_residual_win_fwd"}
OPS=$(echo $OPS)  # one line
SILU="silu_bwd_recompute_bias"
# each variant: "VAR=VALUE ...|ops" (the defaults run every op in OPS)
VARIANTS=${SURVEY_VARIANTS:-"FT_SILU_BIAS=rows|$SILU;FT_SILU_BIAS=tiles|$SILU"}
IFS=';' read -ra VS <<<"-|$OPS;$VARIANTS"
for VO in "${VS[@]}"; do
  V=${VO%%|*}
  [[ $V == - ]] && V=""
  for op in ${VO#*|}; do
    # the CUDA kernels under this variant against the CPU reference first
    for p in fp32 bf16; do
      env $V timeout 60 "./$BUILD/fittrain_ops" --mode test --backend cuda --precision $p --op "$op" >"$OUT/test.log" 2>&1 ||
        { echo "${V:-default} $op $p: TEST FAILED"; grep -iE "fail|error" "$OUT/test.log" | head -5; }
    done
    env $V timeout 30 "./$BUILD/fittrain_ops" --mode perf --backend cuda --precision bf16 --op "$op" 2>&1 |
      grep -v '^#\|passed' | sed "s/^/${V:-default} /"
  done
done | tee "$S"
if [[ ${FT_NCU:-0} == 1 ]]; then
  NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  M=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,launch__grid_size,launch__occupancy_limit_registers
  for op in $OPS; do
    "$NCU" --clock-control none --metrics $M --csv --print-units base -k 'regex:silu|row_broadcast|norm_modulate|gated' -c 4 \
      "./$BUILD/fittrain_ops" --mode perf --backend cuda --precision bf16 --op "$op" --reps 1 2>/dev/null |
      grep '^"' | awk -F'","' -v op="$op" 'NR > 1 {print op, substr($5, 1, 70), $(NF-2), $NF}' | sed 's/"//g'
  done | tee "$OUT/ncu.txt"
fi
if [[ -n ${FT_NCU_DETAIL:-} ]]; then
  NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  for op in $FT_NCU_DETAIL; do
    echo "== $op"
    k=forward
    [[ $op == *bwd* ]] && k=backward  # the op's own kernel, not the forward that makes its inputs
    "$NCU" --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
      --section Occupancy -k "regex:$k" -c 1 \
      "./$BUILD/fittrain_ops" --mode perf --backend cuda --precision bf16 --op "$op" --reps 1 2>&1 |
      grep -vE '^#|^==PROF==|passed|GB/s' | sed 's/  */ /g'
  done >"$OUT/ncu_detail.txt"
fi
