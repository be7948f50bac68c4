#!/usr/bin/env bash
# GPT-2 124M, T=1024, one GPU: fittrain vs the PyTorch baseline (eager and torch.compile),
# in the same call on the same card. Run on the device machine from the repo root:
#   bash bench/bench_gpt2.sh [batches=16,32,64] [steps=30]
# Prints a markdown table (tokens/s, peak memory, ratios) and writes logs to $OUT.
set -uo pipefail
BATCHES=${1:-16,32,64}
STEPS=${2:-30}
OUT=${OUT:-/tmp/bench_out}
mkdir -p "$OUT"
CARD=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
source bench/gpu_bench_lib.sh
ft_build_fittrain || exit 1
DATA=/tmp/fittrain_bench_tokens.bin
ft_make_tokens "$DATA" $((64 * 1025 * 64))
declare -A FT_TPS FT_MEM
IFS=, read -ra BS <<<"$BATCHES"
for B in "${BS[@]}"; do
  rm -rf /tmp/ftbench && M=/tmp/ftbench/metrics.jsonl
  ./build-gpu/fittrain train --model gpt2 --data-path "$DATA" --global-batch-size "$B" --micro-batch-size "$B" \
    --max-steps "$STEPS" --log-every 5 --eval-every 0 --ckpt-every 0 --keep-checkpoints 1 --results-dir /tmp/ftbench \
    --metrics-file "$M" >"$OUT/fittrain_B$B.log" 2>&1
  rc=$?
  if [ $rc -ne 0 ]; then echo "fittrain B=$B failed ($rc)"; tail -5 "$OUT/fittrain_B$B.log"; continue; fi
  read -r tps mem < <(python3 - "$M" <<'PY'
import json, sys, statistics
rows = [json.loads(l) for l in open(sys.argv[1]) if '"tokens_per_s"' in l]
# all logged intervals after the first (warm-up), as total tokens / total time: the same
# statistic as the PyTorch script's (mean step time over its timed steps)
tps = statistics.harmonic_mean([r["tokens_per_s"] for r in rows[1:]]) if len(rows) > 1 else rows[0]["tokens_per_s"]
print(round(tps), rows[-1]["mem_measured_bytes"])
PY
)
  FT_TPS[$B]=$tps; FT_MEM[$B]=$mem
done
: >"$OUT/torch_eager.jsonl"; : >"$OUT/torch_compile.jsonl"
if [ -z "${SKIP_TORCH:-}" ]; then
  python3 bench/torch_gpt2_bench.py --batches "$BATCHES" --steps 20 >"$OUT/torch_eager.jsonl" 2>"$OUT/torch_eager.err"
  python3 bench/torch_gpt2_bench.py --compile --batches "$BATCHES" --steps 20 >"$OUT/torch_compile.jsonl" 2>"$OUT/torch_compile.err"
fi
{
  for B in "${BS[@]}"; do echo "ft $B ${FT_TPS[$B]:-0} ${FT_MEM[$B]:-0}"; done
} >"$OUT/fittrain.txt"
python3 - "$OUT" "$CARD" <<'PY'
import json, sys
out, card = sys.argv[1], sys.argv[2]
def load(name):
    d = {}
    for l in open(f"{out}/{name}"):
        try: r = json.loads(l); d[r["B"]] = r
        except Exception: pass
    return d
eager, comp = load("torch_eager.jsonl"), load("torch_compile.jsonl")
ft = {}
for l in open(f"{out}/fittrain.txt"):
    _, b, t, m = l.split(); ft[int(b)] = (int(t), int(m))
print(f"\nGPT-2 124M, T=1024, bf16, one {card}; tokens/s (peak GiB)")
print("| B | fittrain | torch eager | torch.compile | fittrain / compile | memory fittrain / compile |")
print("|---|---|---|---|---|---|")
for b in sorted(ft):
    t, m = ft[b]; e = eager.get(b, {}); c = comp.get(b, {})
    ct = c.get("tokens_per_s", 0)
    cm = c.get("peak_alloc_gib", 0)
    print(f"| {b} | {t:,} ({m/2**30:.1f}) | {e.get('tokens_per_s',0):,} ({e.get('peak_alloc_gib',0)}) | {ct:,} ({cm}) | "
          f"{(t/ct if ct else 0):.2f}x | {((m/2**30)/cm if cm else 0):.2f} |")
PY
