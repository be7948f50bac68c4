"""Where PyTorch's time goes on the GPT-2 124M training step, and how fast each of its
scaled-dot-product-attention backends is at GPT-2 shapes. Run on the device machine:
  python3 bench/profile_torch_step.py [--batch 16] [--out DIR]
Prints (1) fwd and fwd+bwd times of causal SDPA (B, 12 heads, T=1024, head size 64, bf16)
for the flash, cuDNN and memory-efficient backends, and (2) the torch.compile training step's
kernels grouped by name (torch.profiler), so fittrain's kernels can be compared op by op.
"""
import argparse, os, sys, time, json
import torch, torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_gpt2_bench as tb

def time_ms(fn, iters=20):
    for _ in range(3): fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(iters): fn()
    e.record(); torch.cuda.synchronize()
    return s.elapsed_time(e) / iters

def sdpa_bench(B):
    H, T, D = 12, 1024, 64
    q, k, v = (torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    do = torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16)
    flop_fwd = 4 * B * H * T * T * D / 2  # causal: half the score matrix
    rows = []
    for name, be in [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
                     ("efficient", SDPBackend.EFFICIENT_ATTENTION)]:
        try:
            with sdpa_kernel([be]):
                f = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)
                tf = time_ms(f)
                def fb():
                    o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                    o.backward(do)
                tfb = time_ms(fb)
            tb_ = tfb - tf
            rows.append(dict(backend=name, B=B, fwd_ms=round(tf, 4), bwd_ms=round(tb_, 4),
                             fwd_tflops=round(flop_fwd / tf / 1e9, 1), bwd_tflops=round(2.5 * flop_fwd / tb_ / 1e9, 1)))
        except Exception as ex:
            rows.append(dict(backend=name, B=B, error=str(ex)[:200]))
    for r in rows: print(json.dumps(r), flush=True)

def profile_step(B, out, compile_=True):
    torch.manual_seed(0)
    a = argparse.Namespace(hf=False, seq=1024)
    model = tb.make_model(a).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
    step = torch.compile(model) if compile_ else model
    idx = torch.randint(0, 50257, (B, 1025), device="cuda")
    x, y = idx[:, :-1].contiguous(), idx[:, 1:].contiguous()
    def one():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = step(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step(); opt.zero_grad(set_to_none=True)
    for _ in range(6): one()
    torch.cuda.synchronize()
    kernel_table(one, os.path.join(out, f"torch_kernels_B{B}{'_compile' if compile_ else ''}.txt"),
                 f"torch{'.compile' if compile_ else ' eager'} B={B}", width=90, show=45)

def kernel_table(one, path, title, steps=3, width=110, show=40):
    """Runs one() `steps` times under torch.profiler and writes (and prints the top `show` of) its
    CUDA kernels grouped by name: ms per step, launches per step, name."""
    from torch.profiler import profile, ProfilerActivity
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps): one()
        torch.cuda.synchronize()
    agg = {}
    for ev in prof.events():
        if ev.device_type != torch.autograd.DeviceType.CUDA: continue
        k = ev.name[:width]
        t, n = agg.get(k, (0.0, 0))
        agg[k] = (t + (ev.device_time_total if hasattr(ev, "device_time_total") else ev.cuda_time_total), n + 1)
    total = sum(t for t, _ in agg.values()) / steps / 1e3
    lines = sorted(agg.items(), key=lambda kv: -kv[1][0])
    with open(path, "w") as f:
        f.write(f"== {title}: kernel time per step {total:.2f} ms\n")
        for k, (t, n) in lines:
            f.write(f"{t / steps / 1e3:9.3f} ms  {n // steps:5d}x  {k}\n")
    print(f"== {title}: kernel time per step {total:.2f} ms", flush=True)
    for k, (t, n) in lines[:show]:
        print(f"{t / steps / 1e3:9.3f} ms  {n // steps:5d}x  {k}")

if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=16); p.add_argument("--out", default=os.environ.get("OUT", "/tmp"))
    p.add_argument("--no-sdpa", action="store_true"); p.add_argument("--eager", action="store_true")
    args = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = True
    print("torch", torch.__version__, "cudnn", torch.backends.cudnn.version(), torch.cuda.get_device_name(), flush=True)
    if not args.no_sdpa:
        for B in (8, args.batch): sdpa_bench(B)
    profile_step(args.batch, args.out, compile_=not args.eager)
