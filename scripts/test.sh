#!/usr/bin/env bash
# Builds (installing dependencies if needed) and runs every test. GPU tests (GPU_*) skip
# themselves without a CUDA device; scripts/run_gpu_tests.sh runs them on a GPU machine.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cd build
# One test at a time: each test already uses every core through OpenMP, and OpenMP threads
# that spin while another test holds the cores slow everything down many times over.
ctest --output-on-failure -j1 --timeout 900
