#!/usr/bin/env bash
# Is the GPU ever waiting for the host in fittrain's GPT-2 124M training step? (The question
# behind "CUDA graphs if launches show up in the profile".) Runs a few steps under Nsight
# Systems (CUDA trace only: kernels keep their real timing and clocks, unlike Nsight
# Compute's serialized replay) and reports, per steady-state step (AdamW launch to AdamW
# launch): wall span, time with a kernel or copy running, idle time and the gaps > 10 us.
# Run on the device machine from the repo root: bash bench/gpu_idle_fittrain_step.sh [B=16]
# Writes $OUT/gpu_idle_B<B>.txt.
set -uo pipefail
B=${1:-16}
OUT=${OUT:-/tmp}
source bench/gpu_bench_lib.sh
ft_build_fittrain || exit 1
NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys \
  /opt/nvidia/nsight-systems/*/target-linux-x64/nsys 2>/dev/null | head -1)
[[ -x "$NSYS" ]] || { echo "nsys not found on this machine" | tee "$OUT/gpu_idle_B$B.txt"; exit 0; }
DATA=/tmp/fittrain_idle_tokens.bin
ft_make_tokens "$DATA" $((B * 1025 * 12))
rm -rf /tmp/ftidle /tmp/ftidle_trace.*
"$NSYS" profile -t cuda --sample=none --cpuctxsw=none -o /tmp/ftidle_trace --export=sqlite --force-overwrite=true \
  ./build-gpu/fittrain train --model gpt2 --data-path "$DATA" --global-batch-size "$B" --micro-batch-size "$B" \
  --max-steps 8 --log-every 4 --eval-every 0 --ckpt-every 0 --results-dir /tmp/ftidle >/tmp/nsys.log 2>&1 \
  || { tail -20 /tmp/nsys.log; exit 1; }
python3 - /tmp/ftidle_trace.sqlite "$OUT/gpu_idle_B$B.txt" "$B" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
names = dict(db.execute("select id, value from StringIds"))
acts = [(s, e, names.get(n, "")) for s, e, n in
        db.execute("select start, end, demangledName from CUPTI_ACTIVITY_KIND_KERNEL")]
try:
    acts += [(s, e, "memcpy") for s, e in db.execute("select start, end from CUPTI_ACTIVITY_KIND_MEMCPY")]
except sqlite3.OperationalError:
    pass
acts.sort()
adam = [s for s, e, n in acts if "adamw" in n]
lines = [f"== fittrain GPT-2 124M, B={sys.argv[3]}: GPU activity per training step (Nsight Systems trace)"]
for a, b in zip(adam[-4:-1], adam[-3:]):  # the last three whole steps
    span, busy, gaps, cur_end, kernels = b - a, 0, [], a, 0
    for s, e, n in acts:
        if e <= a or s >= b:
            continue
        s, e = max(s, a), min(e, b)
        kernels += n != "memcpy"
        if s > cur_end:
            gaps.append(s - cur_end)
        busy += max(0, e - max(s, cur_end))
        cur_end = max(cur_end, e)
    big = [g for g in gaps if g > 10_000]
    lines.append(f"step {span/1e6:8.3f} ms  busy {busy/1e6:8.3f} ms  idle {(span-busy)/1e6:6.3f} ms "
                 f"({100*(span-busy)/span:4.1f}%)  kernels {kernels}  gaps>10us {len(big)} "
                 f"totalling {sum(big)/1e6:.3f} ms")
open(sys.argv[2], "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
