"""PyTorch DistributedDataParallel (gloo) beside kiln's MPI data parallel
(bench/ddp.sh): mnist-cnn (../shared/bench/peers/common.py's Net, Adadelta
lr 1, Fashion-MNIST in memory) or resnet20 (CIFAR ResNet-20, option A
shortcuts, SGD lr 0.1 momentum 0.9 weight decay 5e-4, random 3x32x32 data),
as 1 process x --threads or --world processes x 1 thread, each rank taking
its share of every global batch. --channels-last keeps the model and inputs
channels_last (the guide's advice for conv nets); --bf16 runs forward and
loss under torch.autocast("cpu", bfloat16) (PyTorch's mixed precision, the
peer of kiln's --precision auto). Prints one RESULT line: global images/s
over --steps steps after --warmup (rank 0's clock, between barriers)."""
import contextlib
import argparse, json, os, sys, time
import torch, torch.distributed as dist, torch.nn as nn, torch.nn.functional as F

sys.path.insert(0, os.environ.get("KILN_PEERS", os.path.join(os.path.dirname(__file__), "../../../shared/bench/peers")))
from common import MEAN, STD, FashionMNIST, Net  # noqa: E402


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)
        self.c2, self.b2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)
        self.stride, self.pad = stride, cout - cin

    def forward(self, x):
        y = self.b2(self.c2(F.relu(self.b1(self.c1(x)))))
        if self.stride != 1 or self.pad:
            x = F.pad(x[:, :, ::self.stride, ::self.stride], (0, 0, 0, 0, self.pad // 2, self.pad - self.pad // 2))
        return F.relu(y + x)


def resnet20():
    layers, cin = [nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU()], 16
    for cout, stride in ((16, 1), (32, 2), (64, 2)):
        for i in range(3):
            layers.append(Block(cin, cout, stride if i == 0 else 1))
            cin = cout
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))


def setup(model_name, global_batch, nb=20):
    torch.manual_seed(1)
    if model_name == "mnist-cnn":
        ds = FashionMNIST(True)
        X = ((ds.images[:global_batch * nb].float() / 255.0 - MEAN) / STD).reshape(nb, global_batch, 1, 28, 28)
        Y = ds.labels[:global_batch * nb].reshape(nb, global_batch)
        model = Net()
        return model, torch.optim.Adadelta(model.parameters(), lr=1.0), X, Y, F.nll_loss
    X, Y = torch.randn(nb, global_batch, 3, 32, 32), torch.randint(0, 10, (nb, global_batch))
    model = resnet20()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    return model, opt, X, Y, F.cross_entropy


def run(rank, world, a, q):
    torch.set_num_threads(a.threads if world == 1 else 1)
    if world > 1:
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(a.port)
        dist.init_process_group("gloo", rank=rank, world_size=world)
    model, opt, X, Y, lossf = setup(a.model, a.global_batch)
    fmt = torch.channels_last if a.channels_last else torch.contiguous_format
    X = [X[j].contiguous(memory_format=fmt) for j in range(X.shape[0])]  # a batch slice keeps the strides
    model = model.to(memory_format=fmt)
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model)
    cast = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if a.bf16 else contextlib.nullcontext
    per = a.global_batch // world
    lo, hi = rank * per, (rank + 1) * per
    t0 = 0.0
    for i in range(a.warmup + a.steps):
        if i == a.warmup:
            if world > 1:
                dist.barrier()
            t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with cast():
            loss = lossf(model(X[i % len(X)][lo:hi]), Y[i % len(X), lo:hi])
        loss.backward()
        opt.step()
    if world > 1:
        dist.barrier()
    wall = time.perf_counter() - t0
    if rank == 0:
        q.put(dict(model=a.model, world=world, threads=torch.get_num_threads(), global_batch=a.global_batch,
                   steps=a.steps, channels_last=a.channels_last, bf16=a.bf16, images_per_s=a.global_batch * a.steps / wall, ms_per_step=1e3 * wall / a.steps))
    if world > 1:
        dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=["mnist-cnn", "resnet20"], default="mnist-cnn")
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--global-batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--port", type=int, default=29541)
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--bf16", action="store_true")
    a = p.parse_args()
    import torch.multiprocessing as mp
    q = mp.get_context("spawn").SimpleQueue()
    if a.world == 1:
        run(0, 1, a, q)
    else:
        mp.spawn(run, args=(a.world, a, q), nprocs=a.world, join=True)
    print("RESULT " + json.dumps(q.get()), flush=True)


if __name__ == "__main__":
    main()
