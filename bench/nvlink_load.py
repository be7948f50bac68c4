#!/usr/bin/env python3
"""Peer copies between two GPUs at a set rate, with no kernel on either card.

    python3 bench/nvlink_load.py --bytes 8388608 --period-ms 1 [--seconds S] [--issuer 1] [--peer 0]

Why: on a card held at its power cap, anything that draws power beside the training lowers the
SM clock (docs/PERFORMANCE.md, sessions 17 and 33). A 2-GPU data-parallel step moves its
gradients and parameters over NVLink; this isolates the power the links and the transfers
themselves draw from NCCL's kernels and from the step's schedule. Every period it copies BYTES
from the peer to the issuer and BYTES back (cudaMemcpyPeerAsync on a stream of the issuer, so
the issuer's copy engines do both and the peer runs nothing of its own), then sleeps for what
is left of the period. Runs until S seconds pass or it is killed; prints the bytes moved and
the rate achieved. Measured with it (session 34, 2 H200s): the bytes hardly matter; once any
traffic keeps the links awake (they sleep after 50 ms without it), a 1-GPU run at the 700 W
cap loses 2.0-2.7% of its tokens/s. bench/gpu_bench_lib.sh's ft_links_awake_start uses it.

It calls the CUDA runtime through ctypes (no PyTorch): the toolkit's libcudart, or
FT_CUDART=path.
"""
import argparse
import ctypes
import glob
import os
import signal
import sys
import time


def load_cudart():
    path = os.environ.get("FT_CUDART")
    if not path:
        found = sorted(glob.glob("/usr/local/cuda/lib64/libcudart.so*"))
        if not found:
            sys.exit("nvlink_load.py: no /usr/local/cuda/lib64/libcudart.so*; set FT_CUDART")
        path = found[0]
    return ctypes.CDLL(path)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bytes", type=int, default=8 << 20, help="bytes each way each period")
    p.add_argument("--period-ms", type=float, default=1.0)
    p.add_argument("--seconds", type=float, default=0.0, help="0: until killed")
    p.add_argument("--issuer", type=int, default=1, help="the GPU whose copy engines copy")
    p.add_argument("--peer", type=int, default=0)
    p.add_argument("--within-issuer", action="store_true",
                   help="control: the same copies between two buffers on the issuer (no NVLink), the peer's "
                        "context and peer access still set up")
    a = p.parse_args()
    if a.bytes <= 0 or a.period_ms <= 0 or a.issuer == a.peer:
        sys.exit("nvlink_load.py: --bytes and --period-ms must be positive, --issuer and --peer differ")
    rt = load_cudart()

    def check(rc, what):
        if rc != 0:
            rt.cudaGetErrorString.restype = ctypes.c_char_p
            sys.exit(f"nvlink_load.py: {what} failed: {rt.cudaGetErrorString(rc).decode()}")

    n = ctypes.c_size_t(a.bytes)

    def alloc_pair(dev):  # two buffers of BYTES on the current device, dev
        pair = (ctypes.c_void_p(), ctypes.c_void_p())
        for ptr in pair:
            check(rt.cudaMalloc(ctypes.byref(ptr), n), f"cudaMalloc on GPU {dev}")
        return pair

    can = ctypes.c_int(0)
    check(rt.cudaDeviceCanAccessPeer(ctypes.byref(can), a.issuer, a.peer), "cudaDeviceCanAccessPeer")
    if not can.value:
        sys.exit(f"nvlink_load.py: GPU {a.issuer} cannot access GPU {a.peer} directly")
    bufs = {}
    for dev, other in ((a.peer, a.issuer), (a.issuer, a.peer)):
        check(rt.cudaSetDevice(dev), f"cudaSetDevice({dev})")
        rc = rt.cudaDeviceEnablePeerAccess(other, 0)
        if rc not in (0, 704):  # 704: cudaErrorPeerAccessAlreadyEnabled
            check(rc, "cudaDeviceEnablePeerAccess")
        bufs[dev] = alloc_pair(dev)
    stream = ctypes.c_void_p()
    check(rt.cudaStreamCreate(ctypes.byref(stream)), "cudaStreamCreate")  # the issuer is current
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    # --within-issuer: a second pair on the issuer (current) stands in for the peer's
    src_dev = a.issuer if a.within_issuer else a.peer
    src = alloc_pair(a.issuer) if a.within_issuer else bufs[a.peer]
    t0 = time.monotonic()
    periods = 0
    while not stop and (a.seconds <= 0 or time.monotonic() - t0 < a.seconds):
        start = time.monotonic()
        check(rt.cudaMemcpyPeerAsync(bufs[a.issuer][0], a.issuer, src[0], src_dev, n, stream), "pull")
        check(rt.cudaMemcpyPeerAsync(src[1], src_dev, bufs[a.issuer][1], a.issuer, n, stream), "push")
        check(rt.cudaStreamSynchronize(stream), "cudaStreamSynchronize")
        periods += 1
        left = a.period_ms / 1e3 - (time.monotonic() - start)
        if left > 0:
            time.sleep(left)
    s = time.monotonic() - t0
    print(f"nvlink_load: {periods} periods in {s:.1f} s, {2 * a.bytes * periods / s / 1e9:.2f} GB/s "
          f"(both ways, GPU {a.issuer} <-> {src_dev})", flush=True)


if __name__ == "__main__":
    main()
