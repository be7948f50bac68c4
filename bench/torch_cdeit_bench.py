"""PyTorch reference for CDEIT training throughput and memory on one GPU.

The same network as fittrain's `--model cdeit` (scripts/cdeit_torch.py: a U-shaped DiT with
window attention in the high-resolution stages, Swin patch merging, nearest upsampling with
skip fusion, RMSNorm, SiLU MLPs, adaLN-Zero from the timestep, the condition map as a second
input channel), trained to predict x0 with the per-image MSE under bf16 autocast and fused
AdamW, as fittrain's bf16 step does. Prints one JSON line per batch size.
Usage: python3 torch_cdeit_bench.py [--compile] [--preset cdeit|cdeit-tiny] [--shift 0|1] [--windows N] --batches 8,16,32
"""
import argparse, json, os, sys, time
import torch, torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from cdeit_torch import CDEIT, PRESETS   # noqa: E402

def run(args, B):
    torch.manual_seed(0)
    cfg = dict(PRESETS[args.preset])
    if args.shift is not None: cfg["shift"] = args.shift
    model = CDEIT(cfg).cuda()
    nparams = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    fwd = torch.compile(model) if args.compile else model
    abar = torch.cumprod(1 - torch.linspace(1e-4, 0.02, 1000, device="cuda", dtype=torch.float64), 0).float()
    img, C, Cc = cfg["image"], cfg["in_channels"], cfg["cond_channels"]
    x0 = torch.rand(B, C, img, img, device="cuda") * 2 - 1
    cond = torch.randn(B, Cc * img * img, device="cuda")
    torch.cuda.reset_peak_memory_stats()
    def one():
        t = torch.randint(0, 1000, (B,), device="cuda")
        a = abar[t].view(B, 1, 1, 1)
        xt = a.sqrt() * x0 + (1 - a).sqrt() * torch.randn_like(x0)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.mse_loss(fwd(xt, cond, t).float(), x0)
        loss.backward()
        opt.step(); opt.zero_grad(set_to_none=True)
        return loss
    for _ in range(args.warmup): one()
    # --windows timing windows of --steps steps each; the rate is the median window's, so one
    # disturbed window (a clock change, a neighbour) does not decide it, as fittrain's rate is
    # the median of its logged intervals (bench/fittrain_summary.py)
    per_window = []
    for _ in range(args.windows):
        torch.cuda.synchronize(); t0 = time.perf_counter()
        for _ in range(args.steps): loss = one()
        torch.cuda.synchronize(); per_window.append((time.perf_counter() - t0) / args.steps)
    dt = sorted(per_window)[len(per_window) // 2]
    res = dict(impl="cdeit" + ("+compile" if args.compile else ""), preset=args.preset, img=img, patch=cfg["patch"],
               tokens=(img // cfg["patch"]) ** 2, depths=cfg["depths"], widths=cfg["widths"], windows=cfg["windows"],
               shift=cfg["shift"], B=B, params=nparams, ms_per_step=round(dt * 1e3, 2), images_per_s=round(B / dt, 1),
               peak_alloc_gib=round(torch.cuda.max_memory_allocated() / 2**30, 2), loss=round(loss.item(), 4),
               window_images_per_s=[round(B / w, 1) for w in per_window])
    del model, opt, fwd; torch.cuda.empty_cache()
    return res

if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--compile", action="store_true"); p.add_argument("--preset", default="cdeit", choices=sorted(PRESETS))
    p.add_argument("--shift", type=int, default=None, help="override the preset's shifted windows (0/1)")
    p.add_argument("--batches", default="8,16,32"); p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--windows", type=int, default=1, help="timing windows of --steps steps; the median is reported")
    args = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = True
    for B in [int(b) for b in args.batches.split(",") if b]:
        print(json.dumps(run(args, B)), flush=True)
