"""Groups an Nsight Compute CSV (gpu__time_duration.sum per kernel, --csv --print-units base)
by kernel name over the steady state: from after the second-to-last optimizer step's last
launch through the last one (one training step). Usage: python3 ncu_kernels.py RAW.csv OUT.txt LABEL
(also OUT.txt.seq: that step's launches in order with grid and time)
"""
import csv, sys, collections

rows = list(csv.reader(open(sys.argv[1])))
# The program's own output comes first (some of its lines parse as CSV): the table starts at
# ncu's header row.
first = next(i for i, r in enumerate(rows) if "Kernel Name" in r and "Metric Value" in r)
hdr, rows = rows[first], [r for r in rows[first + 1:] if len(r) == len(rows[first])]
ki, vi, mi = hdr.index("Kernel Name"), hdr.index("Metric Value"), hdr.index("Metric Name")
ks = [(r[ki], float(r[vi].replace(",", ""))) for r in rows if r[mi] == "gpu__time_duration.sum"]
# Step boundaries: the last AdamW launch of each step (a step may launch several).
ad = [i for i, (k, _) in enumerate(ks) if "adamw" in k.lower()]
ends = [i for i in ad if i + 1 == len(ks) or "adamw" not in ks[i + 1][0].lower()]
# One step: the launches after the previous step's last AdamW launch up to this step's.
steady = ks[ends[-2] + 1: ends[-1] + 1] if len(ends) >= 2 else ks
agg = collections.defaultdict(lambda: [0.0, 0])
for k, t in steady:
    agg[k[:110]][0] += t
    agg[k[:110]][1] += 1
total = sum(v[0] for v in agg.values())
with open(sys.argv[2], "w") as f:
    print(f"== {sys.argv[3]}: {len(steady)} kernels, {total / 1e6:.2f} ms per step (sum of kernel times)", file=f)
    for k, (t, c) in sorted(agg.items(), key=lambda kv: -kv[1][0]):
        print(f"{t / 1e6:9.3f} ms  {c:5d}x  {k}", file=f)
# The step's launches in order (name, grid, time), to tell apart the products of different
# shapes that share a kernel.
gi = hdr.index("Grid Size") if "Grid Size" in hdr else None
with open(sys.argv[2] + ".seq", "w") as f:
    seq = [r for r in rows if r[mi] == "gpu__time_duration.sum"][ends[-2] + 1: ends[-1] + 1] if len(ends) >= 2 else []
    for r in seq:
        print(f"{float(r[vi].replace(',', '')) / 1e3:9.1f} us  {r[gi] if gi is not None else '':>16}  {r[ki][:90]}", file=f)
print(open(sys.argv[2]).read()[:5000])
