#!/usr/bin/env python3
"""kiln's GPU peer for mnist-cnn: PyTorch 2.x on the same GPU, one epoch of
PyTorch's examples/mnist network on Fashion-MNIST (batch 64, Adadelta lr 1.0,
dropout on), data from a DataLoader with pinned memory, as PyTorch users run it.

    python3 pytorch_mnist_gpu.py --mode eager|eager-cl-bf16|compile [--data DIR] [--workers N]

eager: fp32 (TF32 off for matmuls, PyTorch's default; cuDNN's default TF32 for
convolutions unless --no-tf32). eager-cl-bf16: channels_last and bf16 autocast.
compile: torch.compile(mode="max-autotune") in fp32; compile-reduce-overhead: its
CUDA-graph mode. Warm-up runs both batch sizes of the epoch, so nothing compiles
inside the timed epoch. Prints one JSON line.
"""
import argparse, gzip, json, os, struct, time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):  # PyTorch's examples/mnist network
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(self.dropout1(x), 1)
        x = self.dropout2(F.relu(self.fc1(x)))
        return F.log_softmax(self.fc2(x), dim=1)


def idx(folder, stem):
    for name in (stem + ".gz", stem):
        p = os.path.join(folder, name)
        if os.path.exists(p):
            with (gzip.open if p.endswith(".gz") else open)(p, "rb") as f:
                data = f.read()
            ndim = data[3]
            dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
            return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)
    raise FileNotFoundError(f"{folder}/{stem}[.gz]")


class Images(torch.utils.data.Dataset):
    def __init__(self, x, y):
        self.x, self.y = x, y

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):  # ToTensor + Normalize((0.1307,), (0.3081,)), as the example
        img = torch.from_numpy(self.x[i].astype(np.float32) / 255.0).unsqueeze(0)
        return (img - 0.1307) / 0.3081, int(self.y[i])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", default="eager", choices=["eager", "eager-cl-bf16", "compile", "compile-reduce-overhead"])
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-tf32", action="store_true")
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = not a.no_tf32
    dev = torch.device("cuda")
    x, y = idx(a.data, "train-images-idx3-ubyte"), idx(a.data, "train-labels-idx1-ubyte")
    loader = torch.utils.data.DataLoader(Images(x, y), batch_size=a.batch_size, shuffle=True, num_workers=a.workers,
                                         pin_memory=True, persistent_workers=a.workers > 0)
    model = Net().to(dev)
    if a.mode == "eager-cl-bf16":
        model = model.to(memory_format=torch.channels_last)
    opt = torch.optim.Adadelta(model.parameters(), lr=1.0)
    step_fn = model
    if a.mode.startswith("compile"):  # two static graphs (batch 64 and the last 32) rather than one dynamic one
        torch._dynamo.config.automatic_dynamic_shapes = False
    if a.mode == "compile":
        step_fn = torch.compile(model, mode="max-autotune")
    elif a.mode == "compile-reduce-overhead":
        step_fn = torch.compile(model, mode="reduce-overhead")

    def step(xb, yb):
        xb = xb.to(dev, non_blocking=True)
        yb = yb.to(dev, non_blocking=True)
        if a.mode == "eager-cl-bf16":
            xb = xb.contiguous(memory_format=torch.channels_last)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = F.nll_loss(step_fn(xb), yb)
        else:
            loss = F.nll_loss(step_fn(xb), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    # warm-up outside the timed epoch: compilation, cuDNN autotuning, worker start
    t0 = time.perf_counter()
    it = iter(loader)
    for _ in range(20):
        step(*next(it))
    last_n = len(loader.dataset) % a.batch_size  # the epoch's last, smaller batch: compiled here, not mid-epoch
    if last_n:
        xb, yb = next(it)
        step(xb[:last_n], yb[:last_n])
    torch.cuda.synchronize()
    warm = time.perf_counter() - t0
    steps, t0 = 0, time.perf_counter()
    for xb, yb in loader:
        loss = step(xb, yb)
        steps += 1
        if steps % 100 == 0:
            loss.item()  # progress as users print it: one sync per 100 steps
    last = loss.item()
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    print(json.dumps({"peer": "pytorch", "mode": a.mode, "torch": torch.__version__, "gpu": torch.cuda.get_device_name(),
                      "epoch_s": dt, "warmup_s": warm, "steps": steps, "images_per_s": steps * a.batch_size / dt,
                      "final_loss": last}))


if __name__ == "__main__":
    main()
