#!/usr/bin/env bash
# fittrain's conditional DiT against bench/torch_dit_bench.py on one GPU (issue 13): DiT-S and
# DiT-B, 64x64x1 images, patch 4 (256 tokens), condition vector of 208 (the EIT voltages),
# bf16, training images/s and peak memory at global batches 64, 128, 256. fittrain trains on
# `prepare --synthetic eit --image-size 64` data (the model draws the noise on the device);
# images/s is the median of the metrics file's samples_per_s after STEPS/4 steps; memory is the
# measured arena peak and the planned whole process (arena + CUDA runtime).
# Usage: BUILD=build-gpu bash bench/dit_gpu.sh [STEPS] [PRESETS] [BATCHES]    (logs in $OUT)
#        TORCH=0 skips PyTorch; TORCH=only runs only PyTorch; TORCH_MODES="eager compile" by
#        default, "compile" for torch.compile alone. FT_TRAIN_EXTRA: more flags for fittrain
#        train, e.g. --ema-decay=0 (the PyTorch script keeps no EMA of the weights).
set -uo pipefail
BUILD=${BUILD:-build-gpu}
OUT=${OUT:-/tmp}
STEPS=${1:-40}
PRESETS=${2:-"s b"}
BATCHES=${3:-"64 128 256"}
FT=$BUILD/fittrain
D=${DIT_DIR:-/tmp/ftdit}
mkdir -p "$D" "$OUT"
nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || true
if [[ ${TORCH:-1} != only ]]; then
  [[ -f $D/eit64/mean.pth ]] || "$FT" prepare --synthetic eit --image-size 64 --train 1024 --valid 32 --test 32 \
    --out "$D/eit64" >"$OUT/dit_prepare.log" 2>&1 || { tail -5 "$OUT/dit_prepare.log"; exit 2; }
  for p in $PRESETS; do
    for b in $BATCHES; do
      name=dit-$p-b$b
      rm -rf "$D/$name"
      "$FT" train --task diffusion --model "dit-$p" --data-path "$D/eit64" --global-batch-size "$b" \
        --max-steps "$STEPS" --eval-every 0 --ckpt-every 0 --log-every 5 --warmup-steps 5 --results-dir "$D/$name" \
        --metrics-file "$OUT/$name.jsonl" ${FT_TRAIN_EXTRA:-} >"$OUT/$name.log" 2>&1 || { echo "$name failed:"; tail -3 "$OUT/$name.log"; continue; }
      python3 bench/fittrain_summary.py "$OUT/$name.jsonl" "$name" $((STEPS / 4))
    done
  done
fi
if [[ ${TORCH:-1} != 0 ]]; then
  bl=$(echo "$BATCHES" | tr ' ' ',')
  for p in $PRESETS; do
    P=$(echo "$p" | tr a-z A-Z)
    for mode in ${TORCH_MODES:-eager compile}; do
      flag=$([[ $mode == compile ]] && echo --compile)
      python3 bench/torch_dit_bench.py $flag --preset "$P" --batches "$bl" 2>&1 | grep '^{' || true
    done
  done
fi
