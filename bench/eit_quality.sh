#!/usr/bin/env bash
# Reconstruction quality on the synthetic EIT set (issue 13): `prepare --synthetic eit`, train a
# diffusion model (default DiT-S on 64x64 images, condition = the 208 voltages), evaluate DDIM
# reconstructions (5 steps, eta 1, EMA weights) by RMSE / PSNR / SSIM against the ground truth
# beside the data's Tikhonov baseline (tr_*), test on the test split, and write sample PNGs.
# Usage: BUILD=build-gpu bash bench/eit_quality.sh [MODEL] [STEPS] [IMAGE]   (logs in $OUT)
set -euo pipefail
BUILD=${BUILD:-build-gpu}
OUT=${OUT:-/tmp}
MODEL=${1:-dit-s}
STEPS=${2:-3000}
IMAGE=${3:-64}
FT=$BUILD/fittrain
D=${EIT_DIR:-/tmp/fteit}
mkdir -p "$D" "$OUT"
data=$D/eit$IMAGE
[[ -f $data/mean.pth ]] || "$FT" prepare --synthetic eit --image-size "$IMAGE" --train "${TRAIN:-4096}" --valid 256 \
  --test 256 --out "$data" | tee "$OUT/eit_prepare.log"
rm -rf "$D/$MODEL"
"$FT" train --task diffusion --model "$MODEL" --data-path "$data" --global-batch-size "${BATCH:-64}" \
  --max-steps "$STEPS" --eval-every $((STEPS / 3)) --eval-images 256 --lr "${LR:-3e-4}" --warmup-steps 100 \
  --results-dir "$D/$MODEL" --metrics-file "$OUT/eit_$MODEL.jsonl" >"$OUT/eit_$MODEL.log" 2>&1 \
  || { tail -20 "$OUT/eit_$MODEL.log"; exit 1; }
grep -E "^chosen|eval  |^done" "$OUT/eit_$MODEL.log"
"$FT" test --data-path "$data" --results-dir "$D/$MODEL" --eval-images 256 2>&1 | grep "^test" | tee "$OUT/eit_${MODEL}_test.log"
"$FT" sample --data-path "$data" --results-dir "$D/$MODEL" --num-images 4 --out "$OUT/samples_$MODEL" 2>&1 | tail -3
