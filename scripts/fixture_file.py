"""The fixture file the C++ tests read (FTFIX001), written by every make_*_fixture.py script."""
import json, struct

import torch


def write_fixture(path, config, tensors):
    """The FTFIX001 file: config and the tensors' index as JSON, then each tensor's little-endian
    payload (int32 tensors as i32, everything else as f32), in order."""
    meta, blobs, off = {"config": config, "tensors": {}}, [], 0
    for name, tt in tensors.items():
        tt = tt.contiguous()
        dt = "i32" if tt.dtype == torch.int32 else "f32"
        data = tt.numpy().astype("<i4" if dt == "i32" else "<f4").tobytes()
        meta["tensors"][name] = {"dtype": dt, "shape": list(tt.shape), "offset": off}
        blobs.append(data); off += len(data)
    j = json.dumps(meta).encode()
    with open(path, "wb") as f:
        f.write(b"FTFIX001"); f.write(struct.pack("<Q", len(j))); f.write(j)
        for b in blobs: f.write(b)
