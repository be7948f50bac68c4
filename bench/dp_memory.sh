#!/usr/bin/env bash
# Planned vs measured whole-process memory of every rank of a multi-GPU fittrain run: each
# GPU's nvidia-smi memory.used sampled every 100 ms while the run goes, less its idle value.
# Device machine, repo root:
#   bash bench/dp_memory.sh LABEL [fittrain train flags...]
# e.g. bash bench/dp_memory.sh xl-16GiB --model gpt2-xl --devices 4 --global-batch-size 64 --memory-limit 16GiB
# Prints the plan fittrain chose, then per GPU: planned process bytes, measured peak, difference.
# Give GPT-2 XL a device call of its own: on 2 H200s (--memory-limit 20GiB, FT_STEPS=4) it had
# not finished 140 s after it started (session 35), and session 16's 4-GPU run had its summary
# cut by the call's limit.
set -uo pipefail
LABEL=$1
shift
OUT=${OUT:-/tmp}
source bench/gpu_bench_lib.sh
ft_dp_setup || exit 1
DATA=$FT_DP_DATA
rm -rf "/tmp/ftmem_$LABEL"
nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits >"$OUT/$LABEL.idle"
nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits -lms 100 >"$OUT/$LABEL.smi" &
smi=$!
sleep 0.3
./build-gpu/fittrain train --data-path "$DATA" --max-steps "${FT_STEPS:-6}" --log-every 1 --eval-every 0 --ckpt-every 0 \
  --results-dir "/tmp/ftmem_$LABEL" --metrics-file "/tmp/ftmem_$LABEL/metrics.jsonl" "$@" >"$OUT/$LABEL.log" 2>&1
rc=$?
sleep 0.3
kill "$smi" 2>/dev/null
wait "$smi" 2>/dev/null
if [ $rc -ne 0 ]; then echo "$LABEL: fittrain failed ($rc)"; tail -8 "$OUT/$LABEL.log"; exit 1; fi
grep -E "^(chosen|  +largest|ranks|budget|  total \(arena\)|  runtime|  process total|  master|  optimizer|  params|  grads|  activations)" "$OUT/$LABEL.log"
grep -E "^step" "$OUT/$LABEL.log" | tail -2
python3 - "$LABEL" "$OUT/$LABEL.idle" "$OUT/$LABEL.smi" "/tmp/ftmem_$LABEL/metrics.jsonl" <<'PY'
import json, sys
label, idle_f, smi, metrics = sys.argv[1:5]
idle = {int(i): int(u) for i, u in (l.split(",") for l in open(idle_f))}
peak = {}
for l in open(smi):
    p = l.split(",")
    if len(p) == 2 and p[1].strip().isdigit():
        i = int(p[0]); peak[i] = max(peak.get(i, 0), int(p[1]) - idle.get(i, 0))
r = [json.loads(l) for l in open(metrics)][-1]
planned = r["mem_process_planned_bytes"]
for i in sorted(peak):
    if peak[i] <= 0: continue
    m = peak[i] * 2**20
    print(f"{label} GPU {i}: planned {planned/2**30:.3f} GiB, measured peak {m/2**30:.3f} GiB, "
          f"measured/planned {100*(m-planned)/planned:+.2f}%; step tokens/s {r['tokens_per_s']:.0f}")
PY
