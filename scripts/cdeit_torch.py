"""CDEIT in PyTorch, as fittrain builds it (models/cdeit_config.h, models/cdeit.h): shared by
scripts/make_cdeit_fixture.py (fp32 parity fixture) and bench/torch_cdeit_bench.py (training
throughput). The condition map is concatenated to x_t as input channels; the timestep alone
drives adaLN-Zero; RMSNorm without affine (eps 1e-6); SiLU MLPs; a U over S stages with window
attention (windows[s] x windows[s] tokens, 0: global), Swin patch merging down, and on the way up
a 1x1 convolution (applied before the nearest x2 upsampling: the same numbers), the upsampled
tokens concatenated with the skip and a Linear(2W, W); DiT's final layer with RMSNorm.
Shifted windows (shift=1: odd blocks of windowed stages) roll the grid by -w/2 WITHOUT Swin's
mask, exactly as fittrain does (the grid is treated as a torus).
"""
import math
import numpy as np
import torch, torch.nn as nn, torch.nn.functional as F

RMS_EPS = 1e-6

def pos_embed(dim, grid):
    """DiT's get_2d_sincos_pos_embed (float64, then float32): [grid*grid, dim]."""
    def one_d(d, pos):
        omega = 1.0 / 10000 ** (np.arange(d // 2, dtype=np.float64) / (d / 2.0))
        out = np.einsum("m,d->md", pos.reshape(-1), omega)
        return np.concatenate([np.sin(out), np.cos(out)], axis=1)
    gh = np.arange(grid, dtype=np.float32)
    g = np.stack(np.meshgrid(gh, gh), axis=0).reshape(2, 1, grid, grid)
    return np.concatenate([one_d(dim // 2, g[0]), one_d(dim // 2, g[1])], axis=1).astype(np.float32)

def timestep_embedding(t, dim):
    """fittrain's rounding (backend.h timestep_embedding): freqs f64 -> f32, t*f in f32, cos/sin in f64."""
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float64, device=t.device) / half).float()
    args = (t.float()[:, None] * freqs[None]).double()
    return torch.cat([torch.cos(args), torch.sin(args)], dim=1).float()

def rms(x):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + RMS_EPS)).to(x.dtype)

def modulate(x, shift, scale):
    return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)

def window_partition(x, G, w, s):
    """[b, G*G, C] -> [b*(G/w)^2, w*w, C] after rolling the grid by -s (backend.h window_partition)."""
    b, _, C = x.shape
    x = x.view(b, G, G, C)
    if s: x = torch.roll(x, shifts=(-s, -s), dims=(1, 2))
    n = G // w
    return x.view(b, n, w, n, w, C).permute(0, 1, 3, 2, 4, 5).reshape(b * n * n, w * w, C)

def window_reverse(x, b, G, w, s):
    C, n = x.shape[-1], G // w
    x = x.view(b, n, n, w, w, C).permute(0, 1, 3, 2, 4, 5).reshape(b, G, G, C)
    if s: x = torch.roll(x, shifts=(s, s), dims=(1, 2))
    return x.reshape(b, G * G, C)

def patch_merge(x, G):
    """Swin's PatchMerging order: (dy, dx) = (0,0), (1,0), (0,1), (1,1)."""
    b, _, C = x.shape
    x = x.view(b, G, G, C)
    x = torch.cat([x[:, 0::2, 0::2], x[:, 1::2, 0::2], x[:, 0::2, 1::2], x[:, 1::2, 1::2]], dim=-1)
    return x.reshape(b, (G // 2) ** 2, 4 * C)

def upsample(x, G):
    b, _, C = x.shape
    x = x.view(b, G, G, C).repeat_interleave(2, dim=1).repeat_interleave(2, dim=2)
    return x.reshape(b, 4 * G * G, C)

class Block(nn.Module):
    def __init__(s, D, W, heads, ratio, grid, window, shift):
        super().__init__()
        s.W, s.heads, s.G, s.w, s.s = W, heads, grid, window, shift
        s.ada = nn.Linear(D, 6 * W); s.qkv = nn.Linear(W, 3 * W); s.proj = nn.Linear(W, W)
        s.fc1 = nn.Linear(W, ratio * W); s.fc2 = nn.Linear(ratio * W, W)
    def forward(s, x, sc):
        sh1, sc1, g1, sh2, sc2, g2 = s.ada(sc).chunk(6, dim=1)
        b = x.shape[0]
        h = modulate(rms(x), sh1, sc1)
        windowed = s.w < s.G
        if windowed: h = window_partition(h, s.G, s.w, s.s)
        n, t, _ = h.shape
        q, k, v = s.qkv(h).reshape(n, t, 3, s.heads, s.W // s.heads).permute(2, 0, 3, 1, 4)
        a = s.proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(n, t, s.W))
        if windowed: a = window_reverse(a, b, s.G, s.w, s.s)
        x = x + g1.unsqueeze(1) * a
        h = modulate(rms(x), sh2, sc2)
        return x + g2.unsqueeze(1) * s.fc2(F.silu(s.fc1(h)))

class CDEIT(nn.Module):
    """cfg: fittrain's model configuration (the JSON of models/cdeit_config.h)."""
    def __init__(s, cfg):
        super().__init__()
        s.cfg = cfg
        s.img, s.p, s.C, s.Cc = cfg["image"], cfg["patch"], cfg["in_channels"], cfg["cond_channels"]
        depths, widths, windows = cfg["depths"], cfg["widths"], cfg["windows"]
        s.S, s.widths = len(depths), widths
        G0 = s.img // s.p
        s.grids = [G0 >> i for i in range(s.S)]
        D, F_, ratio, heads = widths[0], cfg.get("freq_dim", 256), cfg.get("mlp_ratio", 4), cfg["heads"]
        s.freq = F_
        s.x_embed = nn.Conv2d(s.C + s.Cc, D, s.p, stride=s.p)
        s.register_buffer("pos", torch.from_numpy(pos_embed(D, G0)))
        s.t1, s.t2 = nn.Linear(F_, D), nn.Linear(D, D)
        def blocks(st):
            G, w = s.grids[st], windows[st] or s.grids[st]
            return nn.ModuleList([Block(D, widths[st], heads, ratio, G, w,
                                        (w // 2) if (cfg.get("shift", 0) and w < G and i % 2 == 1) else 0)
                                  for i in range(depths[st])])
        s.down = nn.ModuleList([blocks(st) for st in range(s.S)])
        s.merge = nn.ModuleList([nn.Linear(4 * widths[st - 1], widths[st]) for st in range(1, s.S)])
        # up stages in running order: S-2 .. 0
        s.up_stages = list(range(s.S - 2, -1, -1))
        s.up_lin = nn.ModuleList([nn.Linear(widths[st + 1], widths[st]) for st in s.up_stages])
        s.fuse = nn.ModuleList([nn.Linear(2 * widths[st], widths[st]) for st in s.up_stages])
        s.up = nn.ModuleList([blocks(st) for st in s.up_stages])
        s.f_ada, s.out = nn.Linear(D, 2 * D), nn.Linear(D, s.p * s.p * s.C)
    def forward(s, x_t, cond, t):
        b = x_t.shape[0]
        inp = torch.cat([x_t, cond.reshape(b, s.Cc, s.img, s.img).to(x_t.dtype)], dim=1) if s.Cc else x_t
        x = s.x_embed(inp).flatten(2).transpose(1, 2) + s.pos
        sc = F.silu(s.t2(F.silu(s.t1(timestep_embedding(t, s.freq)))))
        skips = []
        for st in range(s.S):
            if st > 0: x = s.merge[st - 1](patch_merge(x, s.grids[st - 1]))
            for blk in s.down[st]: x = blk(x, sc)
            if st < s.S - 1: skips.append(x)
        for j, st in enumerate(s.up_stages):
            u = upsample(s.up_lin[j](x), s.grids[st + 1])
            x = s.fuse[j](torch.cat([u, skips[st]], dim=-1))
            for blk in s.up[j]: x = blk(x, sc)
        shift, scale = s.f_ada(sc).chunk(2, dim=1)
        x = s.out(modulate(rms(x), shift, scale))                       # [b, T, C*p*p], (c, py, px)
        g, P, C = s.img // s.p, s.p, s.C
        return x.reshape(b, g, g, C, P, P).permute(0, 3, 1, 4, 2, 5).reshape(b, C, s.img, s.img)

def flat(m, grad=False):
    """fittrain's flat parameter layout (models/cdeit.cpp, the ParamTable order)."""
    get = (lambda p: p.grad) if grad else (lambda p: p.data)
    D, C = m.widths[0], m.C
    w = get(m.x_embed.weight)
    parts = [w[:, :C].reshape(D, -1), get(m.x_embed.bias)]
    if m.Cc: parts.append(w[:, C:].reshape(D, -1))
    parts += [get(m.t1.weight), get(m.t1.bias), get(m.t2.weight), get(m.t2.bias)]
    def run(blocks):
        for f in (lambda b: b.ada.weight, lambda b: b.ada.bias, lambda b: b.qkv.weight, lambda b: b.qkv.bias,
                  lambda b: b.proj.weight, lambda b: b.proj.bias, lambda b: b.fc1.weight, lambda b: b.fc1.bias,
                  lambda b: b.fc2.weight, lambda b: b.fc2.bias):
            parts.append(torch.stack([get(f(b)) for b in blocks]))
    for st in range(m.S):
        if st > 0: parts += [get(m.merge[st - 1].weight), get(m.merge[st - 1].bias)]
        run(m.down[st])
    for j, st in enumerate(m.up_stages):
        W, fw = m.widths[st], get(m.fuse[j].weight)
        parts += [get(m.up_lin[j].weight), get(m.up_lin[j].bias), fw[:, :W], fw[:, W:], get(m.fuse[j].bias)]
        run(m.up[j])
    parts += [get(m.f_ada.weight), get(m.f_ada.bias), get(m.out.weight), get(m.out.bias)]
    return torch.cat([p.reshape(-1) for p in parts]).contiguous()

PRESETS = {
    # models/registry.cpp
    "cdeit": dict(image=128, patch=2, in_channels=1, cond_channels=1, heads=8, depths=[2, 2, 2, 2],
                  widths=[512, 512, 512, 512], windows=[16, 16, 0, 0], shift=0, mlp_ratio=4, freq_dim=256),
    "cdeit-tiny": dict(image=32, patch=2, in_channels=1, cond_channels=1, heads=2, depths=[2, 1], widths=[64, 64],
                       windows=[4, 0], shift=0, mlp_ratio=4, freq_dim=256),
}
