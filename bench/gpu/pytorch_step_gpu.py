#!/usr/bin/env python3
"""kiln's GPU peer for training steps: PyTorch 2.x on the same GPU, synthetic
data, the issue's workloads (docs in bench/README.md, gpu_models.sh):

    python3 pytorch_step_gpu.py --model gpt2|resnet50 --mode eager|eager-bf16|compile [--batch N] [--steps N]

gpt2: GPT-2 small (12 layers, 12 heads, 768 wide, block 1024, vocab 50257,
tied embeddings, GELU-tanh MLP 4x; nanoGPT's layout) at --batch windows, AdamW
(lr 3e-4, betas 0.9, 0.95, weight decay 0.1 on 2-d weights, fused) with
clipping to 1, attention through F.scaled_dot_product_attention (flash).
resnet50: torchvision's, 224x224, SGD (lr 0.1, momentum 0.9, weight decay
5e-4), channels_last. eager: fp32 with TF32 off (PyTorch's matmul default);
eager-bf16: bf16 autocast (and TF32); compile: torch.compile of the bf16 model
(mode max-autotune unless --compile-mode). Times each step after --warmup
(synchronised), prints one JSON line: ms (median), items_per_s (tokens or
images), warmup_s. Runs on the CPU too (--device cpu, small --config) to check it.
"""
import argparse, json, math, statistics, time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, c, heads):
        super().__init__()
        self.heads = heads
        self.ln_1, self.ln_2 = nn.LayerNorm(c), nn.LayerNorm(c)
        self.c_attn, self.c_proj = nn.Linear(c, 3 * c), nn.Linear(c, c)
        self.c_fc, self.mlp_proj = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)

    def attn(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        if hasattr(F, "scaled_dot_product_attention"):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # PyTorch 1.x: the plain form (for checking this script on the CPU)
            s = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.heads)
            s = s.masked_fill(torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
            y = F.softmax(s, dim=-1) @ v
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, layers, heads, c, block, vocab):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, c), nn.Embedding(block, c)
        self.h = nn.ModuleList(Block(c, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(c)
        for mod in self.modules():  # nanoGPT's initialisation (the loss starts near ln(vocab), as kiln's)
            if isinstance(mod, (nn.Linear, nn.Embedding)):
                nn.init.normal_(mod.weight, 0.0, 0.02)
            if isinstance(mod, nn.Linear):
                nn.init.zeros_(mod.bias)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.h:
            x = b(x)
        logits = self.ln_f(x) @ self.wte.weight.t()  # tied
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def gpt_setup(a, dev):
    L, H, C, T, V = (int(v) for v in a.config.split(",")) if a.config else (12, 12, 768, 1024, 50257)
    m = GPT(L, H, C, T, V).to(dev)
    decay = [p for p in m.parameters() if p.dim() >= 2]
    rest = [p for p in m.parameters() if p.dim() < 2]
    kw = {"fused": True} if dev == "cuda" else {}
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}], lr=3e-4,
                            betas=(0.9, 0.95), **kw)
    x = torch.randint(0, V, (a.batch, T + 1), device=dev)
    return m, opt, (x[:, :-1].contiguous(), x[:, 1:].contiguous()), a.batch * T


def resnet_setup(a, dev):
    import torchvision
    m = torchvision.models.resnet50(num_classes=1000).to(dev, memory_format=torch.channels_last)
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    s = int(a.config) if a.config else 224
    x = torch.randn(a.batch, 3, s, s, device=dev).to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (a.batch,), device=dev)
    return m, opt, (x, y), a.batch


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=["gpt2", "resnet50"], required=True)
    p.add_argument("--mode", choices=["eager", "eager-bf16", "compile"], default="eager")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--device", default="cuda")
    p.add_argument("--config", default="", help="gpt2: layers,heads,dim,block,vocab; resnet50: the image size")
    p.add_argument("--compile-mode", default="max-autotune")
    a = p.parse_args()
    dev = a.device
    torch.backends.cuda.matmul.allow_tf32 = a.mode != "eager"
    torch.backends.cudnn.allow_tf32 = a.mode != "eager"
    torch.backends.cudnn.benchmark = True
    m, opt, batch, items = (gpt_setup if a.model == "gpt2" else resnet_setup)(a, dev)
    loss_of = (lambda m, b: m(*b)) if a.model == "gpt2" else (lambda m, b: F.cross_entropy(m(b[0]), b[1]))
    fwd = torch.compile(m, mode=a.compile_mode) if a.mode == "compile" else m
    bf16 = a.mode != "eager"

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=dev, dtype=torch.bfloat16, enabled=bf16):
            loss = loss_of(fwd, batch)
        loss.backward()
        if a.model == "gpt2":
            torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        return loss

    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    t0 = time.perf_counter()
    for _ in range(a.warmup):
        step()
    sync()
    warm = time.perf_counter() - t0
    ms = []
    for _ in range(a.steps):
        t = time.perf_counter()
        loss = step()
        sync()
        ms.append((time.perf_counter() - t) * 1e3)
    med = statistics.median(ms)
    print(json.dumps({"model": a.model, "mode": a.mode, "batch": a.batch, "ms": med, "items_per_s": items / med * 1e3,
                      "warmup_s": warm, "loss": float(loss)}))


if __name__ == "__main__":
    main()
