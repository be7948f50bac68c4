#!/usr/bin/env bash
# Speed of the vocabulary scan at open: writes a shard of random uint16 tokens (default
# 1 GiB) and runs bench/shard_scan_bench.cpp on it. Needs a CPU build in build/.
set -euo pipefail
cd "$(dirname "$0")/.."
GIB=${1:-1}
SHARD=${SHARD:-/tmp/fittrain_scan_bench.bin}
python3 - "$SHARD" "$GIB" <<'PY'
import os, struct, sys
path, gib = sys.argv[1], float(sys.argv[2])
n = int(gib * (1 << 30)) // 2
with open(path, "wb") as f:
    f.write(struct.pack("<3i", 20240520, 1, n) + b"\0" * (1024 - 12))
    left = n * 2
    while left:
        k = min(left, 64 << 20)
        f.write(os.urandom(k))
        left -= k
PY
c++ -std=c++20 -O2 -fopenmp -Isrc bench/shard_scan_bench.cpp build/libfittrain_core.a -o build/shard_scan_bench
OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)} build/shard_scan_bench "$SHARD"
rm -f "$SHARD"
