#!/usr/bin/env bash
# fp16 vs bf16 through the real trainer (CLI, loss scaler included), GPT-2 124M B=8, 80 steps
# on a learnable token pattern (device machine). Logs: $OUT/smoke_{bf16,fp16}.log.
set -u
cd "$(dirname "$0")/.."  # repo root; needs build-gpu/fittrain
OUT=${OUT:-/tmp}
mkdir -p "$OUT"
DATA=/tmp/ft_pattern.bin
python3 - "$DATA" <<'PY'
import sys, array, random
random.seed(0)
n = 64 * 1025 * 8
toks = array.array('H')
while len(toks) < n:
    s = random.randrange(0, 5000); L = random.randrange(8, 64)
    toks.extend((s + 7 * i) % 50257 for i in range(L))
toks = toks[:n]
hdr = array.array('i', [0] * 256); hdr[0], hdr[1], hdr[2] = 20240520, 1, n
with open(sys.argv[1], 'wb') as f:
    hdr.tofile(f); toks.tofile(f)
PY
for P in bf16 fp16; do
  rm -rf /tmp/ftsm_$P
  ./build-gpu/fittrain train --model gpt2 --data-path $DATA --global-batch-size 8 --micro-batch-size 8 \
    --precision $P --max-steps 80 --log-every 10 --eval-every 0 --ckpt-every 0 --keep-checkpoints 1 \
    --results-dir /tmp/ftsm_$P --lr 6e-4 > $OUT/smoke_$P.log 2>&1
  echo "== $P rc=$?"; grep -E "step|overflow|scale|error" $OUT/smoke_$P.log | tail -14
done
