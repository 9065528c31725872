#!/usr/bin/python3
"""Loads a kiln checkpoint into PyTorch's examples/mnist Net and prints its
test accuracy: the other direction of safetensors interop (kiln's tests load
PyTorch's files; this needs python3-torch, so it runs in `make interop`, not CI).

    /usr/bin/python3 tests/ref/load_in_pytorch.py run.safetensors [expected_accuracy]
"""
import json, os, struct, sys

import numpy as np
import torch

here = os.path.dirname(os.path.abspath(__file__))
shared = os.environ.get("KILN_SHARED", os.path.join(here, "..", "..", "..", "shared"))
sys.path.insert(0, os.path.join(shared, "bench"))
from pytorch_mnist import IdxImages, Net  # noqa: E402


def read_safetensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    base = 8 + n
    tensors = {}
    for name, v in header.items():
        if name == "__metadata__":
            continue
        assert v["dtype"] == "F32", f"{name}: {v['dtype']}"
        a, b = v["data_offsets"]
        tensors[name] = torch.from_numpy(np.frombuffer(raw[base + a:base + b], dtype="<f4").reshape(v["shape"]).copy())
    return tensors, header.get("__metadata__", {})


def main():
    tensors, meta = read_safetensors(sys.argv[1])
    model = Net()
    # optim.* tensors are kiln's optimizer state: not part of the module
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    assert not missing, f"missing tensors: {missing}"
    assert all(k.startswith("optim.") for k in unexpected), unexpected
    model.eval()
    ds = IdxImages("/usr/share/datasets/fashion-mnist", False)
    x = torch.stack([ds[i][0] for i in range(len(ds))])
    y = torch.tensor([ds[i][1] for i in range(len(ds))])
    with torch.no_grad():
        acc = (model(x).argmax(1) == y).float().mean().item()
    print(f"PyTorch {torch.__version__}: test accuracy of {sys.argv[1]} = {acc:.4f} (kiln step {meta.get('kiln.step')})")
    if len(sys.argv) > 2 and abs(acc - float(sys.argv[2])) > 1e-3:
        sys.exit(f"accuracy {acc:.4f} differs from kiln's {sys.argv[2]}")


if __name__ == "__main__":
    main()
