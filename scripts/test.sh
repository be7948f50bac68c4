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
# Every file reader under libFuzzer with ASan/UBSan, from the committed corpus (fuzz/corpus/),
# FT_FUZZ_SECONDS (default 30) per target; FT_FUZZ_SECONDS=0 skips it.
cd ..
if [ "${FT_FUZZ_SECONDS:-30}" != 0 ]; then
  bash scripts/fuzz.sh "${FT_FUZZ_SECONDS:-30}"
fi
