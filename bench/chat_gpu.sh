#!/usr/bin/env bash
# Prompt/response pretraining on one GPU, end to end: a learnable synthetic task ("reverse:
# w1 .. wk" -> "wk .. w1", 3 to 6 words of 16) written as JSONL, `fittrain prepare` (packed
# rows, loss on responses), `fittrain train --task chat` with BLEU-4 of greedy KV-cache
# responses at every evaluation, then `fittrain test`. Device machine, repo root:
#   bash bench/chat_gpu.sh [steps=600]
# Logs and metrics in $OUT; prints the evaluations (val loss, BLEU-4, generation tokens/s).
set -uo pipefail
STEPS=${1:-600}
OUT=${OUT:-/tmp/chat_out}
mkdir -p "$OUT"
source bench/gpu_bench_lib.sh
ft_build_fittrain || exit 1
W=/tmp/fittrain_chat_bench
rm -rf "$W" && mkdir -p "$W"
python3 - "$W" <<'PY'
import json, random, sys
words = "red blue green cat dog sun moon tree fish bird rock star rain snow wind fire".split()
def write(path, n, seed):
    r = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(n):
            w = [r.choice(words) for _ in range(r.randint(3, 6))]
            f.write(json.dumps({"prompt": "reverse: " + " ".join(w) + "\n", "response": " ".join(reversed(w))}) + "\n")
write(sys.argv[1] + "/train.jsonl", 200000, 1)
write(sys.argv[1] + "/val.jsonl", 2000, 2)
PY
F=./build-gpu/fittrain
$F prepare --input $W/train.jsonl --val-input $W/val.jsonl --out $W/data --seq-len 256 >"$OUT/chat_prepare.log" 2>&1 ||
  { tail -5 "$OUT/chat_prepare.log"; exit 1; }
tail -6 "$OUT/chat_prepare.log"
ARGS="--task chat --data-path $W/data --results-dir $W/run --bleu-samples 512 --eval-max-new-tokens 48 --eval-batches 8"
$F train $ARGS --n-layer 6 --n-head 6 --n-embd 384 --seq-len 256 --global-batch-size 64 --max-steps "$STEPS" --lr 1e-3 --warmup-steps 50 --log-every 50 \
  --eval-every $((STEPS / 4)) --ckpt-every 0 --metrics-file "$OUT/chat_metrics.jsonl" >"$OUT/chat_train.log" 2>&1 ||
  { tail -20 "$OUT/chat_train.log"; exit 1; }
grep -E "^\[.*\] (eval|step +$STEPS/)" "$OUT/chat_train.log" || grep -E "eval|step" "$OUT/chat_train.log" | tail -8
$F test $ARGS >"$OUT/chat_test.log" 2>&1 && tail -1 "$OUT/chat_test.log"
