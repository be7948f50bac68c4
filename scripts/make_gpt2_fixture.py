#!/usr/bin/env python3
"""Writes tests/fixtures/gpt2_tiny.fix: a small GPT-2 in PyTorch (fp32) with its weights,
a batch, the logits, the loss, every gradient, and the losses of 10 AdamW steps with
gradient clipping. fittrain's CPU backend must match it at fp32 tolerance, the CUDA backend
at bf16 tolerance (tests/models/gpt2_fixture_test.cpp, tests/gpu/).

This script is the source of the fixture; run it on a machine with PyTorch:
    python3 scripts/make_gpt2_fixture.py tests/fixtures/gpt2_tiny.fix

File format (little endian): b"FTFIX001", uint64 n, n bytes of JSON
{"config":{...}, "tensors":{name:{"dtype":"f32"|"i32","shape":[...],"offset":bytes}}},
then the tensor payloads at their offsets from the end of the JSON.
Parameters and gradients use fittrain's flat layout (models/gpt2.cpp gpt2_param_layout):
wte[Vp,C] (rows >= V zero), wpe[T,C], then per layer stacked over L: ln1w, ln1b, qkvw[3C,C],
qkvb, attprojw[C,C], attprojb, ln2w, ln2b, fcw[4C,C], fcb, fcprojw[C,4C], fcprojb; lnfw, lnfb.
"""
import math, sys
import torch, torch.nn as nn, torch.nn.functional as F

from fixture_file import write_fixture

L, H, C, T, V, B = 2, 2, 64, 32, 100, 4   # head size 32: the smallest the CUDA kernels take
VP = (V + 127) // 128 * 128
STEPS, LR, WD, BETAS, EPS, CLIP = 10, 1e-3, 0.1, (0.9, 0.95), 1e-8, 1.0

class Block(nn.Module):
    def __init__(s):
        super().__init__()
        s.ln1 = nn.LayerNorm(C); s.qkv = nn.Linear(C, 3 * C); s.proj = nn.Linear(C, C)
        s.ln2 = nn.LayerNorm(C); s.fc = nn.Linear(C, 4 * C); s.fc2 = nn.Linear(4 * C, C)
    def forward(s, x):
        q, k, v = s.qkv(s.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(x.shape[0], T, H, C // H).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + s.proj(y.transpose(1, 2).contiguous().view(x.shape[0], T, C))
        return x + s.fc2(F.gelu(s.fc(s.ln2(x)), approximate="tanh"))

class GPT(nn.Module):
    def __init__(s):
        super().__init__()
        s.wte = nn.Embedding(V, C); s.wpe = nn.Embedding(T, C)
        s.blocks = nn.ModuleList([Block() for _ in range(L)])
        s.lnf = nn.LayerNorm(C)
    def forward(s, idx):
        x = s.wte(idx) + s.wpe(torch.arange(T))
        for b in s.blocks: x = b(x)
        return s.lnf(x) @ s.wte.weight.t()   # tied output projection

def init(m):
    g = torch.Generator().manual_seed(1234)
    for name, p in m.named_parameters():
        with torch.no_grad():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * L) if name.endswith(("proj.weight", "fc2.weight")) else 0.02
                p.copy_(torch.randn(p.shape, generator=g) * std)
            elif "ln" in name and name.endswith("weight"):
                # not exactly 1, so layernorm gradients are exercised with a real weight
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.02 * torch.randn(p.shape, generator=g))

def flat(m, grad=False):
    get = (lambda p: p.grad) if grad else (lambda p: p.data)
    wte = torch.zeros(VP, C); wte[:V] = get(m.wte.weight)
    parts = [wte, get(m.wpe.weight)]
    per = lambda f: torch.stack([get(f(b)) for b in m.blocks])
    for f in (lambda b: b.ln1.weight, lambda b: b.ln1.bias, lambda b: b.qkv.weight, lambda b: b.qkv.bias,
              lambda b: b.proj.weight, lambda b: b.proj.bias, lambda b: b.ln2.weight, lambda b: b.ln2.bias,
              lambda b: b.fc.weight, lambda b: b.fc.bias, lambda b: b.fc2.weight, lambda b: b.fc2.bias):
        parts.append(per(f))
    parts += [get(m.lnf.weight), get(m.lnf.bias)]
    return torch.cat([p.reshape(-1) for p in parts]).contiguous()

def main(path):
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    m = GPT(); init(m)
    g = torch.Generator().manual_seed(99)
    tokens = torch.randint(0, V, (B, T), generator=g)
    targets = torch.randint(0, V, (B, T), generator=g)
    params0 = flat(m)
    logits = m(tokens)
    loss = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))
    loss.backward()
    grads = flat(m, grad=True)
    decay = [p for p in m.parameters() if p.dim() >= 2]
    nodecay = [p for p in m.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": nodecay, "weight_decay": 0.0}],
                            lr=LR, betas=BETAS, eps=EPS, foreach=False)
    losses = []
    for step in range(STEPS):
        opt.zero_grad(set_to_none=True)
        l = F.cross_entropy(m(tokens).reshape(-1, V), targets.reshape(-1))
        l.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), CLIP)
        opt.step()
        losses.append(l.item())
    params_final = flat(m)

    tensors = {"params": params0, "grads": grads, "logits": logits.detach().contiguous(),
               "loss": loss.detach().reshape(1), "tokens": tokens.int(), "targets": targets.int(),
               "step_losses": torch.tensor(losses), "params_after": params_final}
    write_fixture(path, {"n_layer": L, "n_head": H, "n_embd": C, "seq_len": T, "vocab_size": V, "batch": B,
                         "steps": STEPS, "lr": LR, "weight_decay": WD, "beta1": BETAS[0], "beta2": BETAS[1],
                         "eps": EPS, "grad_clip": CLIP, "torch": torch.__version__}, tensors)
    print(f"wrote {path}: loss {loss.item():.6f}, step losses {losses[0]:.5f} .. {losses[-1]:.5f}")

if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/gpt2_tiny.fix")
