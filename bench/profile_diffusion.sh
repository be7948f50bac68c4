#!/usr/bin/env bash
# Where the diffusion models' training step spends its time (issue 13): every kernel of a few
# fittrain steps timed by Nsight Compute (gpu__time_duration only: one pass, no replay) and
# grouped by name over one steady step, beside torch.compile's kernels for the same step
# (torch.profiler, bench/profile_torch_diffusion.py). Run on the device from the repo root:
#   [DIT_MODEL=dit-s] bash bench/profile_diffusion.sh [DIT_BATCH=256] [CDEIT_BATCH=32]   (tables in $OUT)
# A DiT batch of 0 profiles CDEIT alone.
set -uo pipefail
BD=${1:-256}
BC=${2:-32}
DM=${DIT_MODEL:-dit-s}
OUT=${OUT:-/tmp}
source bench/gpu_bench_lib.sh
ft_build_fittrain || exit 1
FT=./build-gpu/fittrain
D=/tmp/ftprof_diff
mkdir -p "$D"
[[ -f $D/eit64/mean.pth ]] || $FT prepare --synthetic eit --image-size 64 --train 512 --valid 16 --test 16 --out $D/eit64 >/dev/null
[[ -f $D/eit128/mean.pth ]] || $FT prepare --synthetic eit --train 256 --valid 16 --test 16 --out $D/eit128 >/dev/null
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
prof() {  # prof LABEL MODEL DATA BATCH
  rm -rf "$D/run"
  "$NCU" --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --print-units base \
    $FT train --task diffusion --model "$2" --data-path "$3" --global-batch-size "$4" --micro-batch-size "$4" \
    --max-steps 4 --log-every 1 --eval-every 0 --ckpt-every 0 --results-dir "$D/run" >"$D/$1.csv" 2>"$D/$1.err" \
    || { tail -20 "$D/$1.err"; return 1; }
  grep -q '"Kernel Name"' "$D/$1.csv" || { echo "$1: no kernel table"; tail -5 "$D/$1.err"; grep -v '^"' "$D/$1.csv" | tail -8; return 1; }
  python3 bench/ncu_kernels.py "$D/$1.csv" "$OUT/$1.txt" "fittrain $2 B=$4" | head -${ROWS:-45}
}
[[ ${TORCH:-1} == only ]] || {
  [[ $BD == 0 ]] || prof fittrain_${DM//-/_}_b$BD "$DM" $D/eit64 "$BD"
  prof fittrain_cdeit_b$BC cdeit $D/eit128 "$BC"
}
[[ ${TORCH:-1} == 0 ]] || {
  [[ $BD == 0 ]] || python3 bench/profile_torch_diffusion.py --model "$DM" --batch "$BD" --out "$OUT"
  python3 bench/profile_torch_diffusion.py --model cdeit --batch "$BC" --out "$OUT"
}
