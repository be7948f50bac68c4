#!/usr/bin/env bash
# One H100 call for issue 13 (device machine, repo root), in priority order so that a short
# lease still returns the most: build everything; the GPU tests of the fused diffusion ops and
# of both models (PyTorch fixtures included); CDEIT (batches 16, 32) and DiT-B (batch 64)
# against torch.compile in the same call; each FT_SWEEP variant of fittrain at CDEIT batch 32;
# the largest batches 16 GiB fits; the fused ops' timings. fittrain runs as it trains by default
# (with the EMA of the weights) and, like for like with the PyTorch scripts, without it
# (--ema-decay=0). FT_PRODUCTS=1 ends with the block products timed by fittrain's op table and by
# PyTorch at the same shapes (bench/torch_products.py). Results in $OUT/summary.txt, logs in
# $OUT/logs.tgz.
# FT_DIT=0 leaves out DiT-B, FT_PLAN=0 the largest batches; FT_SWEEP_BATCHES sets the sweep's
# batches (default 32); FT_PROFILE=B adds Nsight Compute's kernel table of fittrain's CDEIT step
# at batch B (bench/profile_diffusion.sh); FT_PERF_OPS replaces the list of op-table entries timed.
#   FT_SWEEP="FT_MATMUL_AUTOTUNE=0" bash bench/issue13_lease.sh
set -uo pipefail
OUT=${OUT:-/tmp/issue13}
L=/tmp/issue13_logs
mkdir -p "$OUT" "$L"
S=$OUT/summary.txt
trap 'tar czf "$OUT/logs.tgz" -C "$L" . 2>/dev/null' EXIT
source scripts/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tee "$S"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DFITTRAIN_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  "${FT_CMAKE_EXTRA[@]}" >"$L/configure.log" 2>&1 && cmake --build build-gpu -j"$(nproc)" >"$L/build.log" 2>&1 ||
  { grep -E "error|FAILED" "$L/build.log" | head -20 | tee -a "$S"; exit 3; }
F=${FT_GTEST:-"GPU_OpTable.silu*:GPU_OpTable.gated*:GPU_OpTable.matmul_bwd_weights*:GPU_DitOps.*:GPU_DiffusionFixture.*:GPU_Cdeit.*"}
timeout 120 ./build-gpu/fittrain_tests --gtest_filter="$F" >"$L/gpu_tests.log" 2>&1
{ echo "gpu tests ($F):"; grep -E "^\[  (PASSED|FAILED)|FAILED  \]|tests? ran" "$L/gpu_tests.log"; } | tee -a "$S"
export BUILD=build-gpu TORCH_MODES=compile
OUT=$L timeout 240 bash bench/cdeit_gpu.sh 30 "16 32" 2>&1 | grep -E '^\{|^chosen|largest' | tee -a "$S"
FT_TRAIN_EXTRA=--ema-decay=0 OUT=$L/noema TORCH=0 timeout 80 bash bench/cdeit_gpu.sh 30 "16 32" 2>&1 | grep '^{' |
  sed 's/^/no EMA /' | tee -a "$S"
if [[ ${FT_DIT:-1} == 1 ]]; then
  OUT=$L timeout 150 bash bench/dit_gpu.sh 40 b 64 2>&1 | grep '^{' | tee -a "$S"
  FT_TRAIN_EXTRA=--ema-decay=0 OUT=$L/noema TORCH=0 timeout 40 bash bench/dit_gpu.sh 40 b 64 2>&1 | grep '^{' |
    sed 's/^/no EMA /' | tee -a "$S"
fi
IFS=';' read -ra VS <<<"${FT_SWEEP:-}"
for V in "${VS[@]}"; do
  env $V OUT="$L/sweep" TORCH=0 timeout 60 bash bench/cdeit_gpu.sh 30 "${FT_SWEEP_BATCHES:-32}" 2>&1 | grep '^{' |
    sed "s/^/$V /" | tee -a "$S"
done
# FT_PROFILE=B: every kernel of fittrain's CDEIT step at batch B by Nsight Compute (tables in $OUT)
if [[ -n ${FT_PROFILE:-} ]]; then
  TORCH=0 ROWS=40 timeout 120 bash bench/profile_diffusion.sh 0 "$FT_PROFILE" 2>&1 | head -42 | tee -a "$S"
  grep -E '"(images_per_s|ms_per_step)"' /dev/null
fi
[[ ${FT_PLAN:-1} == 1 ]] && for m in dit-s dit-b cdeit; do
  data=/tmp/ftdit/eit64
  [[ $m == cdeit ]] && data=/tmp/ftcdeit/eit
  for rc in none block; do
    echo "$m 16GiB recompute $rc: $(./build-gpu/fittrain plan --task diffusion --model $m --data-path $data \
      --memory-limit 16GiB --global-batch-size 4096 --recompute $rc 2>&1 | grep -E 'largest micro' | head -1)"
  done
done | tee -a "$S"
PERF_OPS=${FT_PERF_OPS:-"silu_bwd_recompute silu_bwd_recompute_bias gated_residual_win_bwd gated_residual_win_bwd_bias
  gated_residual_bwd gated_residual_bwd_bias"}
for op in $PERF_OPS; do
  timeout 30 ./build-gpu/fittrain_ops --mode perf --backend cuda --precision bf16 --op $op 2>&1 | grep -v '^#\|passed'
done | tee -a "$S"
if [[ ${FT_PRODUCTS:-0} == 1 ]]; then
  for op in matmul_fwd matmul_bwd; do
    timeout 90 ./build-gpu/fittrain_ops --mode perf --backend cuda --precision bf16 --op $op 2>&1 | grep -v '^#\|passed'
  done | tee -a "$S"
  timeout 90 python3 bench/torch_products.py 2>&1 | tee -a "$S"
fi
