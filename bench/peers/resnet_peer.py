"""PyTorch 1.13's ResNet steps for bench/resnet.sh in every format and
precision it has on a CPU, so kiln's figures meet PyTorch's best: the
four variants (default or channels_last memory format) x (fp32, or
torch.autocast('cpu', dtype=torch.bfloat16): bf16 convolutions and
matmuls, fp32 master weights, as kiln's --precision bf16). The models and
steps are those of ../shared/bench/peers/conv_bench.py: resnet20 (CIFAR
ResNet-20, option A shortcuts, batch 128, 3x32x32; bench/peers/ddp_peer.py
writes it out) and torchvision's resnet18 (num_classes 10, batch 32,
3x112x112); training = SGD lr 0.1 momentum 0.9 weight decay 5e-4 on
cross-entropy (the loss under autocast too, as PyTorch's AMP recipe);
inference = eval() and no_grad(). Each variant is timed in BLOCKS blocks
of STEPS steps, the blocks interleaved across variants, after WARM untimed
steps. One RESULT line per (mode, format, precision): median ms and the
spread.

Usage: resnet_peer.py MODEL [STEPS] [BLOCKS] [WARM] [THREADS]"""
import json, os, statistics, sys, time
import torch, torch.nn.functional as F
import torchvision

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ddp_peer import resnet20  # noqa: E402

MODEL = sys.argv[1]
STEPS = int(sys.argv[2]) if len(sys.argv) > 2 else 20
BLOCKS = int(sys.argv[3]) if len(sys.argv) > 3 else 2
WARM = int(sys.argv[4]) if len(sys.argv) > 4 else 3
THREADS = int(sys.argv[5]) if len(sys.argv) > 5 else 2
torch.set_num_threads(THREADS)


def build():
    torch.manual_seed(0)
    if MODEL == "resnet20":
        return resnet20(), (128, 3, 32, 32)
    return torchvision.models.resnet18(num_classes=10), (32, 3, 112, 112)


def setup(fmt):
    model, shape = build()
    torch.manual_seed(1)
    x, y = torch.randn(shape), torch.randint(0, 10, (shape[0],))
    if fmt == "channels_last":
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    return model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4), x, y


def train_step(prec, model, opt, x, y):
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=prec == "bf16"):
        loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss


def infer_step(prec, model, opt, x, y):
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=prec == "bf16"):
        return model(x)


# PEER_PRECISIONS="fp32": without bf16 hardware PyTorch's autocast is emulated (25x slower on a Zen 3): never its best
variants = [(f, p) for f in ("default", "channels_last") for p in os.environ.get("PEER_PRECISIONS", "fp32 bf16").split()]
setups = {v: setup(v[0]) for v in variants}
for mode, fn in (("train", train_step), ("infer", infer_step)):
    times, blockmed, check = {v: [] for v in variants}, {v: [] for v in variants}, {}
    for v in variants:
        model, opt, x, y = setups[v]
        model.train(mode == "train")
        for _ in range(WARM):
            out = fn(v[1], model, opt, x, y)
        check[v] = {"loss_after_warm": round(out.item(), 3)} if mode == "train" else {"out_dtype": str(out.dtype)}
    for _ in range(BLOCKS):
        for v in variants:
            model, opt, x, y = setups[v]
            ts = []
            for _ in range(STEPS):
                t0 = time.perf_counter()
                fn(v[1], model, opt, x, y)
                ts.append(time.perf_counter() - t0)
            times[v] += ts
            blockmed[v].append(round(1e3 * statistics.median(ts), 1))
    for v in variants:
        m, bs = statistics.median(times[v]), setups[v][2].shape[0]
        print("RESULT " + json.dumps({"bench": "resnet", "model": MODEL, "mode": mode, "format": v[0],
                                      "precision": v[1], "batch": bs, "threads": THREADS,
                                      "ms_median": round(1e3 * m, 1), "ms_min": round(1e3 * min(times[v]), 1),
                                      "block_medians_ms": blockmed[v], "n": len(times[v]),
                                      "img_per_s": round(bs / m, 1), **check[v],
                                      "torch": torch.__version__}), flush=True)
