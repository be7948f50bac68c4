#!/usr/bin/env bash
# Builds fittrain_tests with the CUDA backend and runs the GPU_* tests, on the device machine,
# then the op table's perf mode (fittrain_ops --mode perf --backend cuda, bf16: ms and
# TFLOP/s or GB/s per op at GPT-2 124M shapes).
# Logs: ${OUT:-/tmp}/gpu_tests.log, ${OUT:-/tmp}/ops_perf.log.
# Usage: bash scripts/run_gpu_tests.sh [extra gtest args]; FT_OPS_PERF=0 skips the perf table,
# FT_OPS_PRECISION=fp16 times fp16 instead. FT_CPU_TESTS=1 also runs the CPU-labelled tests (what
# CI runs) on this machine, several at once: they must pass with a GPU present too (their
# processes see none: tests/cli/cli_util.h). Log: ${OUT:-/tmp}/cpu_tests.log.
#
# The device image has no registry access; if .debs/gpu-deps.tar.xz is present (OpenBLAS,
# GTest, nlohmann_json and pkg-config, unpacked from this repo's dev machine), it is used as
# a prefix for whatever the image lacks.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${OUT:-/tmp}
LOG=$OUT_DIR/gpu_tests.log
mkdir -p "$OUT_DIR"
export PATH=/usr/local/cuda/bin:$PATH

echo "== device"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv || true
nvcc --version | tail -2 || true
cmake --version | head -1

source scripts/device_env.sh

cmake -S . -B build-gpu -G Ninja -DFITTRAIN_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 "${FT_CMAKE_EXTRA[@]}" >"$OUT_DIR/gpu_configure.log" 2>&1 \
  || { tail -40 "$OUT_DIR/gpu_configure.log"; exit 2; }
cmake --build build-gpu -j"$(nproc)" >"$OUT_DIR/gpu_build.log" 2>&1 \
  || { grep -E "error|FAILED" "$OUT_DIR/gpu_build.log" | head -40; tail -20 "$OUT_DIR/gpu_build.log"; exit 3; }
echo "== build ok"
./build-gpu/fittrain_tests --gtest_filter='GPU_*' "$@" 2>&1 | tee "$LOG"
rc=${PIPESTATUS[0]}
if [ "${FT_OPS_PERF:-1}" != 0 ]; then
  echo "== op table perf"
  ./build-gpu/fittrain_ops --mode perf --backend cuda --precision "${FT_OPS_PRECISION:-bf16}" 2>&1 \
    | tee "$OUT_DIR/ops_perf.log"
fi
if [ "${FT_CPU_TESTS:-0}" = 1 ]; then
  echo "== CPU-labelled tests on this machine"
  (cd build-gpu && OMP_NUM_THREADS=2 ctest -L cpu -j"$(( $(nproc) / 2 ))" --timeout 300 >"$OUT_DIR/cpu_tests.log" 2>&1) \
    || rc=1
  grep -E "tests passed|\*\*\*|Not Run" "$OUT_DIR/cpu_tests.log" | tail -30
fi
exit "$rc"
