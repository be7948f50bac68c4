#!/usr/bin/env bash
# Planned vs measured whole-process memory of every rank of a multi-GPU fittrain run: each
# GPU's nvidia-smi memory.used sampled every 100 ms while the run goes, less its idle value.
# Device machine, repo root:
#   bash bench/dp_memory.sh LABEL [fittrain train flags...]
# e.g. bash bench/dp_memory.sh xl-16GiB --model gpt2-xl --devices 4 --global-batch-size 64 --memory-limit 16GiB
# Prints the plan fittrain chose, then per GPU: planned process bytes, measured peak, difference,
# and when each phase began (seconds after the start: $OUT/LABEL.tlog has every line so); each
# fittrain process's host peak RSS beside the host plan, and each rank's own figures from the
# metrics (host plan and peak resident set, VmHWM, by the last logged step).
# FT_MEM_TIMEOUT (default 480 s) ends fittrain; its steps logged by then are still summed up, so
# the end-of-run evaluation and checkpoint (GPT-2 XL: 21.8 GB written by rank 0, 26 s on 2 H200s
# in session 36) cannot take the call's files with them.
# FT_BIN: another fittrain binary (default ./build-gpu/fittrain), e.g. an older commit's build.
# Give GPT-2 XL a device call of its own: on 2 H200s (FT_STEPS=4) a run takes 48-76 s from start
# to its checkpoint (session 36), and session 16's 4-GPU run had its summary cut by the call's
# limit when it shared one.
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
# Host memory: every fittrain process's resident set (VmRSS), sampled every 200 ms; its
# largest value per process goes to LABEL.rss (pid, peak bytes, the second it was seen).
python3 - "$OUT/$LABEL.rss" <<'PY' &
import os, sys, time
peak, t0 = {}, time.time()
def sample():
    for pid in os.listdir("/proc"):
        try:
            if not pid.isdigit() or open(f"/proc/{pid}/comm").read().strip() != "fittrain": continue
            for l in open(f"/proc/{pid}/status"):
                if l.startswith("VmRSS:"):
                    b = int(l.split()[1]) * 1024
                    if b > peak.get(pid, (0, 0))[0]: peak[pid] = (b, time.time() - t0)
        except OSError:
            pass
while True:  # until killed
    sample()
    with open(sys.argv[1] + ".tmp", "w") as f:  # replaced whole: a kill never leaves half a file
        for pid, (b, t) in sorted(peak.items(), key=lambda kv: int(kv[0])): f.write(f"{pid} {b} {t:.1f}\n")
    os.replace(sys.argv[1] + ".tmp", sys.argv[1])
    time.sleep(0.2)
PY
rss=$!
sleep 0.3
# Each line also goes to LABEL.tlog with the seconds since the start (fittrain's stdout is
# line-buffered, so a line's time is when it was printed).
start=${EPOCHREALTIME/./}
timeout "${FT_MEM_TIMEOUT:-480}" "${FT_BIN:-./build-gpu/fittrain}" train --data-path "$DATA" --max-steps "${FT_STEPS:-6}" \
  --log-every 1 --eval-every 0 --ckpt-every 0 --results-dir "/tmp/ftmem_$LABEL" \
  --metrics-file "/tmp/ftmem_$LABEL/metrics.jsonl" "$@" 2>&1 | tee "$OUT/$LABEL.log" |
  while IFS= read -r line; do
    t=$((${EPOCHREALTIME/./} - start))
    printf '%5d.%d %s\n' $((t / 1000000)) $((t / 100000 % 10)) "$line"
  done >"$OUT/$LABEL.tlog"
rc=${PIPESTATUS[0]}
sleep 0.3
kill "$smi" "$rss" 2>/dev/null
wait "$smi" "$rss" 2>/dev/null
grep -E "^ *[0-9.]+ (model|chosen|allocated|.*step +1/|.*step +[0-9]+/[0-9]+ .*peak|.*evaluating|.*eval +step|.*checkpoint|done)" \
  "$OUT/$LABEL.tlog" | cut -c1-150
if [ $rc -eq 124 ]; then
  echo "$LABEL: fittrain ended by FT_MEM_TIMEOUT=${FT_MEM_TIMEOUT:-480} s; the steps it logged:"
elif [ $rc -ne 0 ]; then
  echo "$LABEL: fittrain failed ($rc)"; tail -8 "$OUT/$LABEL.log"; exit 1
fi
[ -s "/tmp/ftmem_$LABEL/metrics.jsonl" ] || { echo "$LABEL: no step logged"; exit 1; }
grep -E "^(chosen|  +largest|ranks|budget|  host total|  weights blocks|  weights staging|  total \(arena\)|  runtime|  process total|  master|  optimizer|  params|  grads|  activations)" "$OUT/$LABEL.log"
grep -E "step +[0-9]+/[0-9]+ " "$OUT/$LABEL.log" | tail -2
python3 - "$LABEL" "$OUT/$LABEL.idle" "$OUT/$LABEL.smi" "/tmp/ftmem_$LABEL/metrics.jsonl" "$OUT/$LABEL.rss" <<'PY'
import json, sys
label, idle_f, smi, metrics, rss = sys.argv[1:6]
idle = {int(i): int(u) for i, u in (l.split(",") for l in open(idle_f))}
peak = {}
for l in open(smi):
    p = l.split(",")
    if len(p) == 2 and p[1].strip().isdigit():
        i = int(p[0]); peak[i] = max(peak.get(i, 0), int(p[1]) - idle.get(i, 0))
r = [json.loads(l) for l in open(metrics) if '"tokens_per_s"' in l][-1]
planned = r["mem_process_planned_bytes"]
for i in sorted(peak):
    if peak[i] <= 0: continue
    m = peak[i] * 2**20
    print(f"{label} GPU {i}: planned {planned/2**30:.3f} GiB, measured peak {m/2**30:.3f} GiB, "
          f"measured/planned {100*(m-planned)/planned:+.2f}%; step tokens/s {r['tokens_per_s']:.0f}")
for l in open(rss):
    pid, b, t = l.split()
    print(f"{label} process {pid}: host peak RSS {int(b)/2**30:.2f} GiB at {t} s")
for i, (hp, hm) in enumerate(zip(r.get("host_planned_bytes_per_rank", []), r.get("host_peak_rss_bytes_per_rank", []))):
    print(f"{label} rank {i}: host planned {hp/2**30:.3f} GiB, peak resident {hm/2**30:.3f} GiB, "
          f"measured/planned {100*(hm-hp)/hp:+.2f}% (by step {r['step']})")
print(f"{label} arena planned {r['mem_planned_bytes']/2**30:.3f} GiB; its high water per rank "
      + ", ".join(f"{b/2**30:.3f}" for b in r["mem_peak_bytes_per_rank"]) + f" GiB; rank 0's host RSS {r['host_rss_bytes']/2**30:.2f} GiB")
PY
