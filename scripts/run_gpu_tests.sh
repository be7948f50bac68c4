#!/usr/bin/env bash
# Builds fittrain_tests with the CUDA backend and runs the GPU_* tests, on the device machine.
# Log: ${OUT:-/tmp}/gpu_tests.log. Usage: bash scripts/run_gpu_tests.sh [extra gtest args]
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

EXTRA=()
if [[ -f .debs/gpu-deps.tar.xz ]]; then
  DEPS=/tmp/ft-gpu-deps
  rm -rf "$DEPS" && mkdir -p "$DEPS" && tar -C "$DEPS" -xJf .debs/gpu-deps.tar.xz
  P=$DEPS/prefix
  sed "s|@PREFIX@|$P|" "$P/lib/pkgconfig/openblas.pc.in" >"$P/lib/pkgconfig/openblas.pc"
  command -v pkg-config >/dev/null || { export PATH=$PATH:$P/bin; export LD_LIBRARY_PATH=$P/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}; }
  pkg-config --exists openblas 2>/dev/null || export PKG_CONFIG_PATH=$P/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
  export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$P/lib
  EXTRA+=(-DCMAKE_PREFIX_PATH=$P)
fi

# CMake < 3.26 does not know nvcc 13's C++20 flag; giving it explicitly is harmless later.
cmake -S . -B build-gpu -G Ninja -DFITTRAIN_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 \
  -DCMAKE_CUDA20_EXTENSION_COMPILE_OPTION=-std=c++20 "${EXTRA[@]}" >"$OUT_DIR/gpu_configure.log" 2>&1 \
  || { tail -40 "$OUT_DIR/gpu_configure.log"; exit 2; }
cmake --build build-gpu --target fittrain_tests -j"$(nproc)" >"$OUT_DIR/gpu_build.log" 2>&1 \
  || { grep -E "error|FAILED" "$OUT_DIR/gpu_build.log" | head -40; tail -20 "$OUT_DIR/gpu_build.log"; exit 3; }
echo "== build ok"
./build-gpu/fittrain_tests --gtest_filter='GPU_*' "$@" 2>&1 | tee "$LOG"
