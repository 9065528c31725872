#!/usr/bin/python3
"""Loads a kiln checkpoint into PyTorch and prints its test accuracy: the other
direction of safetensors interop (kiln's tests load PyTorch's files; this
needs python3-torch, so it runs in `make interop`, not CI).

    /usr/bin/python3 tests/ref/load_in_pytorch.py [--model mnist-cnn|mnist-cnn-bn] run.safetensors [expected_accuracy]

mnist-cnn is PyTorch's examples/mnist Net from ../shared/bench/pytorch_mnist.py
(KILN_SHARED moves the shared folder); mnist-cnn-bn is the same network with
BatchNorm2d after each bias-free conv, defined here. The batch norm's running
statistics and num_batches_tracked come from the checkpoint, and evaluation
mode uses them, as kiln's does.
"""
import json, os, struct, sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

here = os.path.dirname(os.path.abspath(__file__))
shared = os.environ.get("KILN_SHARED", os.path.join(here, "..", "..", "..", "shared"))
if not os.path.isfile(os.path.join(shared, "bench", "pytorch_mnist.py")):
    sys.exit(f"load_in_pytorch: {shared}/bench/pytorch_mnist.py not found: the interop check uses the shared "
             "PyTorch reference next to the repository (set KILN_SHARED to the folder holding bench/)")
sys.path.insert(0, os.path.join(shared, "bench"))
from pytorch_mnist import IdxImages, Net  # noqa: E402

DTYPES = {"F32": ("<f4", torch.float32), "I64": ("<i8", torch.int64)}


class NetBN(nn.Module):
    """kiln's mnist-cnn-bn: Net with BatchNorm2d after conv1 and conv2, whose biases are dropped."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(32)
        self.conv2 = nn.Conv2d(32, 64, 3, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(64)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.conv2(x)))
        x = self.dropout1(F.max_pool2d(x, 2))
        x = self.dropout2(F.relu(self.fc1(torch.flatten(x, 1))))
        return F.log_softmax(self.fc2(x), dim=1)


def read_safetensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    base = 8 + n
    tensors = {}
    for name, v in header.items():
        if name == "__metadata__":
            continue
        assert v["dtype"] in DTYPES, f"{name}: {v['dtype']}"
        np_dtype, _ = DTYPES[v["dtype"]]
        a, b = v["data_offsets"]
        tensors[name] = torch.from_numpy(np.frombuffer(raw[base + a:base + b], dtype=np_dtype).reshape(v["shape"]).copy())
    return tensors, header.get("__metadata__", {})


def main():
    args = sys.argv[1:]
    model_name = "mnist-cnn"
    if args[:1] == ["--model"]:
        model_name, args = args[1], args[2:]
    if not args:
        sys.exit(__doc__)
    tensors, meta = read_safetensors(args[0])
    model = {"mnist-cnn": Net, "mnist-cnn-bn": NetBN}[model_name]()
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
    print(f"PyTorch {torch.__version__}: test accuracy of {model_name} {args[0]} = {acc:.4f} "
          f"(kiln step {meta.get('kiln.step')})")
    if len(args) > 1 and abs(acc - float(args[1])) > 1e-3:
        sys.exit(f"accuracy {acc:.4f} differs from kiln's {args[1]}")


if __name__ == "__main__":
    main()
