#!/usr/bin/env python3
"""Baseline for fittrain's KV-cache generation (GPU_Gpt2Generate.TokensPerSecond124M): Hugging
Face transformers' GPT2LMHeadModel.generate with its KV cache, GPT-2 124M with random weights,
bf16, a batch of 32 prompts of 64 random tokens, 256 new tokens each, greedy (and sampled:
temperature 1, top-k 50). Prints one JSON line per mode with tokens/s.

    python3 bench/torch_generate_bench.py [--batch 32] [--prompt 64] [--new 256]
"""
import argparse
import json
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--new", type=int, default=256)
    a = ap.parse_args()
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config()).to("cuda", torch.bfloat16).eval()
    ids = torch.randint(0, 50257, (a.batch, a.prompt), device="cuda")
    mask = torch.ones_like(ids)
    # greedy twice: the first generate() of a mode pays one-time costs the warm-up does not
    # cover (measured 19.5 s against 2.5 s for the first sampled run on an H100); the last
    # line of each mode is its number.
    for mode in ("greedy", "sampled", "greedy", "sampled"):
        kw = dict(do_sample=mode == "sampled", top_k=50 if mode == "sampled" else None, temperature=1.0)
        gen = dict(max_new_tokens=a.new, min_new_tokens=a.new, pad_token_id=0, attention_mask=mask, **kw)
        with torch.no_grad():
            model.generate(ids, **{**gen, "max_new_tokens": 4, "min_new_tokens": 4})  # warm-up
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = model.generate(ids, **gen)
            torch.cuda.synchronize()
            s = time.perf_counter() - t0
        n = (out.shape[1] - a.prompt) * a.batch
        print(json.dumps({"impl": "transformers.generate", "mode": mode, "batch": a.batch, "prompt": a.prompt,
                          "new": a.new, "seconds": round(s, 3), "tokens_per_s": round(n / s)}))


if __name__ == "__main__":
    main()
