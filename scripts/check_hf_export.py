#!/usr/bin/env python3
"""Checks fittrain's Hugging Face interchange against transformers' own GPT2LMHeadModel.

    python3 scripts/check_hf_export.py DIR TOKENS_FILE|none [--fittrain PATH] [--device cpu|cuda]
                                       [--samples N]

1. fittrain -> HF: DIR was written by `fittrain export --format hf`. transformers loads it with
   GPT2LMHeadModel.from_pretrained(DIR) (fp32) and computes the mean next-token cross-entropy
   over the token windows of TOKENS_FILE; `fittrain test --init-from DIR` computes it on the
   same windows. They must agree within 2e-4 (fittrain prints 4 decimals, +-5e-5; fp32 on both
   sides differs by ~1e-6; a wrong transpose or layout is off by O(1)). The logits of the first
   evaluation batch (`fittrain test --dump-logits`) must agree to a relative norm of 1e-4.
2. HF -> fittrain: a seeded random GPT2LMHeadModel (every weight random, biases and layernorms
   included; vocabulary 300, so fittrain pads it) is saved with save_pretrained; fittrain
   `test --init-from` that folder must give transformers' loss within the same tolerance.
   `fittrain train --init-from` loads weights through the same code (load_hf_params).

TOKENS_FILE: a token shard (llm.c uint16 format, or fittrain's uint32 variant); `none` writes
seeded random tokens below the model's vocabulary. Windows are those fittrain reads: sample i
is tokens[i*T : i*T + T + 1] (inputs the first T, targets the last T), all of them
(`--eval-batches 0`), the first --samples only.
Exit status 0 when every comparison passes, 1 otherwise.

Device command sequence (one `run` call on the GPU machine, from the repository root; the
image has torch, transformers 5.x and safetensors; nothing is downloaded):

    source scripts/device_env.sh && \
    cmake -S . -B build-gpu -G Ninja -DFITTRAIN_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
          "${FT_CMAKE_EXTRA[@]}" >/tmp/cfg.log && cmake --build build-gpu -j16 --target fittrain >/tmp/build.log && \
    ./build-gpu/fittrain train --device cpu --n-layer 2 --n-head 2 --n-embd 64 --seq-len 64 \
          --global-batch-size 16 --max-steps 100 --lr 3e-3 --results-dir /tmp/hfrun && \
    ./build-gpu/fittrain export --format hf --results-dir /tmp/hfrun --out /tmp/hfexport && \
    python3 scripts/check_hf_export.py /tmp/hfexport none --fittrain ./build-gpu/fittrain --device cpu && \
    python3 scripts/check_hf_export.py /tmp/hfexport none --fittrain ./build-gpu/fittrain --device cuda

(The CPU build, `cmake -S . -B build-cpu -G Ninja -DFITTRAIN_CUDA=OFF`, checks the CPU path
alone.) On CUDA fittrain runs with --precision fp32 (no TF32); transformers runs on the CPU in
fp32 either way.
"""
import argparse, json, os, re, struct, subprocess, sys, tempfile

import numpy as np
import torch
import torch.nn.functional as F
from transformers import GPT2Config, GPT2LMHeadModel

LOSS_TOL = 2e-4    # fittrain prints the loss with 4 decimals
LOGITS_TOL = 1e-4  # ||fittrain - transformers|| / ||transformers||, fp32 on both sides


def write_shard(path, tokens):
    """llm.c's uint16 shard (magic 20240520, version 1), or fittrain's uint32 (20261126, 2)."""
    tokens = np.asarray(tokens)
    wide = tokens.max() >= 65536
    header = np.zeros(256, dtype="<i4")
    header[0], header[1], header[2] = (20261126, 2, len(tokens)) if wide else (20240520, 1, len(tokens))
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(tokens.astype("<u4" if wide else "<u2").tobytes())


def read_shard(path):
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(1024), dtype="<i4")
        magic, n = header[0], header[2]
        dtype = "<u2" if magic == 20240520 else "<u4"
        return np.frombuffer(f.read(), dtype=dtype)[:n].astype(np.int64)


def hf_windows(tokens, T, samples):
    """The first `samples` windows as fittrain's TokenDataset cuts them: [n, T + 1]."""
    n = min(samples, (len(tokens) - 1) // T)
    return torch.tensor(np.stack([tokens[i * T: i * T + T + 1] for i in range(n)]))


def hf_logits_and_loss(model, windows):
    """Logits [n, T, V] and the mean next-token cross-entropy over all n * T targets."""
    model.eval()
    with torch.no_grad():
        logits = torch.cat([model(input_ids=w[None, :-1]).logits.float() for w in windows])
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), windows[:, 1:].reshape(-1)).item()
    return logits.numpy(), loss


def read_npy(path):
    with open(path, "rb") as f:
        assert f.read(6) == b"\x93NUMPY", path
        major = f.read(2)[0]
        hlen = struct.unpack("<H" if major == 1 else "<I", f.read(2 if major == 1 else 4))[0]
        header = f.read(hlen).decode()
        shape = tuple(int(x) for x in re.search(r"'shape': \(([^)]*)\)", header).group(1).split(",") if x.strip())
        return np.frombuffer(f.read(), dtype="<f4").reshape(shape)


def fittrain_test(fittrain, folder, shard, T, n, device, work):
    """fittrain's loss over the shard's n windows and its logits of the first evaluation batch."""
    dump = os.path.join(work, "fittrain_logits.npy")
    cmd = [fittrain, "test", "--init-from", folder, "--data-path", shard, "--val-data-path", shard,
           "--eval-batches", "0", "--global-batch-size", str(n),
           "--device", device, "--dump-logits", dump, "--results-dir", os.path.join(work, "results")]
    if device == "cuda":
        cmd += ["--precision", "fp32"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    out = r.stdout + r.stderr
    m = re.search(r": loss ([0-9.]+)", out)
    if r.returncode != 0 or not m:
        print(" ".join(cmd) + "\n" + out)
        raise SystemExit(f"fittrain test failed (status {r.returncode})")
    return float(m.group(1)), read_npy(dump)


def compare(name, fittrain, folder, tokens, T, samples, device, work):
    windows = hf_windows(np.asarray(tokens), T, samples)
    n = len(windows)
    model = GPT2LMHeadModel.from_pretrained(folder, dtype=torch.float32)
    ref_logits, ref = hf_logits_and_loss(model, windows)
    shard = os.path.join(work, f"{name}_val_000000.bin")
    write_shard(shard, np.asarray(tokens)[: n * T + 1])  # exactly the n windows
    got, logits = fittrain_test(fittrain, folder, shard, T, n, device, work)
    b = logits.shape[0]
    diff = logits - ref_logits[:b]
    rel = float(np.linalg.norm(diff) / np.linalg.norm(ref_logits[:b]))
    ok_loss, ok_logits = abs(got - ref) <= LOSS_TOL, rel <= LOGITS_TOL
    print(f"{name:10s} {n} windows of {T}: loss transformers {ref:.6f} fittrain ({device}) {got:.4f} "
          f"|diff| {abs(got - ref):.2e} {'ok' if ok_loss else 'FAIL'} (tolerance {LOSS_TOL}); logits of {b} "
          f"windows: max |diff| {np.abs(diff).max():.2e}, relative {rel:.2e} "
          f"{'ok' if ok_logits else 'FAIL'} (tolerance {LOGITS_TOL})")
    return ok_loss and ok_logits


def random_hf_model(folder):
    torch.manual_seed(1234)
    cfg = GPT2Config(n_layer=2, n_head=4, n_embd=128, n_positions=64, vocab_size=300,
                     activation_function="gelu_new", layer_norm_epsilon=1e-5)
    m = GPT2LMHeadModel(cfg)
    g = torch.Generator().manual_seed(99)
    with torch.no_grad():
        for name, p in m.named_parameters():  # lm_head is tied to wte: one tensor
            if "ln_" in name and name.endswith("weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.05 * torch.randn(p.shape, generator=g))
    m.save_pretrained(folder)
    return cfg


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir")
    ap.add_argument("tokens")
    ap.add_argument("--fittrain", default="./build-cpu/fittrain")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--samples", type=int, default=8)
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    work = tempfile.mkdtemp(prefix="check_hf_")
    ok = True

    with open(os.path.join(a.dir, "config.json")) as f:
        cfg = json.load(f)
    # `test --init-from` evaluates windows of the folder's n_positions (test takes no model flags)
    T = cfg["n_positions"]
    rng = np.random.default_rng(7)
    tokens = read_shard(a.tokens) if a.tokens != "none" else rng.integers(0, cfg["vocab_size"], a.samples * T + 1)
    ok &= compare("export", a.fittrain, a.dir, tokens, T, a.samples, a.device, work)

    folder = os.path.join(work, "random_hf")
    rcfg = random_hf_model(folder)
    files = sorted(os.listdir(folder))
    print(f"random     GPT2LMHeadModel saved with save_pretrained: {files}")
    tokens = rng.integers(0, rcfg.vocab_size, a.samples * rcfg.n_positions + 1)
    ok &= compare("init-from", a.fittrain, folder, tokens, rcfg.n_positions, a.samples, a.device, work)
    print("all ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
