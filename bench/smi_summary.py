#!/usr/bin/env python3
"""Summarise nvidia-smi samples taken while runs trained.

One run's samples (bench/dp_clocks.sh):

    nvidia-smi --query-gpu=index,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active \
        --format=csv,noheader,nounits -lms 100 > SAMPLES.csv
    python3 bench/smi_summary.py SAMPLES.csv [--busy-watts 200]

Per GPU, over the samples drawing more than --busy-watts (the training ones): the mean and
lowest SM clock, the memory clock, mean and highest power, highest temperature, and how often
each throttle-reason mask was active (0x4: software power cap, 0x0: none; NVML's
nvmlClocksEventReasons bits). An H100 held at its power cap runs lower clocks for any extra
work beside the compute (NVLink traffic, NCCL's kernels): docs/PERFORMANCE.md, session 17.

A whole lease's samples with its runs marked (bench/dp_scaling.sh; bench/gpu_bench_lib.sh's
ft_clock_sampler_start and ft_mark):

    python3 bench/smi_summary.py SAMPLES.csv --marks MARKS [--busy-watts 595]

SAMPLES' rows are timestamp, index, SM clock, power, reasons; MARKS' lines are
"EPOCH_SECONDS NAME start|end". Runs named NAME_r<k> (rounds) count as one configuration. Per
configuration and GPU, over the busy samples inside its runs: the mean SM clock, the mean
power, the share of samples at the software power cap, and how many samples there were.
"""
import argparse
import collections
import datetime
import re


def summarise_one_run(path, busy_watts):
    rows = collections.defaultdict(list)
    for line in open(path):
        f = [x.strip() for x in line.split(",")]
        if len(f) < 6:
            continue
        try:
            rows[f[0]].append((float(f[1]), float(f[2]), float(f[3]), float(f[4]), f[5]))
        except ValueError:  # "[N/A]" and the like
            pass
    for gpu, r in sorted(rows.items()):
        busy = [x for x in r if x[2] > busy_watts]
        if not busy:
            print(f"gpu{gpu}: no sample above {busy_watts:.0f} W")
            continue
        n = len(busy)
        reasons = collections.Counter(x[4] for x in busy)
        print(f"gpu{gpu}: {n} samples above {busy_watts:.0f} W: sm {sum(x[0] for x in busy) / n:.0f} MHz "
              f"(min {min(x[0] for x in busy):.0f}), mem {sum(x[1] for x in busy) / n:.0f} MHz, "
              f"power {sum(x[2] for x in busy) / n:.0f} W (max {max(x[2] for x in busy):.0f}), "
              f"temp {max(x[3] for x in busy):.0f} C, reasons {dict(reasons.most_common(3))}")


def read_marks(path):
    """{configuration: [(start, end), ...]} from "EPOCH NAME start|end" lines (unended runs dropped)."""
    open_runs, spans = {}, collections.defaultdict(list)
    for line in open(path):
        f = line.split()
        if len(f) != 3:
            continue
        t, name, what = float(f[0]), f[1], f[2]
        if what == "start":
            open_runs[name] = t
        elif what == "end" and name in open_runs:
            spans[re.sub(r"_r\d+$", "", name)].append((open_runs.pop(name), t))
    return spans


def summarise_marked(path, marks, busy_watts):
    samples = []  # (epoch seconds, gpu, SM MHz, W, reasons)
    for line in open(path):
        f = [x.strip() for x in line.split(",")]
        if len(f) < 5:
            continue
        try:
            # nvidia-smi writes the machine's local time, as date +%s.%N's epoch is read here
            t = datetime.datetime.strptime(f[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
            samples.append((t, int(f[1]), float(f[2]), float(f[3]), f[4]))
        except ValueError:
            pass
    print(f"SM clock and power per configuration (samples above {busy_watts:.0f} W inside its runs; "
          "capped: the software power cap was active)")
    print("| configuration | GPU | SM clock (MHz) | power (W) | capped | samples |")
    print("|---|---|---|---|---|---|")
    for config, spans in read_marks(marks).items():
        by_gpu = collections.defaultdict(list)
        for t, gpu, sm, watts, reasons in samples:
            if watts > busy_watts and any(a <= t <= b for a, b in spans):
                by_gpu[gpu].append((sm, watts, reasons))
        for gpu, s in sorted(by_gpu.items()):
            n = len(s)
            capped = sum(1 for x in s if int(x[2], 16) & 0x4)
            print(f"| {config} | {gpu} | {sum(x[0] for x in s) / n:,.0f} | {sum(x[1] for x in s) / n:.0f} | "
                  f"{100 * capped / n:.0f}% | {n} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("samples")
    ap.add_argument("--busy-watts", type=float, default=200.0)
    ap.add_argument("--marks", help="the runs' marks: one lease's samples, summed up per configuration")
    a = ap.parse_args()
    if a.marks:
        summarise_marked(a.samples, a.marks, a.busy_watts)
    else:
        summarise_one_run(a.samples, a.busy_watts)


if __name__ == "__main__":
    main()
