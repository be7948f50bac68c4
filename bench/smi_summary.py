#!/usr/bin/env python3
"""Summarise nvidia-smi samples taken while a run trained (bench/dp_clocks.sh):

    nvidia-smi --query-gpu=index,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active \
        --format=csv,noheader,nounits -lms 100 > SAMPLES.csv
    python3 bench/smi_summary.py SAMPLES.csv [--busy-watts 200]

Per GPU, over the samples drawing more than --busy-watts (the training ones): the mean and
lowest SM clock, the memory clock, mean and highest power, highest temperature, and how often
each throttle-reason mask was active (0x4: software power cap, 0x0: none; NVML's
nvmlClocksEventReasons bits). An H100 held at its power cap runs lower clocks for any extra
work beside the compute (NVLink traffic, NCCL's kernels): docs/PERFORMANCE.md, session 17.
"""
import argparse
import collections


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("samples")
    ap.add_argument("--busy-watts", type=float, default=200.0)
    a = ap.parse_args()
    rows = collections.defaultdict(list)
    for line in open(a.samples):
        f = [x.strip() for x in line.split(",")]
        if len(f) < 6:
            continue
        try:
            rows[f[0]].append((float(f[1]), float(f[2]), float(f[3]), float(f[4]), f[5]))
        except ValueError:  # "[N/A]" and the like
            pass
    for gpu, r in sorted(rows.items()):
        busy = [x for x in r if x[2] > a.busy_watts]
        if not busy:
            print(f"gpu{gpu}: no sample above {a.busy_watts:.0f} W")
            continue
        n = len(busy)
        reasons = collections.Counter(x[4] for x in busy)
        print(f"gpu{gpu}: {n} samples above {a.busy_watts:.0f} W: sm {sum(x[0] for x in busy) / n:.0f} MHz "
              f"(min {min(x[0] for x in busy):.0f}), mem {sum(x[1] for x in busy) / n:.0f} MHz, "
              f"power {sum(x[2] for x in busy) / n:.0f} W (max {max(x[2] for x in busy):.0f}), "
              f"temp {max(x[3] for x in busy):.0f} C, reasons {dict(reasons.most_common(3))}")


if __name__ == "__main__":
    main()
