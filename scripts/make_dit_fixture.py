#!/usr/bin/env python3
"""Writes tests/fixtures/dit_tiny.fix (condition vector, predicting x0) or, with --cond map,
tests/fixtures/dit_tiny_map.fix (condition map concatenated as an input channel, predicting
eps): a small conditional DiT (Peebles & Xie 2023) in PyTorch (fp32) with its weights, a
batch, the noisy images, the prediction, the loss and every gradient. fittrain's CPU backend
must match it at fp32 tolerance (tests/models/dit_test.cpp, DiTFixture), and the CUDA backend at
fp32 and bf16 tolerance (tests/gpu/diffusion_fixture_gpu_test.cpp). Then the losses of 10 AdamW
steps on the same batch (clipped at norm 1) and the final weights.

This script is the source of the fixture; run it on a machine with PyTorch and NumPy:
    python3 scripts/make_dit_fixture.py tests/fixtures/dit_tiny.fix
    python3 scripts/make_dit_fixture.py --cond map tests/fixtures/dit_tiny_map.fix

File format: as scripts/make_gpt2_fixture.py (b"FTFIX001", uint64 n, n bytes of JSON
{"config":{...}, "tensors":{name:{"dtype","shape","offset"}}}, then the payloads).
config: {"model": fittrain's DiT configuration (models/dit_config.h), "batch": B, ...}.
tensors: params, grads (fittrain's flat layout, below), image [B, C*H*W] (x0), cond [B, ...],
t i32 [B], noise_key i32 [B], x_t [B, C*H*W], pred [B, C*H*W] (the network on x_t), loss [1]
(the batch mean of each sample's mean squared error), step_losses [10] (step 0's loss first),
params_after (after the 10 updates); config also holds the optimizer settings (steps, lr,
weight_decay, beta1, beta2, eps, grad_clip).

fittrain's flat parameter layout (models/dit.cpp, the ParamTable order):
  x_embed_w [D, C*p*p]    the patch Conv2d's weight over the x_t channels, flattened (c, py, px)
  x_embed_b [D]
  cond_embed_w [D, Cc*p*p] the same Conv2d's weight over the condition-map channels (map only)
  t_w1 [D, F], t_b1 [D], t_w2 [D, D], t_b2 [D]          timestep MLP
  y_w1 [D, Dc], y_b1 [D], y_w2 [D, D], y_b2 [D]         condition-vector MLP (vector only)
  per block, stacked over L: ada_w [6D, D], ada_b [6D], qkv_w [3D, D], qkv_b [3D],
      proj_w [D, D], proj_b [D], fc1_w [R, D], fc1_b [R], fc2_w [D, R], fc2_b [D]
  final_ada_w [2D, D], final_ada_b [2D], out_w [C*p*p, D], out_b [C*p*p]
What fittrain does and this script therefore does too (see models/dit.h):
  - LayerNorm eps 1e-5 (the backend's; DiT uses 1e-6), no affine;
  - the timestep embedding's frequencies in float64 rounded to float32, the argument t*f in
    float32, cos/sin in float64 rounded once (backend.h: timestep_embedding), cos first;
  - unpatchify reads the final linear's features as (c, py, px) (DiT: (py, px, c); the same
    for one channel), no learned sigma;
  - the noise is fittrain's counter-based generator (backend/diffusion_rng.h: Philox4x32-10,
    Box-Muller in float64) under the model's seed kDiTNoiseSeed, re-implemented in NumPy below,
    and x_t = c0 * x0 + c2 * z in float32 with c0 = f32(sqrt(ab_t)), c2 = f32(sqrt(1 - ab_t)).
Weights are random (not DiT's adaLN-Zero initialisation, whose zeros would hide most gradients).
"""
import argparse, math, sys
import numpy as np
import torch, torch.nn as nn, torch.nn.functional as F

from fixture_file import write_fixture

L, D, HEADS, P, IMG, C, FREQ, RATIO, B = 2, 64, 2, 2, 8, 1, 32, 4, 4   # head size 32: the CUDA kernels take it
COND_DIM = 5
LN_EPS = 1e-5
STEPS = 1000
# The training steps recorded after the first (as scripts/make_gpt2_fixture.py): AdamW, matrices
# decayed (fittrain's ParamTable: every weight of two or more dimensions), norm clipping.
TRAIN_STEPS, LR, WD, BETAS, ADAM_EPS, CLIP = 10, 1e-3, 0.1, (0.9, 0.95), 1e-8, 1.0
NOISE_SEED = 0x6469742D6E6F6973   # models/dit_config.h kDiTNoiseSeed ("dit-nois")
MASK = np.uint64(0xFFFFFFFF)

# ---- fittrain's noise (backend/diffusion_rng.h) -------------------------------------------------

def philox4x32_10(ctr, key):
    """ctr: uint64 arrays c0..c3 (each < 2^32), key: two ints. Returns the four output words."""
    m0, m1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
    w0, w1 = np.uint64(0x9E3779B9), np.uint64(0xBB67AE85)
    c0, c1, c2, c3 = ctr
    k0, k1 = np.uint64(key[0]), np.uint64(key[1])
    for r in range(10):
        if r > 0:
            k0, k1 = (k0 + w0) & MASK, (k1 + w1) & MASK
        p0, p1 = m0 * c0, m1 * c2            # < 2^64: no overflow
        hi0, lo0, hi1, lo1 = p0 >> np.uint64(32), p0 & MASK, p1 >> np.uint64(32), p1 & MASK
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
    return c0, c1, c2, c3

def box_muller(a, b):
    u1 = (a.astype(np.float64) + 1.0) * (1.0 / 4294967296.0)
    u2 = b.astype(np.float64) * (1.0 / 4294967296.0)
    r, th = np.sqrt(-2.0 * np.log(u1)), 6.283185307179586476925286766559 * u2
    return (r * np.cos(th)).astype(np.float32), (r * np.sin(th)).astype(np.float32)

def diffusion_normal(seed, key, n):
    """Elements 0..n-1 of sample key `key` (uint32) under `seed`: diffusion_normal(seed, key, i)."""
    j = np.arange((n + 3) // 4, dtype=np.uint64)
    ctr = (j & MASK, j >> np.uint64(32), np.full_like(j, np.uint64(key)), np.zeros_like(j))
    w = philox4x32_10(ctr, (seed & 0xFFFFFFFF, seed >> 32))
    z0, z1 = box_muller(w[0], w[1])
    z2, z3 = box_muller(w[2], w[3])
    return np.stack([z0, z1, z2, z3], axis=1).reshape(-1)[:n]

def alpha_bars():
    return np.cumprod(1.0 - np.linspace(1e-4, 0.02, STEPS, dtype=np.float64))

# ---- the model ---------------------------------------------------------------------------------------

def pos_embed(dim, grid):
    """DiT's get_2d_sincos_pos_embed (float64, then float32)."""
    def one_d(d, pos):
        omega = 1.0 / 10000 ** (np.arange(d // 2, dtype=np.float64) / (d / 2.0))
        out = np.einsum("m,d->md", pos.reshape(-1), omega)
        return np.concatenate([np.sin(out), np.cos(out)], axis=1)
    gh = np.arange(grid, dtype=np.float32)
    g = np.stack(np.meshgrid(gh, gh), axis=0).reshape(2, 1, grid, grid)   # g[0]: columns, g[1]: rows
    return np.concatenate([one_d(dim // 2, g[0]), one_d(dim // 2, g[1])], axis=1).astype(np.float32)

def timestep_embedding(t, dim):
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float64) / half).float()
    args = (t.float()[:, None] * freqs[None]).double()
    return torch.cat([torch.cos(args), torch.sin(args)], dim=1).float()

def modulate(x, shift, scale):
    return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)

class Block(nn.Module):
    def __init__(s):
        super().__init__()
        s.ada = nn.Linear(D, 6 * D); s.qkv = nn.Linear(D, 3 * D); s.proj = nn.Linear(D, D)
        s.fc1 = nn.Linear(D, RATIO * D); s.fc2 = nn.Linear(RATIO * D, D)
    def forward(s, x, sc):
        sh1, sc1, g1, sh2, sc2, g2 = s.ada(sc).chunk(6, dim=1)
        b, t, _ = x.shape
        h = modulate(F.layer_norm(x, (D,), eps=LN_EPS), sh1, sc1)
        q, k, v = s.qkv(h).reshape(b, t, 3, HEADS, D // HEADS).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, D)
        x = x + g1.unsqueeze(1) * s.proj(a)
        h = modulate(F.layer_norm(x, (D,), eps=LN_EPS), sh2, sc2)
        return x + g2.unsqueeze(1) * s.fc2(F.gelu(s.fc1(h), approximate="tanh"))

class DiT(nn.Module):
    def __init__(s, cond_channels, cond_dim):
        super().__init__()
        s.cc, s.cd = cond_channels, cond_dim
        s.x_embed = nn.Conv2d(C + cond_channels, D, P, stride=P)
        s.register_buffer("pos", torch.from_numpy(pos_embed(D, IMG // P)))
        s.t1, s.t2 = nn.Linear(FREQ, D), nn.Linear(D, D)
        if cond_dim: s.y1, s.y2 = nn.Linear(cond_dim, D), nn.Linear(D, D)
        s.blocks = nn.ModuleList([Block() for _ in range(L)])
        s.f_ada, s.out = nn.Linear(D, 2 * D), nn.Linear(D, P * P * C)
    def forward(s, x_t, cond, t):
        b = x_t.shape[0]
        inp = torch.cat([x_t, cond.reshape(b, s.cc, IMG, IMG)], dim=1) if s.cc else x_t
        x = s.x_embed(inp).flatten(2).transpose(1, 2) + s.pos            # tokens row-major over the grid
        c = s.t2(F.silu(s.t1(timestep_embedding(t, FREQ))))
        if s.cd: c = c + s.y2(F.silu(s.y1(cond)))
        sc = F.silu(c)
        for blk in s.blocks: x = blk(x, sc)
        shift, scale = s.f_ada(sc).chunk(2, dim=1)
        x = s.out(modulate(F.layer_norm(x, (D,), eps=LN_EPS), shift, scale))   # [b, T, C*p*p], (c, py, px)
        g = IMG // P
        return x.reshape(b, g, g, C, P, P).permute(0, 3, 1, 4, 2, 5).reshape(b, C, IMG, IMG)

def init(m):
    g = torch.Generator().manual_seed(1234)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if p.dim() >= 2:
                fan_in = p[0].numel()
                std = 0.05 if "ada" in name else 1.0 / math.sqrt(fan_in)
                p.copy_(torch.randn(p.shape, generator=g) * std)
            else:
                p.copy_(0.02 * torch.randn(p.shape, generator=g))

def flat(m, grad=False):
    get = (lambda p: p.grad) if grad else (lambda p: p.data)
    w = get(m.x_embed.weight)                                   # [D, C + Cc, p, p]
    parts = [w[:, :C].reshape(D, -1), get(m.x_embed.bias)]
    if m.cc: parts.append(w[:, C:].reshape(D, -1))
    parts += [get(m.t1.weight), get(m.t1.bias), get(m.t2.weight), get(m.t2.bias)]
    if m.cd: parts += [get(m.y1.weight), get(m.y1.bias), get(m.y2.weight), get(m.y2.bias)]
    per = lambda f: torch.stack([get(f(b)) for b in m.blocks])
    for f in (lambda b: b.ada.weight, lambda b: b.ada.bias, lambda b: b.qkv.weight, lambda b: b.qkv.bias,
              lambda b: b.proj.weight, lambda b: b.proj.bias, lambda b: b.fc1.weight, lambda b: b.fc1.bias,
              lambda b: b.fc2.weight, lambda b: b.fc2.bias):
        parts.append(per(f))
    parts += [get(m.f_ada.weight), get(m.f_ada.bias), get(m.out.weight), get(m.out.bias)]
    return torch.cat([p.reshape(-1) for p in parts]).contiguous()

def train_record(m, run, flat_fn):
    """run() -> (pred, loss) on the fixture's batch. Returns step 0's prediction, loss and flat
    gradients, then the losses of TRAIN_STEPS AdamW steps on that batch and the final flat weights."""
    decay = [p for p in m.parameters() if p.dim() >= 2]
    nodecay = [p for p in m.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": nodecay, "weight_decay": 0.0}],
                            lr=LR, betas=BETAS, eps=ADAM_EPS, foreach=False)
    losses, first = [], None
    for step in range(TRAIN_STEPS):
        opt.zero_grad(set_to_none=True)
        pred, loss = run()
        loss.backward()
        if step == 0:
            first = (pred.detach(), loss.detach(), flat_fn(m, grad=True).clone())
        losses.append(loss.item())
        torch.nn.utils.clip_grad_norm_(m.parameters(), CLIP)
        opt.step()
    return first[0], first[1], first[2], torch.tensor(losses, dtype=torch.float32), flat_fn(m).clone()

def train_config():
    return {"steps": TRAIN_STEPS, "lr": LR, "weight_decay": WD, "beta1": BETAS[0], "beta2": BETAS[1],
            "eps": ADAM_EPS, "grad_clip": CLIP}

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cond", choices=["vector", "map"], default="vector")
    ap.add_argument("path", nargs="?")
    a = ap.parse_args()
    vector = a.cond == "vector"
    path = a.path or ("tests/fixtures/dit_tiny.fix" if vector else "tests/fixtures/dit_tiny_map.fix")
    cond_channels, cond_dim, predict = (0, COND_DIM, "x0") if vector else (1, 0, "eps")
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    m = DiT(cond_channels, cond_dim); init(m)
    rng = np.random.default_rng(99)
    E = C * IMG * IMG
    image = rng.uniform(-1, 1, (B, E)).astype(np.float32)
    cond = rng.standard_normal((B, cond_dim if vector else cond_channels * IMG * IMG)).astype(np.float32)
    t = np.array([0, 250, 600, 999], dtype=np.int32)[:B]
    keys = rng.integers(-2**31, 2**31, B, dtype=np.int64).astype(np.int32)
    ab = alpha_bars()
    x_t = np.empty_like(image); eps = np.empty_like(image)
    for b in range(B):
        z = diffusion_normal(NOISE_SEED, int(np.uint32(keys[b])), E)
        c0, c2 = np.float32(math.sqrt(ab[t[b]])), np.float32(math.sqrt(1.0 - ab[t[b]]))
        eps[b] = z
        x_t[b] = c0 * image[b] + c2 * z                          # float32, as the CPU backend
    params0 = flat(m).clone()
    target = torch.from_numpy(image if predict == "x0" else eps).reshape(B, C, IMG, IMG)
    def run():
        pred = m(torch.from_numpy(x_t).reshape(B, C, IMG, IMG), torch.from_numpy(cond), torch.from_numpy(t))
        return pred, ((pred - target) ** 2).reshape(B, -1).mean(dim=1).mean()
    pred, loss, grads, step_losses, params_after = train_record(m, run, flat)
    model_config = {"arch": "dit", "depth": L, "hidden": D, "heads": HEADS, "patch": P, "image": IMG,
                    "in_channels": C, "cond_channels": cond_channels, "cond_dim": cond_dim, "mlp_ratio": RATIO,
                    "freq_dim": FREQ, "predict": predict}
    tensors = {"params": params0, "grads": grads, "image": torch.from_numpy(image), "cond": torch.from_numpy(cond),
               "t": torch.from_numpy(t), "noise_key": torch.from_numpy(keys), "x_t": torch.from_numpy(x_t),
               "pred": pred.reshape(B, -1), "loss": loss.reshape(1), "step_losses": step_losses,
               "params_after": params_after}
    write_fixture(path, {"model": model_config, "batch": B, "ln_eps": LN_EPS, **train_config(),
                         "torch": torch.__version__}, tensors)
    print(f"wrote {path}: loss {loss.item():.6f}, step losses {step_losses[0]:.5f} .. {step_losses[-1]:.5f}, "
          f"{params0.numel()} parameters")

if __name__ == "__main__":
    main()
