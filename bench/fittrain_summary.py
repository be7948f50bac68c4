"""One JSON line summing up a fittrain benchmark run from its --metrics-file: the median
samples/s of the steps after AFTER (past the warm-up), the measured arena peak and the planned
whole process, and the chosen micro-batch and accumulation.
Usage: python3 fittrain_summary.py METRICS.jsonl NAME AFTER
"""
import json, statistics, sys

rows = [json.loads(l) for l in open(sys.argv[1]) if '"samples_per_s"' in l]
sps = [r["samples_per_s"] for r in rows if r["step"] > int(sys.argv[3])]
r = rows[-1]
print(json.dumps({"impl": "fittrain", "run": sys.argv[2], "images_per_s": round(statistics.median(sps), 1),
                  "arena_peak_gib": round(r["mem_peak_bytes"] / 2**30, 2),
                  "process_planned_gib": round(r["mem_process_planned_bytes"] / 2**30, 2),
                  "micro_batch": r["micro_batch_size"], "accum": r["grad_accum_steps"]}))
