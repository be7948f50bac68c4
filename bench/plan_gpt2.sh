#!/usr/bin/env bash
# `fittrain plan` for GPT-2 124M at T=1024, global batch 64, over several budgets, as a
# markdown table. Usage: bash bench/plan_gpt2.sh BINARY DEVICE [budgets...]
BIN=${1:-./build/fittrain}; DEV=${2:-cpu}; shift 2 || true
BUDGETS=${*:-4GiB 8GiB 16GiB 24GiB 40GiB 80GiB}
echo "| budget | micro-batch | accumulation | last | recompute | eval batch | params | grads | master+optimizer | activations | workspace | total (GiB) | per extra sample |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
for b in $BUDGETS; do
  if out=$("$BIN" plan --json --model gpt2 --global-batch-size 64 --memory-limit "$b" --device "$DEV" 2>&1); then
    echo "$out" | python3 -c "
import json,sys; j=json.load(sys.stdin); B=j['bytes']; G=2**30
print(f\"| $b | {j['micro_batch_size']} | {j['grad_accum_steps']} | {j['last_micro_batch_size']} | {j['recompute']} | {j['eval_batch_size']} | {B['params']/G:.2f} | {B['grads']/G:.2f} | {(B['master']+B['optimizer'])/G:.2f} | {B['activations']/G:.2f} | {B['workspace']/2**20:.1f} MiB | {B['total']/G:.2f} | {j['bytes_per_sample']/2**20:.0f} MiB |\")"
  else
    echo "| $b | refused: ${out#fittrain: error: } |||||||||||| "
  fi
done
