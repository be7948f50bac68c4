#!/usr/bin/env bash
# Data-parallel scaling of GPT-2 124M (T=1024, 32 sequences per GPU, bf16): fittrain on
# 1..N GPUs (one worker per GPU, started by fittrain itself), with and without
# --zero-stage 1, against PyTorch DDP + torch.compile under torchrun (the reference script
# bench/torch_gpt2_ddp_bench.py) on the same GPUs in the same call. Device machine, repo root:
#   bash bench/dp_scaling.sh "1 2 4" [steps=30]
# FT_SKIP_TORCH=1 / FT_SKIP_FT=1 leave one side out (to split a lease into two calls; the
# table then shows what ran). Scaling efficiency = tokens/s on N GPUs / (N x tokens/s on 1).
# FT_ROUNDS=R runs every fittrain configuration R times, round by round (so drift hits all
# alike); the table shows each configuration's median and the spread of its runs (two runs of
# the same code differ by up to 1-2 points of efficiency: docs/PERFORMANCE.md, session 11);
# FT_TORCH_ROUNDS=R does the same for DDP (default 1), each of its rounds first in its round.
# The table's last column is fittrain's default (ZeRO-1 on several GPUs) over DDP.
# Logs and dp_*.txt results in $OUT (dp_ft_median.txt: each configuration's median;
# dp_clocks.txt: each configuration's SM clock and power per GPU, from clocks.csv).
# With 2 or more GPUs on the machine and N > 1 asked, each side's 1-GPU run also runs with
# NVLink's links kept awake (ft_links_awake_start; FT_AWAKE_BASE=0 leaves it out): the table
# then gives the efficiency against that base too, the part of the loss that is not the links'
# power (dp_ft_awake.txt, dp_torch_awake.jsonl).
# PyTorch runs first; FT_SUMMARY_ONLY=1 prints the table of the results already in $OUT (for a
# run that a time limit ended before its table).
set -uo pipefail
GPUS=${1:-"1 2"}
STEPS=${2:-30}
OUT=${OUT:-/tmp/bench_out}
mkdir -p "$OUT"
CARD=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
source bench/gpu_bench_lib.sh
[ -n "${FT_SUMMARY_ONLY:-}" ] || ft_dp_setup || exit 1
# Every GPU's SM clock and power through the lease, each run marked (summed up per
# configuration at the end): on cards held at their power cap the clock is part of what N
# GPUs lose (docs/PERFORMANCE.md, session 33). Samples in $OUT/clocks.csv.
MARKS=$OUT/run_marks.txt
if [ -z "${FT_SUMMARY_ONLY:-}" ]; then
  ft_clock_sampler_start "$OUT/clocks.csv"
  trap 'ft_clock_sampler_stop; ft_links_awake_stop' EXIT
  trap 'ft_clock_sampler_stop; ft_links_awake_stop; exit 143' TERM  # bench/dp_lease.sh's time limit
fi
AWAKE=
if [ "${FT_AWAKE_BASE:-1}" != 0 ] && [ -z "${FT_SUMMARY_ONLY:-}" ] && [ "$(nvidia-smi -L | wc -l)" -ge 2 ] &&
  [[ " $GPUS " == *" 1 "* ]] && [ -n "$(echo $GPUS | tr ' ' '\n' | awk '$1 > 1')" ]; then
  AWAKE=1
fi

# PyTorch's DDP first in each of its rounds (FT_TORCH_ROUNDS, default 1: each one compiles
# again, 30-45 s a run): a lease cut short then still has its baseline (fittrain's runs each
# append their result as they end). More than one round gives DDP a median like fittrain's.
ddp_round() {  # round R
  local R=$1 N
  for N in $GPUS; do
    ft_mark "$MARKS" "ddp_N${N}_r$R" start
    torchrun --standalone --nproc_per_node "$N" bench/torch_gpt2_ddp_bench.py --compile --batch 32 --steps 20 \
      2>"$OUT/torch_ddp_N${N}_r$R.err" | tee -a "$OUT/dp_torch.jsonl"
    ft_mark "$MARKS" "ddp_N${N}_r$R" end
    if [ "$N" = 1 ] && [ -n "$AWAKE" ] && ft_links_awake_start "$OUT/links_awake.txt"; then
      ft_mark "$MARKS" "ddp_N1_awake_r$R" start
      torchrun --standalone --nproc_per_node 1 bench/torch_gpt2_ddp_bench.py --compile --batch 32 --steps 20 \
        2>"$OUT/torch_ddp_N1_awake_r$R.err" | tee -a "$OUT/dp_torch_awake.jsonl"
      ft_mark "$MARKS" "ddp_N1_awake_r$R" end
      ft_links_awake_stop
    fi
  done
}
TORCH_ROUNDS=${FT_TORCH_ROUNDS:-1}
[ -n "${FT_SKIP_TORCH:-}${FT_SUMMARY_ONLY:-}" ] && TORCH_ROUNDS=0

# FT_SWEEP="A=1;B=2 C=3": extra fittrain runs with these variables (e.g. FT_BUCKET_MB,
# NCCL_MAX_CTAS; FT_DEFAULT=1 reruns the default, to see a lease's noise), for tuning, on the
# largest N or on each of FT_SWEEP_N, ZeRO stage FT_SWEEP_ZERO (default 1), in every round
# beside the default's runs; each variant's median (and its runs) in dp_sweep.txt.
SWEEP_NS=${FT_SWEEP_N:-$(echo $GPUS | tr ' ' '\n' | sort -n | tail -1)}
IFS=';' read -ra VARIANTS <<<"${FT_SWEEP:-}"
ROUNDS=${FT_ROUNDS:-1}
[ -n "${FT_SUMMARY_ONLY:-}" ] && ROUNDS=0  # FT_SUMMARY_ONLY=1: only the table of what is in $OUT
for R in $(seq "$(( ROUNDS > TORCH_ROUNDS ? ROUNDS : TORCH_ROUNDS ))"); do
  [ "$R" -le "$TORCH_ROUNDS" ] && ddp_round "$R"
  if [ -z "${FT_SKIP_FT:-}" ] && [ "$R" -le "$ROUNDS" ]; then
    for N in $GPUS; do
      for Z in 0 1; do
        [ "$N" = 1 ] && [ "$Z" = 1 ] && continue
        L=ft_N${N}_z${Z}_r$R
        ft_mark "$MARKS" "$L" start
        ft_dp_train "$N" "$Z" /tmp/ftdp >"$OUT/$L.log" 2>&1
        rc=$?
        ft_mark "$MARKS" "$L" end
        if [ $rc -ne 0 ]; then echo "$L failed ($rc)"; tail -8 "$OUT/$L.log"; echo "$N $Z 0" >>"$OUT/dp_ft.txt"; continue; fi
        echo "$N $Z $(ft_tps /tmp/ftdp/m.jsonl)" | tee -a "$OUT/dp_ft.txt"
      done
      if [ "$N" = 1 ] && [ -n "$AWAKE" ] && ft_links_awake_start "$OUT/links_awake.txt"; then
        L=ft_N1_awake_r$R
        ft_mark "$MARKS" "$L" start
        ft_dp_train 1 0 /tmp/ftdp >"$OUT/$L.log" 2>&1 && echo "awake $(ft_tps /tmp/ftdp/m.jsonl)" | tee -a "$OUT/dp_ft_awake.txt"
        ft_mark "$MARKS" "$L" end
        ft_links_awake_stop
      fi
    done
  fi
  [ "$R" -le "$ROUNDS" ] || continue
  for N in $SWEEP_NS; do
    for V in "${VARIANTS[@]}"; do
      L=sweep_N${N}_${V//[= ]/_}_r$R
      ft_mark "$MARKS" "$L" start
      ft_dp_train "$N" "${FT_SWEEP_ZERO:-1}" /tmp/ftdp $V >"$OUT/$L.log" 2>&1 &&
        echo "$N ${V// /,} $(ft_tps /tmp/ftdp/m.jsonl)" | tee -a "$OUT/dp_sweep_runs.txt"
      ft_mark "$MARKS" "$L" end
    done
  done
done
python3 - "$OUT" "$CARD" <<'PY'
import json, os, sys
out, card = sys.argv[1], sys.argv[2]
import statistics
runs = {}
if os.path.exists(f"{out}/dp_ft.txt"):
    for l in open(f"{out}/dp_ft.txt"):
        n, z, t = map(int, l.split())
        if t: runs.setdefault((n, z), []).append(t)
ft = {k: statistics.median(v) for k, v in runs.items()}
with open(f"{out}/dp_ft_median.txt", "w") as f:  # what bench/dp_lease.sh reads
    for (n, z), t in sorted(ft.items()):
        f.write(f"{n} {z} {round(t)}\n")
def torch_runs(path):  # each world's DDP runs (FT_TORCH_ROUNDS: one a round)
    runs = {}
    if os.path.exists(path):
        for l in open(path):
            try: r = json.loads(l); runs.setdefault(r["world"], []).append(r["tokens_per_s"])
            except Exception: pass
    return runs
th_runs = torch_runs(f"{out}/dp_torch.jsonl")
th = {n: statistics.median(v) for n, v in th_runs.items()}
ns = sorted({n for n, _ in ft} | set(th))
print(f"\nGPT-2 124M, T=1024, 32 sequences per GPU, bf16, {card}: tokens/s (scaling efficiency)")
# fittrain / DDP: fittrain's default (ZeRO-1 on several ranks, plan/fit.cpp) against DDP.
print("| GPUs | fittrain --zero-stage 0 | fittrain --zero-stage 1 | DDP + torch.compile | fittrain / DDP |")
print("|---|---|---|---|---|")
def cell(t, base, n):
    return f"{t/1e3:,.0f}k ({100*t/(n*base):.1f}%)" if t and base else (f"{t/1e3:,.0f}k" if t else "—")
for n in ns:
    f0, f1, d = ft.get((n, 0)), ft.get((n, 1)), th.get(n)
    fd = f1 if n > 1 else f0
    print(f"| {n} | {cell(f0, ft.get((1, 0)), n)} | {cell(f1, ft.get((1, 0)), n) if n > 1 else '—'} | "
          f"{cell(d, th.get(1), n)} | {f'{fd/d:.2f}' if fd and d else '—'} |")
if any(len(v) > 1 for v in list(runs.values()) + list(th_runs.values())):
    print("medians of", max(len(v) for v in runs.values()) if runs else 0, "fittrain and",
          max(len(v) for v in th_runs.values()) if th_runs else 0, "DDP runs; each run (k tokens/s):")
    for (n, z), v in sorted(runs.items()):
        print(f"  fittrain N={n} zero={z}: " + ", ".join(f"{t / 1e3:,.1f}" for t in v))
    for n, v in sorted(th_runs.items()):
        print(f"  DDP N={n}: " + ", ".join(f"{t / 1e3:,.1f}" for t in v))
# The 1-GPU bases with NVLink's links awake (FT_AWAKE_BASE): what N GPUs lose besides the links' power.
aw_ft = [int(l.split()[1]) for l in open(f"{out}/dp_ft_awake.txt")] if os.path.exists(f"{out}/dp_ft_awake.txt") else []
aw_th_runs = torch_runs(f"{out}/dp_torch_awake.jsonl").get(1)
aw_th = statistics.median(aw_th_runs) if aw_th_runs else None
if aw_ft or aw_th:
    a = statistics.median(aw_ft) if aw_ft else None
    def drop(t, base): return f" ({100 * (t / base - 1):+.1f}% against asleep)" if t and base else ""
    print("1 GPU with NVLink's links kept awake (bench/nvlink_load.py): fittrain " +
          (f"{a / 1e3:,.1f}k{drop(a, ft.get((1, 0)))}" if a else "—") + ", DDP " +
          (f"{aw_th / 1e3:,.1f}k{drop(aw_th, th.get(1))}" if aw_th else "—") + "; against these bases:")
    for n in ns:
        if n == 1: continue
        f1, d = ft.get((n, 1)), th.get(n)
        print(f"  N={n}: fittrain --zero-stage 1 " + (f"{100 * f1 / (n * a):.1f}%" if f1 and a else "—") +
              ", DDP " + (f"{100 * d / (n * aw_th):.1f}%" if d and aw_th else "—"))
if os.path.exists(f"{out}/dp_sweep_runs.txt"):
    sw = {}
    for l in open(f"{out}/dp_sweep_runs.txt"):
        n, v, t = l.split()
        sw.setdefault((int(n), v), []).append(int(t))
    with open(f"{out}/dp_sweep.txt", "w") as f:
        for (n, v), ts in sorted(sw.items()):
            base = ft.get((1, 0))
            eff = f" ({100 * statistics.median(ts) / (n * base):.1f}%)" if base else ""
            f.write(f"N={n} {v} {statistics.median(ts) / 1e3:,.0f}k{eff}, median of " +
                    ", ".join(f"{t / 1e3:,.1f}" for t in ts) + "\n")
PY
# Each configuration's clocks (samples within its runs drawing more than 85% of the power
# limit: the training ones, not start-up or compilation).
if [ -f "$MARKS" ] && [ -f "$OUT/clocks.csv" ]; then
  ft_clock_sampler_stop
  LIMIT=$(nvidia-smi --query-gpu=power.limit --format=csv,noheader,nounits | head -1)
  python3 bench/smi_summary.py "$OUT/clocks.csv" --marks "$MARKS" --busy-watts "$(python3 -c "print(0.85 * $LIMIT)")" |
    tee "$OUT/dp_clocks.txt"
fi
