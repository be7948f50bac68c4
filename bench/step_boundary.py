#!/usr/bin/env python3
"""Where a GPT-2 data-parallel step turns over, from fittrain device traces (FT_TRACE).

    python3 bench/step_boundary.py RUN.rank0.jsonl [MORE.rank0.jsonl ...]

Per trace, medians over its steps (ms):
  boundary  from the end of the embeddings' backward (the backward's last model op but the
            deferred qkv product) to the next embedding forward: what the step's last
            reductions, the gradient norm, the update and the first gathers cost in a row;
  tail      from the last compute kernel before the next forward to that forward: the part of
            the boundary the compute stream sat idle at the end;
  ramp      idle time of the compute stream in the first 2 ms after the embedding forward:
            the forward waiting for the gathers of its first blocks;
  cycle     embedding forward to embedding forward;
  fwd_bwd   embedding forward to the embeddings' backward end.
On one GPU the boundary holds the whole update; under ZeRO-1 the update of a rank's shard
and the parameter gathers overlap it (train/param_gatherer.h).
"""
import statistics
import sys

from trace_summary import load


def summarise(path):
    kernels, _, _ = load(path)
    fwd = [k for k in kernels if "embedding_forward" in k["name"]]
    stream = fwd[0]["stream"]
    comp = [k for k in kernels if k["stream"] == stream]
    bwd_end = [k["end"] for k in comp if "embedding_wpe_backward" in k["name"] or "embedding_backward" in k["name"]]
    rows = {"boundary": [], "tail": [], "ramp": [], "cycle": [], "fwd_bwd": []}
    for a, b in zip(fwd, fwd[1:]):
        ends = [e for e in bwd_end if a["start"] < e < b["start"]]
        if not ends:
            continue
        rows["boundary"].append((b["start"] - max(ends)) / 1e6)
        rows["fwd_bwd"].append((max(ends) - a["start"]) / 1e6)
        rows["cycle"].append((b["start"] - a["start"]) / 1e6)
        before = [k["end"] for k in comp if k["end"] <= b["start"] and k is not b and "embedding_forward" not in k["name"]]
        rows["tail"].append((b["start"] - max(before)) / 1e6 if before else 0.0)
        # idle of the compute stream in [b.start, b.start + 2 ms)
        lo, hi = b["start"], b["start"] + 2_000_000
        busy, cur = 0, lo
        for k in comp:
            if k["end"] <= lo or k["start"] >= hi:
                continue
            s, e = max(k["start"], cur), min(k["end"], hi)
            if e > s:
                busy += e - s
                cur = e
        rows["ramp"].append((hi - lo - busy) / 1e6)
    return {k: statistics.median(v) for k, v in rows.items() if v}, len(rows["cycle"])


def main():
    for path in sys.argv[1:]:
        med, n = summarise(path)
        print(f"{path} ({n} steps): " + ", ".join(f"{k} {v:.3f}" for k, v in med.items()))


if __name__ == "__main__":
    main()
