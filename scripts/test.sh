#!/usr/bin/env bash
# Builds (installing dependencies if needed) and runs every test. GPU tests (GPU_*) skip
# themselves without a CUDA device; scripts/run_gpu_tests.sh runs them on a GPU machine.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cd build
ctest --output-on-failure -j"$(nproc)" --timeout 900
