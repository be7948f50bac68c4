#!/usr/bin/env python3
"""Writes tests/fixtures/cdeit_tiny.fix: a small CDEIT (scripts/cdeit_torch.py, the same model
as fittrain's models/cdeit.h) in PyTorch fp32 with its weights, a batch, the noisy images, the
prediction, the loss and every gradient in fittrain's flat parameter layout. fittrain's CPU
backend must match it at fp32 tolerance (tests/models/cdeit_test.cpp, CdeitFixture), the CUDA
backend at fp32 and bf16 tolerance (tests/gpu/diffusion_fixture_gpu_test.cpp); with the losses of
10 AdamW steps on the batch and the final weights (as scripts/make_dit_fixture.py).

Run on a machine with PyTorch and NumPy:
    python3 scripts/make_cdeit_fixture.py tests/fixtures/cdeit_tiny.fix

The configuration exercises everything the U has (head size 32: the CUDA kernels take it): two stages, windows of
4x4 tokens with the odd block shifted (no mask, as fittrain), patch merging, the up path's 1x1
convolution, upsampling and skip fusion, the condition map channel, predicting x0.
File format, noise and timestep rounding: as scripts/make_dit_fixture.py (whose NumPy Philox
generator this script imports). Weights are random (not adaLN-Zero's zeros, which would hide
most gradients).

fittrain's flat parameter layout (models/cdeit.cpp, the ParamTable order):
  x_embed_w [W0, C*p*p], x_embed_b [W0], cond_embed_w [W0, Cc*p*p], t_w1 [W0, F], t_b1, t_w2 [W0, W0], t_b2
  per stage run, in running order (down 0 .. down S-1, up S-2 .. up 0):
    transition: down s>0: merge_w [W_s, 4 W_{s-1}], merge_b
                up s: up_w [W_s, W_{s+1}], up_b, fuse_up_w [W_s, W_s], fuse_skip_w [W_s, W_s], fuse_b
                (fuse_up_w | fuse_skip_w = the Linear(2W, W) weight over [up, skip], split by columns)
    blocks, stacked over the run's depth: ada_w [6W, W0], ada_b, qkv_w [3W, W], qkv_b, proj_w [W, W],
    proj_b, fc1_w [rW, W], fc1_b, fc2_w [W, rW], fc2_b
  final_ada_w [2 W0, W0], final_ada_b, out_w [C*p*p, W0], out_b
"""
import math, os, sys
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_dit_fixture import diffusion_normal, alpha_bars, NOISE_SEED, train_record, train_config  # noqa: E402
from fixture_file import write_fixture                                                          # noqa: E402
from cdeit_torch import CDEIT, flat                                       # noqa: E402

CFG = {"arch": "cdeit", "image": 16, "patch": 2, "in_channels": 1, "cond_channels": 1, "cond_dim": 0, "heads": 2,
       "depths": [2, 1], "widths": [64, 64], "windows": [4, 0], "shift": 1, "mlp_ratio": 2, "freq_dim": 32,
       "predict": "x0"}
B = 2

def init(m):
    g = torch.Generator().manual_seed(1234)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if p.dim() >= 2:
                std = 0.05 if "ada" in name else 1.0 / math.sqrt(p[0].numel())
                p.copy_(torch.randn(p.shape, generator=g) * std)
            else:
                p.copy_(0.02 * torch.randn(p.shape, generator=g))

def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/cdeit_tiny.fix"
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    m = CDEIT(CFG); init(m)
    C, IMG = CFG["in_channels"], CFG["image"]
    rng = np.random.default_rng(99)
    E = C * IMG * IMG
    image = rng.uniform(-1, 1, (B, E)).astype(np.float32)
    cond = rng.standard_normal((B, CFG["cond_channels"] * IMG * IMG)).astype(np.float32)
    t = np.array([37, 999], dtype=np.int32)[:B]
    keys = rng.integers(-2**31, 2**31, B, dtype=np.int64).astype(np.int32)
    ab = alpha_bars()
    x_t = np.empty_like(image)
    for b in range(B):
        z = diffusion_normal(NOISE_SEED, int(np.uint32(keys[b])), E)
        c0, c2 = np.float32(math.sqrt(ab[t[b]])), np.float32(math.sqrt(1.0 - ab[t[b]]))
        x_t[b] = c0 * image[b] + c2 * z
    params0 = flat(m).clone()
    target = torch.from_numpy(image).reshape(B, C, IMG, IMG)
    def run():
        pred = m(torch.from_numpy(x_t).reshape(B, C, IMG, IMG), torch.from_numpy(cond), torch.from_numpy(t))
        return pred, ((pred - target) ** 2).reshape(B, -1).mean(dim=1).mean()
    pred, loss, grads, step_losses, params_after = train_record(m, run, flat)
    tensors = {"params": params0, "grads": grads, "image": torch.from_numpy(image), "cond": torch.from_numpy(cond),
               "t": torch.from_numpy(t), "noise_key": torch.from_numpy(keys), "x_t": torch.from_numpy(x_t),
               "pred": pred.reshape(B, -1), "loss": loss.reshape(1), "step_losses": step_losses,
               "params_after": params_after}
    write_fixture(path, {"model": CFG, "batch": B, **train_config(), "torch": torch.__version__}, tensors)
    print(f"wrote {path}: loss {loss.item():.6f}, {params0.numel()} parameters")

if __name__ == "__main__":
    main()
