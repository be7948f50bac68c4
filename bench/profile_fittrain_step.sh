#!/usr/bin/env bash
# Where fittrain's time goes on the GPT-2 124M training step: every kernel of two steps timed
# by Nsight Compute (gpu__time_duration only: one pass, no replay), grouped by kernel name.
# Run on the device machine from the repo root: bash bench/profile_fittrain_step.sh [B=16]
# Writes $OUT/fittrain_kernels_B<B>.txt (ms per step, launches per step, name).
set -uo pipefail
B=${1:-16}
OUT=${OUT:-/tmp}
source bench/gpu_bench_lib.sh
ft_build_fittrain || exit 1
DATA=/tmp/fittrain_prof_tokens.bin
ft_make_tokens "$DATA" $((B * 1025 * 8))
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
rm -rf /tmp/ftprof
"$NCU" --clock-control none --metrics gpu__time_duration.sum --csv --print-units base \
  ./build-gpu/fittrain train --model gpt2 --data-path "$DATA" --global-batch-size "$B" --micro-batch-size "$B" \
  --max-steps 3 --log-every 1 --eval-every 0 --ckpt-every 0 --results-dir /tmp/ftprof >/tmp/ncu_raw.csv 2>/tmp/ncu.err \
  || { tail -20 /tmp/ncu.err; exit 1; }
python3 - /tmp/ncu_raw.csv "$OUT/fittrain_kernels_B$B.txt" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
hdr = rows[0]; rows = rows[1:]
ki, vi, mi = hdr.index("Kernel Name"), hdr.index("Metric Value"), hdr.index("Metric Name")
ks = [(r[ki], float(r[vi].replace(",", ""))) for r in rows if r[mi] == "gpu__time_duration.sum"]
# Steady state: the kernels after step 2's last AdamW launch up to step 3's last one.
ad = [i for i, (k, _) in enumerate(ks) if "adamw" in k]
per = len(ad) // 3
steady = ks[ad[2 * per - 1] + 1: ad[-1] + 1] if per else ks
agg = collections.defaultdict(lambda: [0.0, 0])
for k, t in steady: agg[k[:100]][0] += t; agg[k[:100]][1] += 1
total = sum(v[0] for v in agg.values())
with open(sys.argv[2], "w") as f:
    print(f"== fittrain: {len(steady)} kernels, {total/1e6:.2f} ms per step (sum of kernel times)", file=f)
    for k, (t, c) in sorted(agg.items(), key=lambda kv: -kv[1][0]):
        print(f"{t/1e6:9.3f} ms  {c:5d}x  {k}", file=f)
print(open(sys.argv[2]).read()[:6000])
PY
