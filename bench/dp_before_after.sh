#!/usr/bin/env bash
# Data parallelism, this tree against another source tree (the commit before a change), on
# the same lease and cards, interleaved so that clock and power drift hit both alike: GPT-2
# 124M, T=1024, 32 sequences per GPU, ZeRO-1 on N > 1 GPUs (ZeRO-0 on one), ${STEPS:-30}
# steps. Prints tokens/s per run, the ratio this/old per N and each build's scaling against
# its own one-GPU rate. FT_TRACES=1 adds a device trace of each build on the largest N (rank
# 0's summary against its one-GPU trace: bench/trace_summary.py). Device machine, repo root:
#   bash bench/dp_before_after.sh OLD_SRC ["1 2 4"] [rounds=2]
# OLD_SRC: a source tree of fittrain (git archive of the old commit, carried along).
set -uo pipefail
OLD=${1:?usage: dp_before_after.sh OLD_SRC [gpus] [rounds]}
GPUS=${2:-"1 2 4"}
ROUNDS=${3:-2}
OUT=${OUT:-/tmp/bench_out}
mkdir -p "$OUT"
source bench/gpu_bench_lib.sh
ft_dp_setup || exit 1
ft_build_fittrain "$OLD" || exit 1
OLDBIN=$(cd "$OLD" && pwd)/build-gpu/fittrain
R=$OUT/before_after.txt
: >"$R"
run() {  # run LABEL BIN N [VAR=VALUE ...] -> "LABEL N tokens_per_s" in $R
  local label=$1 bin=$2 n=$3 z=1 dir=/tmp/ftba
  shift 3
  [ "$n" = 1 ] && z=0
  rm -rf "$dir"
  env "$@" "$bin" train --model gpt2 --data-path "$FT_DP_DATA" --global-batch-size $((32 * n)) --micro-batch-size 32 \
    --devices "$n" --zero-stage "$z" --max-steps "${STEPS:-30}" --log-every 5 --eval-every 0 --ckpt-every 0 \
    --keep-checkpoints 1 --results-dir "$dir" --metrics-file "$dir/m.jsonl" >"$OUT/ba_${label}_N$n.log" 2>&1 ||
    { echo "$label N=$n failed"; tail -3 "$OUT/ba_${label}_N$n.log"; return; }
  echo "$label $n $(ft_tps "$dir/m.jsonl")" | tee -a "$R"
}
for r in $(seq "$ROUNDS"); do
  for n in $GPUS; do
    if (( r % 2 )); then run new ./build-gpu/fittrain "$n"; run old "$OLDBIN" "$n"
    else run old "$OLDBIN" "$n"; run new ./build-gpu/fittrain "$n"; fi
  done
done
python3 - "$R" <<'PY'
import collections, sys
tps = collections.defaultdict(list)
for line in open(sys.argv[1]):
    label, n, t = line.split()
    tps[(label, int(n))].append(int(t))
mean = {k: sum(v) / len(v) for k, v in tps.items() if all(v)}
for n in sorted({n for _, n in mean}):
    new, old = mean.get(("new", n)), mean.get(("old", n))
    if not (new and old):
        continue
    line = f"N={n}: new {new / 1e3:,.1f}k, old {old / 1e3:,.1f}k tokens/s, new/old {new / old:.4f}"
    if n > 1 and ("new", 1) in mean and ("old", 1) in mean:
        line += (f"; scaling new {100 * new / (n * mean[('new', 1)]):.1f}%,"
                 f" old {100 * old / (n * mean[('old', 1)]):.1f}%")
    print(line)
PY
if [ -n "${FT_TRACES:-}" ]; then
  T=/tmp/ft_ba_traces
  rm -rf $T && mkdir -p $T
  N=$(echo $GPUS | tr ' ' '\n' | sort -n | tail -1)
  for label in new old; do
    bin=./build-gpu/fittrain
    [ $label = old ] && bin=$OLDBIN
    for n in 1 "$N"; do
      run "trace_$label" "$bin" "$n" FT_TRACE=$T/${label}_N$n FT_TRACE_STEPS=20:24 >/dev/null
    done
    # whole summaries in $OUT, their heads here (a summary piped into head died of SIGPIPE)
    python3 bench/trace_summary.py $T/${label}_N$N.rank0.jsonl --baseline $T/${label}_N1.rank0.jsonl --gaps 4 \
      >"$OUT/trace_${label}_N$N.txt" 2>&1
    python3 bench/trace_summary.py $T/${label}_N1.rank0.jsonl --gaps 4 >"$OUT/trace_${label}_N1.txt" 2>&1
    echo "== $label, N=$N rank 0 against N=1"
    head -30 "$OUT/trace_${label}_N$N.txt"
    echo "== $label, N=1"
    head -14 "$OUT/trace_${label}_N1.txt"
  done
fi
