#!/usr/bin/env bash
# Whole-process device memory of a fittrain run against its plan, measured the way a user
# sees it: nvidia-smi's memory.used of the GPU, sampled every 50 ms while the run goes, less
# the idle baseline before the process started. Run on the device machine from the repo root:
#   bash bench/process_memory.sh LABEL [fittrain train flags...]
# e.g. bash bench/process_memory.sh gpt2-16GiB --model gpt2 --global-batch-size 512 --memory-limit 16GiB
# Prints one line: label, planned process bytes (the plan's total: arena + runtime), measured
# peak, their difference in %, and whether the peak stayed under --memory-limit. Logs go to
# $OUT (or /tmp): LABEL.log (fittrain's output) and LABEL.smi (the samples).
# FT_BIN (default build-gpu/fittrain) picks the binary.
set -uo pipefail
LABEL=$1
shift
OUT=${OUT:-/tmp}
BIN=${FT_BIN:-build-gpu/fittrain}
DATA=${FT_TOKENS:-/tmp/fittrain_bench_tokens.bin}
GPU=${CUDA_VISIBLE_DEVICES:-0}
GPU=${GPU%%,*}
[ -f "$DATA" ] || { source bench/gpu_bench_lib.sh; ft_make_tokens "$DATA" $((64 * 1025 * 64)); }
rm -rf "/tmp/ftmem_$LABEL"
idle=$(nvidia-smi -i "$GPU" --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
nvidia-smi -i "$GPU" --query-gpu=timestamp,memory.used --format=csv,noheader,nounits -lms 50 >"$OUT/$LABEL.smi" &
smi=$!
sleep 0.3
"$BIN" train --data-path "$DATA" --max-steps "${FT_STEPS:-6}" --log-every 1 --eval-every 0 --ckpt-every 0 \
  --results-dir "/tmp/ftmem_$LABEL" --metrics-file "/tmp/ftmem_$LABEL/metrics.jsonl" "$@" >"$OUT/$LABEL.log" 2>&1
rc=$?
sleep 0.3
kill "$smi" 2>/dev/null
wait "$smi" 2>/dev/null
if [ $rc -ne 0 ]; then echo "$LABEL: fittrain failed ($rc)"; tail -5 "$OUT/$LABEL.log"; exit 1; fi
python3 - "$LABEL" "$idle" "$OUT/$LABEL.smi" "/tmp/ftmem_$LABEL/metrics.jsonl" "$*" <<'PY'
import json, re, sys
label, idle, smi, metrics, args = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
used = [int(l.split(",")[1]) for l in open(smi) if l.count(",") == 1 and l.split(",")[1].strip().isdigit()]
peak = (max(used) - idle) * 2**20
rows = [json.loads(l) for l in open(metrics)]
r = rows[-1]
planned = r.get("mem_process_planned_bytes", r["mem_planned_bytes"])
m = re.search(r"--memory-limit (\S+)", args)
limit = None
if m:
    v = m.group(1); units = {"GiB": 2**30, "MiB": 2**20, "GB": 10**9, "MB": 10**6}
    for u, f in units.items():
        if v.endswith(u): limit = float(v[:-len(u)]) * f; break
    else: limit = float(v)
print(f"{label}: planned {planned/2**30:.3f} GiB (arena {r['mem_planned_bytes']/2**30:.3f}), "
      f"measured peak {peak/2**30:.3f} GiB ({len(used)} samples, idle {idle} MiB), "
      f"measured/planned {100*(peak-planned)/planned:+.2f}%"
      + (f", limit {limit/2**30:.2f} GiB: {'under' if peak <= limit else 'OVER'}" if limit else ""))
PY
