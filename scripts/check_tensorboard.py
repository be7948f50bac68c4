#!/usr/bin/env python3
"""Reads fittrain's TensorBoard event files with TensorBoard's own reader and prints them.

    python3 scripts/check_tensorboard.py DIR      (DIR: what was given to --tensorboard)

Needs the `tensorboard` package (pip install tensorboard). Every folder under DIR that holds
events.out.tfevents.* files is one run, loaded as TensorBoard loads it (all its event files in
name order); every scalar tag is printed with its steps and values. Exits 1 when no scalar is
found (nothing written, or files TensorBoard cannot read), 2 when DIR is not a folder.

This is the check that fittrain's hand-encoded protobufs and TFRecord CRCs are what
TensorBoard expects; the C++ tests read the files with a reader of their own.
"""
import argparse
import os
import sys

from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator


def run_dirs(root):
    """Folders under root (root included) holding event files, sorted."""
    found = []
    for d, _, files in os.walk(root):
        if any(f.startswith("events.out.tfevents.") for f in files):
            found.append(d)
    return sorted(found)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", help="the folder given to fittrain train --tensorboard")
    args = ap.parse_args()
    if not os.path.isdir(args.dir):
        print(f"check_tensorboard: {args.dir} is not a folder", file=sys.stderr)
        return 2
    scalars = 0
    for d in run_dirs(args.dir):
        acc = EventAccumulator(d, size_guidance={SCALARS: 0})  # 0: keep every point, not a sample
        acc.Reload()
        tags = sorted(acc.Tags().get("scalars", []))
        print(f"run {os.path.relpath(d, args.dir)}: {len(tags)} scalar tags")
        for tag in tags:
            events = acc.Scalars(tag)
            scalars += len(events)
            print(f"  {tag} ({len(events)} points)")
            for e in events:
                print(f"    step {e.step:>8}  value {e.value:.9g}  wall_time {e.wall_time:.3f}")
    if scalars == 0:
        print(f"check_tensorboard: no scalars found under {args.dir}", file=sys.stderr)
        return 1
    print(f"{scalars} scalar points")
    return 0


if __name__ == "__main__":
    sys.exit(main())
