# Sourced by the bench/ scripts on the device machine (repo root): the carried dependency
# prefix (scripts/device_env.sh), a Release build of the fittrain binary, and random GPT-2
# token files in llm.c's shard format.
source scripts/device_env.sh

# ft_build_fittrain [SRC]: builds SRC/build-gpu/fittrain (CUDA, no tests; SRC: this tree, or
# another source tree such as an older commit's, for before/after runs) unless it exists; log
# in /tmp/bench_build.log (this tree) or /tmp/old_build.log.
ft_build_fittrain() {
  local src=${1:-.} log=/tmp/bench_build.log
  [ "$src" = . ] || log=/tmp/old_build.log
  [ -x "$src/build-gpu/fittrain" ] && return 0
  cmake -S "$src" -B "$src/build-gpu" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFITTRAIN_CUDA=ON -DFITTRAIN_TESTS=OFF \
    -DCMAKE_CUDA_ARCHITECTURES=90 "${FT_CMAKE_EXTRA[@]}" >"$log" 2>&1 &&
    cmake --build "$src/build-gpu" -j"$(nproc)" --target fittrain >>"$log" 2>&1 || { tail -30 "$log"; return 1; }
}

# ft_make_tokens FILE COUNT: COUNT uniform random tokens below 50257 (seed 0), u16 shard v1.
ft_make_tokens() {
  python3 - "$1" "$2" <<'PY'
import sys, numpy as np
n = int(sys.argv[2])
hdr = np.zeros(256, dtype=np.int32); hdr[:3] = (20240520, 1, n)
with open(sys.argv[1], "wb") as f:
    f.write(hdr.tobytes()); f.write(np.random.default_rng(0).integers(0, 50257, n, dtype=np.uint16).tobytes())
PY
}

# Data-parallel benches (dp_*.sh): NVLink multicast off (the shared GPU machines require it;
# the workers fittrain starts inherit it), the fittrain binary, and FT_DP_DATA, 16 Mi random
# GPT-2 tokens.
ft_dp_setup() {
  export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0} TORCH_SYMM_MEM_DISABLE_MULTICAST=${TORCH_SYMM_MEM_DISABLE_MULTICAST:-1}
  export NVSHMEM_DISABLE_NVLS=${NVSHMEM_DISABLE_NVLS:-1}
  ft_build_fittrain || return 1
  FT_DP_DATA=/tmp/fittrain_bench_tokens_dp.bin
  [ -f "$FT_DP_DATA" ] || ft_make_tokens "$FT_DP_DATA" $((16 * 1024 * 1024))
}

# ft_tps METRICS: tokens/s over the logged intervals after the first (warm-up), as total
# tokens / total time (0 when fewer than two intervals were logged).
ft_tps() {
  python3 - "$1" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"tokens_per_s"' in l]
print(round(statistics.harmonic_mean([r["tokens_per_s"] for r in rows[1:]])) if len(rows) > 1 else 0)
PY
}

# ft_dp_train N ZERO DIR [VAR=VALUE ...]: GPT-2 124M on N GPUs (FT_DP_DATA, 32 sequences each,
# ZeRO stage ZERO, ${STEPS:-30} steps logged every 5: ft_tps reads DIR/m.jsonl), the variables
# set for this run only. fittrain's output goes to stdout.
ft_dp_train() {
  local n=$1 z=$2 dir=$3
  shift 3
  rm -rf "$dir"
  env "$@" ./build-gpu/fittrain train --model gpt2 --data-path "$FT_DP_DATA" --global-batch-size $((32 * n)) \
    --micro-batch-size 32 --devices "$n" --zero-stage "$z" --max-steps "${STEPS:-30}" --log-every 5 --eval-every 0 \
    --ckpt-every 0 --keep-checkpoints 1 --results-dir "$dir" --metrics-file "$dir/m.jsonl"
}

# ft_trace_summaries DIR: bench/trace_summary.py of every rank's device trace in DIR against the
# one-GPU trace DIR/N1.rank0.jsonl, on stdout.
ft_trace_summaries() {
  local f
  for f in "$1"/N*.rank*.jsonl; do
    [ "$f" = "$1/N1.rank0.jsonl" ] || python3 bench/trace_summary.py "$f" --baseline "$1/N1.rank0.jsonl" --gaps 6
  done
}

# The cards' clocks and power beside the runs (GPT-2 holds an H200 at its 700 W cap, where any
# extra work lowers the SM clock: docs/PERFORMANCE.md, sessions 17 and 33).
# ft_clock_sampler_start FILE: nvidia-smi samples every 200 ms (timestamp, index, SM clock,
# power, throttle reasons) into FILE until ft_clock_sampler_stop. ft_mark FILE NAME start|end
# marks a run for `python3 bench/smi_summary.py FILE --marks MARKS`.
ft_clock_sampler_start() {
  local q=timestamp,index,clocks.sm,power.draw,clocks_event_reasons.active
  nvidia-smi --query-gpu=$q --format=csv,noheader,nounits >/dev/null 2>&1 ||
    q=timestamp,index,clocks.sm,power.draw,clocks_throttle_reasons.active  # older drivers' name
  nvidia-smi --query-gpu=$q --format=csv,noheader,nounits -lms 200 >"$1" 2>/dev/null &
  FT_CLOCK_SAMPLER=$!
}
ft_clock_sampler_stop() {
  [ -n "${FT_CLOCK_SAMPLER:-}" ] && kill "$FT_CLOCK_SAMPLER" 2>/dev/null && wait "$FT_CLOCK_SAMPLER" 2>/dev/null
  FT_CLOCK_SAMPLER=
}
ft_mark() { echo "$(date +%s.%N) $2 $3" >>"$1"; }

# NVLink's links wake for any peer traffic and sleep only after 50 ms without any (`nvidia-smi
# nvlink -gLowPwrInfo` on the H200 hosts), so every data-parallel step runs with them awake;
# awake, they cost a card at its 700 W cap about 2% of its tokens/s (docs/PERFORMANCE.md,
# session 34). ft_links_awake_start [LOG] keeps GPU 0's links awake with 4 KiB each way every
# 2 ms that GPU 1's copy engines move (bench/nvlink_load.py: no kernel on GPU 0), for a 1-GPU
# run on GPU 0 under the same link state as an N-GPU run's (fails, saying so, when the loader
# could not start: no peer access between GPU 0 and 1); ft_links_awake_stop ends it.
ft_links_awake_start() {
  python3 bench/nvlink_load.py --issuer 1 --peer 0 --bytes 4096 --period-ms 2 >>"${1:-/dev/null}" 2>&1 &
  FT_LINKS_AWAKE=$!
  sleep 1
  kill -0 "$FT_LINKS_AWAKE" 2>/dev/null && return 0
  echo "bench/nvlink_load.py did not keep running (see ${1:-its output}): no links-awake base" >&2
  FT_LINKS_AWAKE=
  return 1
}
ft_links_awake_stop() {
  [ -n "${FT_LINKS_AWAKE:-}" ] && kill "$FT_LINKS_AWAKE" 2>/dev/null && wait "$FT_LINKS_AWAKE" 2>/dev/null
  FT_LINKS_AWAKE=
}
