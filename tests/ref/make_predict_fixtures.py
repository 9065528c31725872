#!/usr/bin/python3
"""The fixture of `kiln predict` (tests/test_predict.c): a few PNG images in
nested folders and PyTorch's evaluation logits for them from a torchvision
resnet18(num_classes=10) whose weights follow a formula, so the 45 MB of
weights are never committed: tests/test_predict.c computes the same formula
in C, saves it as safetensors and runs kiln predict.

    /usr/bin/python3 tests/ref/make_predict_fixtures.py tests/ref/fixtures/predict

The formula, for the state_dict entry `name` (element i in row-major order,
fan_in = numel / shape[0]):
    u = sin(0.37 * i + 0.01 * (fnv1a32(name) % 1000))   (in float64)
    conv and linear weights (2-d and more): u * sqrt(3 / fan_in)
    batch norm weight: 1 + 0.25 u; every bias: 0.1 u
    running_mean: 0.2 u; running_var: 1 + 0.5 u; num_batches_tracked: 0
then rounded to float32. PyTorch computes the logits in float64 from those
float32 weights, after ToTensor and Normalize(imagenet) of each image (the
images are 64x64, so no resize is involved).
"""
import math
import os
import shutil
import sys

import numpy as np
import torch
import torchvision
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixtures as M  # noqa: E402  (the hand-written safetensors encoder)

SIZE = 64
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
# (path under images/, PIL mode): sub-folders, an upper-case extension, a grey image
IMAGES = [("b.png", "RGB"), ("a/x.png", "RGB"), ("a/y.PNG", "RGB"), ("c/d/z.png", "RGB"), ("grey.png", "L")]


def fnv1a32(name):
    h = 0x811C9DC5
    for b in name.encode():
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h


def formula(name, shape):
    n = int(np.prod(shape)) if len(shape) else 1
    u = np.sin(0.37 * np.arange(n, dtype=np.float64) + 0.01 * (fnv1a32(name) % 1000))
    if name.endswith("num_batches_tracked"):
        return torch.zeros(shape, dtype=torch.int64)
    if name.endswith("running_var"):
        v = 1 + 0.5 * u
    elif name.endswith("running_mean"):
        v = 0.2 * u
    elif len(shape) >= 2:
        v = u * math.sqrt(3.0 / (n // shape[0]))
    elif name.endswith(".weight"):
        v = 1 + 0.25 * u
    else:
        v = 0.1 * u
    return torch.from_numpy(v.astype(np.float32).reshape(shape))


def write_images(folder):
    rng = np.random.RandomState(8)
    root = os.path.join(folder, "images")
    shutil.rmtree(root, ignore_errors=True)
    for rel, mode in IMAGES:
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        shape = (SIZE, SIZE, 3) if mode == "RGB" else (SIZE, SIZE)
        Image.fromarray(rng.randint(0, 256, shape).astype(np.uint8), mode).save(path, format="PNG")
    with open(os.path.join(root, "notes.txt"), "w") as f:  # not an image: skipped
        f.write("not an image\n")
    with open(os.path.join(root, ".hidden.png"), "wb") as f:  # a dot-file: skipped, or predict would fail on it
        f.write(b"not a png")
    return root


def main(folder):
    os.makedirs(folder, exist_ok=True)
    root = write_images(folder)
    model = torchvision.models.resnet18(num_classes=10)
    sd = {k: formula(k, tuple(v.shape)) for k, v in model.state_dict().items()}
    model.load_state_dict(sd)
    model = model.double().eval()
    files = sorted(rel for rel, _ in IMAGES)  # kiln's order: sorted paths
    xs = []
    for rel in files:
        img = Image.open(os.path.join(root, rel)).convert("RGB")
        t = torch.from_numpy(np.asarray(img, dtype=np.float64) / 255.0).permute(2, 0, 1)
        xs.append((t - torch.tensor(MEAN, dtype=torch.float64)[:, None, None]) /
                  torch.tensor(STD, dtype=torch.float64)[:, None, None])
    with torch.no_grad():
        logits = model(torch.stack(xs))
    # top-5 must not hinge on rounding: the six largest logits of every image are well apart
    for row in logits:
        top = torch.sort(row, descending=True).values[:6]
        gap = float((top[:-1] - top[1:]).min())
        assert gap > 1e-3 * float(row.abs().max()), f"logits too close for a stable top-5: {gap}"
    with open(os.path.join(folder, "expected.safetensors"), "wb") as f:
        f.write(M.encode([("logits", logits)],
                         {"model": "torchvision.models.resnet18(num_classes=10), weights by the formula of "
                                   "tests/ref/make_predict_fixtures.py, eval, float64",
                          "files": " ".join(files), "normalize": "imagenet", "torch": torch.__version__}))
    print(f"make_predict_fixtures: {len(files)} images and expected.safetensors in {folder}; "
          f"logits in [{float(logits.min()):.3f}, {float(logits.max()):.3f}]")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
