#!/usr/bin/env bash
# Device machine, repo root: builds and runs bench/silu_fusion_probe.cu (can cuDNN fuse CDEIT's
# SiLU into its MLP products, and at what speed against cuBLASLt plus the separate pass) at
# CDEIT's first two stages at batch 32 (M = 131072 and 32768 tokens, W = 512, H = 2048).
# Output in $OUT/silu_fusion_probe.txt.
set -uo pipefail
OUT=${OUT:-/tmp}
export PATH=/usr/local/cuda/bin:$PATH
INC=(-I/usr/local/cuda/include)
[[ -d /usr/include/x86_64-linux-gnu ]] && INC+=(-I/usr/include/x86_64-linux-gnu)
nvcc -O2 -std=c++17 -arch=sm_90 bench/silu_fusion_probe.cu "${INC[@]}" -L/usr/local/cuda/lib64 -L/usr/local/cuda/lib \
  -lcudnn -lcublasLt -o /tmp/silu_fusion_probe || exit 3
{
  nvidia-smi --query-gpu=name --format=csv,noheader | head -1
  for M in 131072 32768; do timeout 300 /tmp/silu_fusion_probe "$M" 512 2048; done
} 2>&1 | tee "$OUT/silu_fusion_probe.txt"
