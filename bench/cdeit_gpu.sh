#!/usr/bin/env bash
# fittrain's CDEIT against bench/torch_cdeit_bench.py (the same network in PyTorch,
# scripts/cdeit_torch.py) on one GPU (issue 13): 128x128 EIT images with the voltage map as a
# second channel, bf16, training images/s and memory at global batches 16 (CDEIT's), 32, 64;
# then the largest global batch `fittrain plan` fits in 16 GiB (the users' cores) without
# accumulation and the plan it chooses for CDEIT's failing setting, --global-batch-size 64.
# Usage: BUILD=build-gpu bash bench/cdeit_gpu.sh [STEPS] [BATCHES]   (logs in $OUT; TORCH=0|only;
#        TORCH_MODES="eager compile" by default, "compile" for torch.compile alone;
#        FT_TRAIN_EXTRA: more flags for fittrain train, e.g. --ema-decay=0 as the PyTorch script;
#        FT_LOG_EVERY: fittrain's logging interval, default 5: its rate is the median of these
#        windows after step STEPS/3 (20 with STEPS=80: three windows of 20 steps, as the
#        PyTorch script's --windows 3 of --steps 20);
#        TORCH_EXTRA: more flags for bench/torch_cdeit_bench.py, e.g. --windows 3;
#        ARENA_CAP_GIB: cap fittrain's arena (e.g. 14.20, torch.compile's peak at batch 32 on an
#        H200, docs/PERFORMANCE.md session 23): --memory-limit is that plus the runtime that
#        `fittrain plan --json` measures, so the memory left over that fittrain spends on speed
#        (kept blocks) stays within the cap and the comparison is at no more memory)
set -uo pipefail
BUILD=${BUILD:-build-gpu}
OUT=${OUT:-/tmp}
STEPS=${1:-30}
BATCHES=${2:-"16 32 64"}
FT=$BUILD/fittrain
D=${CDEIT_DIR:-/tmp/ftcdeit}
mkdir -p "$D" "$OUT"
nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || true
if [[ ${TORCH:-1} != only ]]; then
  [[ -f $D/eit/mean.pth ]] || "$FT" prepare --synthetic eit --train 512 --valid 16 --test 16 --out "$D/eit" \
    >"$OUT/cdeit_prepare.log" 2>&1 || { tail -5 "$OUT/cdeit_prepare.log"; exit 2; }
  for b in $BATCHES; do
    name=cdeit-b$b
    rm -rf "$D/$name"
    cap=()
    if [[ -n ${ARENA_CAP_GIB:-} ]]; then
      lim=$("$FT" plan --task diffusion --model cdeit --data-path "$D/eit" --global-batch-size "$b" --json 2>/dev/null |
        python3 -c "import json, sys; print(int($ARENA_CAP_GIB * 2**30 + json.load(sys.stdin)['bytes']['runtime']))") ||
        { echo "$name: no plan for ARENA_CAP_GIB"; continue; }
      cap=(--memory-limit "$lim")
    fi
    "$FT" train --task diffusion --model cdeit --data-path "$D/eit" --global-batch-size "$b" --max-steps "$STEPS" \
      --eval-every 0 --ckpt-every 0 --log-every "${FT_LOG_EVERY:-5}" --warmup-steps 5 --results-dir "$D/$name" \
      --metrics-file "$OUT/$name.jsonl" "${cap[@]}" ${FT_TRAIN_EXTRA:-} >"$OUT/$name.log" 2>&1 || { echo "$name failed:"; tail -3 "$OUT/$name.log"; continue; }
    python3 bench/fittrain_summary.py "$OUT/$name.jsonl" "$name" $((STEPS / 3))
  done
  "$FT" plan --task diffusion --model cdeit --data-path "$D/eit" --global-batch-size 64 --memory-limit 16GiB \
    2>&1 | grep -E "^chosen|largest micro|process" | head -4
fi
if [[ ${TORCH:-1} != 0 ]]; then
  bl=$(echo "$BATCHES" | tr ' ' ',')
  for mode in ${TORCH_MODES:-eager compile}; do
    flag=$([[ $mode == compile ]] && echo --compile)
    python3 bench/torch_cdeit_bench.py $flag --batches "$bl" ${TORCH_EXTRA:-} 2>&1 | grep -E '^\{|Error' || true
  done
fi
