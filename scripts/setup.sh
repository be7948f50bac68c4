#!/usr/bin/env bash
# Installs what fittrain needs on Debian 12 (idempotent: does nothing when all is there),
# then configures and builds into build/. Used by both README commands and by CI.
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS=(build-essential cmake ninja-build pkg-config libopenblas-openmp-dev libomp-dev libgtest-dev
      libcli11-dev nlohmann-json3-dev libopenmpi-dev openmpi-bin
      libsentencepiece-dev libtomlplusplus-dev libsnappy-dev libzstd-dev zlib1g-dev)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# CUDA sources are compiled when nvcc exists (CI has it; it cannot run them). FITTRAIN_CUDA
# may be set to OFF to skip them for a faster CPU-only build.
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFITTRAIN_CUDA="${FITTRAIN_CUDA:-AUTO}" >/dev/null
cmake --build build -j"$(nproc)"
