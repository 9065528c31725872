#!/usr/bin/python3
"""A torchvision resnet18 for kiln to load: random weights (seed 0), random
batch norm affine parameters and running statistics, written as
safetensors.torch would write its state_dict (DIR/resnet18.safetensors), and
an input batch with PyTorch's evaluation-mode logits (DIR/resnet18_io.safetensors).
Too big to commit (45 MB): `make interop` runs it, then test_models with
KILN_TORCHVISION_DIR=DIR checks kiln's logits against these.

    /usr/bin/python3 tests/ref/torchvision_resnet18.py DIR
"""
import os
import sys

import torch
import torchvision

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixtures as M  # noqa: E402  (the hand-written safetensors encoder)


def main(folder):
    os.makedirs(folder, exist_ok=True)
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
                m.running_mean.uniform_(-0.3, 0.3)
                m.running_var.uniform_(0.5, 2.0)
                m.num_batches_tracked.fill_(7)
    model.eval()
    x = torch.randn(2, 3, 112, 112)
    with torch.no_grad():
        logits = model(x)
    sd = [(k, v.detach().clone()) for k, v in model.state_dict().items()]
    with open(os.path.join(folder, "resnet18.safetensors"), "wb") as f:
        f.write(M.encode(sd, {"format": "pt"}, pt_layout=True))
    with open(os.path.join(folder, "resnet18_io.safetensors"), "wb") as f:
        f.write(M.encode([("x", x), ("logits", logits)], {"model": "torchvision resnet18, eval"}))
    print(f"torchvision_resnet18: wrote {folder}/resnet18.safetensors and resnet18_io.safetensors")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
