"""torch.compile's kernels for one diffusion training step (issue 13), grouped by name, to set
beside fittrain's (bench/profile_diffusion.sh): the DiT of bench/torch_dit_bench.py or the CDEIT
of scripts/cdeit_torch.py, bf16 autocast, fused AdamW, the benches' own step.
Usage: python3 profile_torch_diffusion.py --model dit-s|dit-b|cdeit --batch B [--eager] [--out DIR]
"""
import argparse, os, sys
import torch, torch.nn.functional as F
here = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [here, os.path.join(here, "..", "scripts")]
import torch_dit_bench as tdb  # noqa: E402
from profile_torch_step import kernel_table  # noqa: E402
from cdeit_torch import CDEIT, PRESETS as CPRESETS  # noqa: E402

def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="dit-s"); p.add_argument("--batch", type=int, default=256)
    p.add_argument("--eager", action="store_true"); p.add_argument("--out", default=os.environ.get("OUT", "/tmp"))
    a = p.parse_args()
    torch.manual_seed(0)
    B = a.batch
    abar = torch.cumprod(1 - torch.linspace(1e-4, 0.02, 1000, device="cuda", dtype=torch.float64), 0).float()
    if a.model.startswith("dit"):
        L, C, H = tdb.PRESETS[a.model[-1].upper()]
        model = tdb.DiT(64, 4, 1, 208, L, C, H).cuda()
        x0 = torch.randn(B, 1, 64, 64, device="cuda"); cond = torch.randn(B, 208, device="cuda")
        call = lambda f, xt, t: f(xt, t, cond)
    else:
        cfg = dict(CPRESETS["cdeit"])
        model = CDEIT(cfg).cuda()
        x0 = torch.rand(B, 1, 128, 128, device="cuda") * 2 - 1
        cond = torch.randn(B, 128 * 128, device="cuda")
        call = lambda f, xt, t: f(xt, cond, t)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    fwd = model if a.eager else torch.compile(model)
    def one():
        t = torch.randint(0, 1000, (B,), device="cuda")
        at = abar[t].view(B, 1, 1, 1)
        xt = at.sqrt() * x0 + (1 - at).sqrt() * torch.randn_like(x0)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.mse_loss(call(fwd, xt, t).float(), x0)
        loss.backward()
        opt.step(); opt.zero_grad(set_to_none=True)
    for _ in range(6): one()
    torch.cuda.synchronize()
    tag = f"torch{'' if a.eager else '_compile'}_{a.model}_b{B}"
    kernel_table(one, os.path.join(a.out, tag + ".txt"), tag)

if __name__ == "__main__":
    main()
