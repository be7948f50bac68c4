#!/usr/bin/env python3
"""Summarise fittrain device traces (FT_TRACE=PREFIX, backend/device_trace.h).

    python3 bench/trace_summary.py RUN.rank0.jsonl [RUN.rank1.jsonl ...] [--baseline ONE_GPU.rank0.jsonl]

A step's cycle is measured from one optimizer update (the first kernel whose name holds
"adamw", more than 5 ms after the last one ended) to the next, so it holds the update, the parameter gather, the forward, the backward
and the gradient reductions. Per cycle: its length, the time any compute kernel ran, the time
NCCL kernels ran and how much of that no compute kernel overlapped (exposed communication),
and the time the GPU ran nothing (idle). Then the longest idle gaps of the compute stream
with the kernels around them and the copies or memsets that ran inside them, the compute stream's
launch gaps (its short gaps with nothing else running), with --kernels N
the N kernels (by name) that took the most time a cycle, and, with
--baseline (a one-GPU trace of the same model and micro-batch), the compute time against the
baseline's, call by call: kernels slowed beside
NCCL, kernels slower on their own (another card), and calls where autotuning chose another
kernel; then how much slower the longer kernels of the second kind are (median and quartiles):
one factor for every kind of kernel is the card's clock, not any kernel.
"""
import argparse
import bisect
import collections
import json
import re


def load(path):
    kernels, copies, marks = [], [], []
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if r["kind"] == "kernel":
                kernels.append(r)
            elif r["kind"] == "mark":
                marks.append(r)
            else:
                copies.append(r)
    kernels.sort(key=lambda r: r["start"])
    return kernels, copies, marks


def is_nccl(k):
    return k["name"].startswith("nccl")


def union(intervals):
    """Merged, sorted [start, end) intervals."""
    out = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def length(iv):
    return sum(e - s for s, e in iv)


def clip(iv, lo, hi):
    return [(max(s, lo), min(e, hi)) for s, e in iv if e > lo and s < hi]


def intersect(a, b):
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        s, e = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if s < e:
            out.append((s, e))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def launch_gaps(kernels, copies, cyc, compute_stream):
    """The compute stream's short gaps (under 5 us) from one operation's end (kernel, copy or
    memset) to the next one's start, inside the cycles, where no kernel of another stream and
    no NCCL kernel ran: the device's own time from one launch to the next (negative where a
    dependent launch started before the one before it ended). In ns."""
    ops = sorted([k for k in kernels if k["stream"] == compute_stream and not is_nccl(k)] +
                 [c for c in copies if c.get("stream") == compute_stream], key=lambda r: r["start"])
    others = union((k["start"], k["end"]) for k in kernels if k["stream"] != compute_stream or is_nccl(k))
    starts = [s for s, _ in others]
    out = []
    for a, b in zip(ops, ops[1:]):
        g = b["start"] - a["end"]
        if g >= 5000 or not any(lo <= a["end"] < hi for lo, hi in cyc):
            continue
        lo, hi = min(a["end"], b["start"]), max(a["end"], b["start"])
        i = bisect.bisect_right(starts, hi)  # the intervals starting at or before hi
        if i and others[i - 1][1] >= lo:  # merged and sorted: only the last can reach back to lo
            continue
        out.append(g)
    return out


def family(name):
    """A kernel's family: its name without template arguments and numbers."""
    name = re.sub(r"<.*", "", name)
    return re.sub(r"\d+", "#", name)[:70]


def cycles(kernels):
    """Update to update: a cycle starts at an AdamW kernel that begins more than 5 ms after
    the previous AdamW kernel ended. (An update is many launches: ZeRO-1 updates chunk by
    chunk on a stream of its own beside the next forward, spread over a few ms.)"""
    starts, last_end = [], None
    for k in kernels:
        if "adamw" not in k["name"].lower():
            continue
        if last_end is None or k["start"] - last_end > 5_000_000:
            starts.append(k["start"])
        last_end = k["end"] if last_end is None else max(last_end, k["end"])
    return list(zip(starts, starts[1:]))


def summarise(path, baseline=None, gaps=8, kernel_rows=0):
    kernels, copies, marks = load(path)
    cyc = cycles(kernels)
    print(f"== {path}: {len(kernels)} kernels, {len(copies)} copies/memsets, {len(cyc)} full cycles")
    if not cyc:
        print("   no two optimizer updates in the trace: nothing to measure")
        return None
    busy_by_stream = collections.Counter()
    for k in kernels:
        if not is_nccl(k):
            busy_by_stream[k["stream"]] += k["end"] - k["start"]
    compute_stream = busy_by_stream.most_common(1)[0][0]
    comp = union((k["start"], k["end"]) for k in kernels if not is_nccl(k))
    nccl = union((k["start"], k["end"]) for k in kernels if is_nccl(k))
    every = union([(k["start"], k["end"]) for k in kernels] + [(c["start"], c["end"]) for c in copies])
    rows = []
    for lo, hi in cyc:
        c, n, a = clip(comp, lo, hi), clip(nccl, lo, hi), clip(every, lo, hi)
        rows.append((hi - lo, length(c), length(n), length(n) - length(intersect(n, c)), (hi - lo) - length(a)))
    ms = lambda ns: ns / 1e6
    print("   cycle ms | compute busy | nccl | nccl exposed | idle")
    for r in rows:
        print("   %8.3f | %12.3f | %6.3f | %12.3f | %6.3f" % tuple(ms(x) for x in r))
    mean = [sum(r[i] for r in rows) / len(rows) for i in range(5)]
    print("   mean %8.3f | %12.3f | %6.3f | %12.3f | %6.3f" % tuple(ms(x) for x in mean))

    # The longest idle gaps of the compute stream inside the cycles, and what surrounded them.
    cs = [k for k in kernels if k["stream"] == compute_stream and not is_nccl(k)]
    found = []
    for a, b in zip(cs, cs[1:]):
        if any(lo <= a["end"] < hi for lo, hi in cyc) and b["start"] - a["end"] > 5000:
            during = [k["name"][:40] for k in kernels if is_nccl(k) and k["start"] < b["start"] and k["end"] > a["end"]]
            moved = [c for c in copies if c.get("stream") == compute_stream and a["end"] <= c["start"] < b["start"]]
            found.append((b["start"] - a["end"], a["name"][:60], b["name"][:60], sorted(set(during)), moved))
    found.sort(key=lambda g: g[0], reverse=True)
    print(f"   compute stream {compute_stream}: idle gaps over 5 us per cycle: "
          f"{sum(g[0] for g in found) / len(cyc) / 1e6:.3f} ms; the longest:")
    for g, a, b, during, moved in found[:gaps]:
        # copies and memsets of the compute stream inside the gap: the GPU moved bytes, no kernel ran
        cp = (f"\n{'':20}{len(moved)} copies/memsets inside: {sum(c.get('bytes', 0) for c in moved) / 2**20:.1f} MiB, "
              f"{sum(c['end'] - c['start'] for c in moved) / 1e3:.1f} us" if moved else "")
        print(f"     {g / 1e3:8.1f} us after {a}\n{'':20}before {b}" + cp +
              (f"\n{'':20}NCCL running: {during}" if during else ""))

    # The launch gaps: on 2 GPUs the backward's are about 0.9 us longer than on one
    # (docs/PERFORMANCE.md, session 33); at the power cap such idle time is mostly paid back
    # in clock.
    lg = sorted(launch_gaps(kernels, copies, cyc, compute_stream))
    if lg:
        print(f"   compute stream launch gaps (under 5 us, nothing else running): {len(lg) / len(cyc):.0f} a cycle, "
              f"median {lg[len(lg) // 2] / 1e3:.2f} us, mean {sum(lg) / len(lg) / 1e3:.2f} us, "
              f"{sum(lg) / len(cyc) / 1e6:.3f} ms a cycle")

    # NCCL kernels: each kind's time per cycle.
    fams = collections.defaultdict(float)
    for lo, hi in cyc:
        for k in kernels:
            if lo <= k["start"] < hi and is_nccl(k):
                fams[family(k["name"])] += (k["end"] - k["start"]) / len(cyc)
    print("   NCCL kernels per cycle (ms):", {f: round(ms(t), 3) for f, t in fams.items()})
    # Host marks: how long the host waited for the step's sums (backward queued -> sums done).
    by_step = collections.defaultdict(dict)
    for m in marks:
        by_step[m["value"]][m["what"]] = m["time"]
    waits = [d["sums_done"] - d["backward_queued"] for d in by_step.values() if "sums_done" in d and "backward_queued" in d]
    if waits:
        # Since session 11 the update is queued before this wait (the device decides it).
        print(f"   host wait for the step's sums (backward queued -> sums done): mean {ms(sum(waits) / len(waits)):.3f} ms")
    if kernel_rows:
        by_name = collections.defaultdict(lambda: [0.0, 0])
        for lo, hi in cyc:
            for k in kernels:
                if lo <= k["start"] < hi:
                    by_name[k["name"]][0] += (k["end"] - k["start"]) / len(cyc)
                    by_name[k["name"]][1] += 1
        print(f"   kernels by time per cycle (ms, launches per cycle), the first {kernel_rows}:")
        for name, (t, count) in sorted(by_name.items(), key=lambda x: -x[1][0])[:kernel_rows]:
            print(f"   {ms(t):9.3f} {count / len(cyc):6.1f}  {name[:110]}")
    if baseline:
        compare(kernels, cyc, baseline)
    return kernels, cyc


def is_update(k):
    return "adamw" in k["name"].lower()


def compute_sequences(kernels, cyc):
    """Per cycle, its compute kernels in launch order but the optimizer's (ZeRO-1 splits the
    update into many launches on a stream of its own): (name, duration, time overlapped by
    NCCL)."""
    nccl = union((k["start"], k["end"]) for k in kernels if is_nccl(k))
    out = []
    for lo, hi in cyc:
        seq = []
        for k in kernels:
            if lo <= k["start"] < hi and not is_nccl(k) and not is_update(k):
                ov = length(intersect([(k["start"], k["end"])], clip(nccl, k["start"], k["end"])))
                seq.append((k["name"], k["end"] - k["start"], ov))
        out.append(seq)
    return out


def compare(kernels, cyc, baseline):
    """The k-th compute kernel of a cycle is the same call in both traces (same model, same
    micro-batch): split the difference in compute time into kernels that ran beside NCCL,
    kernels that did not (the card's own speed), and calls where autotuning chose another
    kernel than the baseline's run."""
    this, base = compute_sequences(kernels, cyc), compute_sequences(*baseline)
    n = min(len(this), len(base))
    beside = alone = other = 0
    others = 0
    alone_ratios = []  # the longer kernels' time ratios where no NCCL kernel ran beside them
    for c in range(n):
        for (bn, bd, _), (tn, td, ov) in zip(base[c], this[c]):
            if bn != tn:
                other += td - bd
                others += 1
            elif ov > 0:
                beside += td - bd
            else:
                alone += td - bd
                if bd > 20_000:
                    alone_ratios.append(td / bd)
    if any(len(base[c]) != len(this[c]) for c in range(n)):
        print("   (the cycles hold different numbers of compute kernels: the comparison below is rough)")
    print(f"   compute against the baseline, ms per cycle: same kernel beside NCCL {beside / n / 1e6:+.3f}, "
          f"same kernel alone {alone / n / 1e6:+.3f}, another kernel chosen {other / n / 1e6:+.3f} "
          f"({others // max(n, 1)} calls a cycle)")
    if len(alone_ratios) >= 4:
        # One factor for nearly every kernel (products, attention, norms alike) is the card's
        # clock (a power cap held with NCCL's traffic: docs/PERFORMANCE.md, session 31); a few
        # kernels far off the rest point at the kernels themselves (another plan, placement).
        r = sorted(alone_ratios)
        q = lambda f: 100 * (r[int(f * (len(r) - 1))] - 1)
        print(f"   same kernels alone (over 20 us, {len(r)} calls): time {q(0.5):+.2f}% at the median, "
              f"{q(0.25):+.2f}% to {q(0.75):+.2f}% between the quartiles")
    # The update: its kernels' time, and how much of it no other compute kernel overlapped.
    def update_ms(ks, cy):
        tot = exp = 0
        for lo, hi in cy:
            up = [k for k in ks if lo <= k["start"] < hi and is_update(k)]
            other = union((k["start"], k["end"]) for k in ks
                          if lo <= k["start"] < hi and not is_update(k) and not is_nccl(k))
            u = union((k["start"], k["end"]) for k in up)
            tot += sum(k["end"] - k["start"] for k in up)
            exp += length(u) - length(intersect(u, other))
        return tot / len(cy) / 1e6, exp / len(cy) / 1e6
    t_this, e_this = update_ms(kernels, cyc)
    t_base, e_base = update_ms(*baseline)
    print(f"   update kernels per cycle: {t_this:.3f} ms ({e_this:.3f} beside no other compute kernel) "
          f"against the baseline's {t_base:.3f} ({e_base:.3f})")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--baseline", help="a one-GPU trace of the same model and micro-batch")
    ap.add_argument("--gaps", type=int, default=8)
    ap.add_argument("--kernels", type=int, default=0, help="print the N kernels that took the most time a cycle")
    a = ap.parse_args()
    base = summarise(a.baseline, gaps=a.gaps) if a.baseline else None
    for t in a.traces:
        summarise(t, base, a.gaps, a.kernels)


if __name__ == "__main__":
    main()
