"""PyTorch's (cuBLAS's) time for the block products fittrain's op table times in perf mode
(tests/ops/ops_matmul.cpp, perf_products: GPT-2 124M at B=8 and 16, DiT-B at batch 64, CDEIT
at batch 32's first two stages, and CDEIT's products outside its blocks), bf16, to set beside `fittrain_ops --mode perf --backend cuda
--op matmul_fwd` and `--op matmul_bwd` on the same GPU: the forward with its bias, and the
backward as fittrain's matmul_bwd computes it (dx = dout @ w, dw += dout^T @ x, dbias +=
colsum(dout)). Median of 3 x 10 calls, like fittrain_ops. Device machine:
    python3 bench/torch_products.py
"""
import statistics
import torch

SHAPES = ([(B * 1024, C, OC) for B in (8, 16) for C, OC in ((768, 2304), (768, 768), (768, 3072), (3072, 768))]
          + [(64 * 256, C, OC) for C, OC in ((768, 2304), (768, 768), (768, 3072), (3072, 768))]
          + [(32 * T, C, OC) for T in (4096, 1024) for C, OC in ((512, 1536), (512, 512), (512, 2048), (2048, 512))]
          # CDEIT's products outside its blocks at batch 32 (tests/ops/ops_matmul.cpp perf_products)
          + [(32 * 4096, 4, 512), (32 * 4096, 512, 4)] + [(32 * T, 2048, 512) for T in (1024, 256, 64)]
          + [(32 * T, 512, 512) for T in (256, 64)] + [(32, 512, 3072)])


def timed(fn):
    fn()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    runs = []
    for _ in range(3):
        start.record()
        for _ in range(10):
            fn()
        stop.record()
        stop.synchronize()
        runs.append(start.elapsed_time(stop) / 10)
    return statistics.median(runs)


def main():
    torch.manual_seed(0)
    print(f"# torch {torch.__version__} on {torch.cuda.get_device_name()}, bf16, median of 3 x 10 calls")
    for N, C, OC in SHAPES:
        x = torch.randn(N, C, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(OC, C, device="cuda", dtype=torch.bfloat16) * 0.1
        b = torch.randn(OC, device="cuda", dtype=torch.bfloat16)
        dout = torch.randn(N, OC, device="cuda", dtype=torch.bfloat16)
        dw = torch.zeros_like(w)
        db = torch.zeros_like(b)
        fwd = timed(lambda: torch.nn.functional.linear(x, w, b))

        def bwd():
            torch.mm(dout, w)
            dw.addmm_(dout.t(), x)
            db.add_(dout.sum(0))

        back = timed(bwd)
        flops = 2.0 * N * C * OC
        print(f"N={N:<7d} C={C:<5d} OC={OC:<5d} fwd {fwd:.3f} ms {flops / fwd / 1e9:6.0f} TFLOP/s   "
              f"bwd {back:.3f} ms {2 * flops / back / 1e9:6.0f} TFLOP/s")


if __name__ == "__main__":
    main()
