#!/usr/bin/env bash
# Causal attention at the GPT step's shape (B=8, T=128, C=256, 4 heads): kiln's
# FlashAttention kernel beside a plain materialising implementation of the same
# float math (build/bench_attention, bench/attention.c) and PyTorch 1.13's eager
# nanoGPT attention (q @ k^T * scale, masked_fill, softmax, @ v on the thirds of
# one [B, T, 3C] tensor), forward and backward, on 1 and 2 threads. Each line
# gives the median and the best of RUNS calls: on a busy machine the best is the
# figure to compare.
#
#   RUNS=N (default 100)  BENCH=PATH (default build/bench_attention)
set -euo pipefail

NAME=attention
RUNS="${RUNS:-100}"
ROOT="$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --show-toplevel)"
. "$ROOT/bench/openblas.sh" # OPENBLAS_CORETYPE from this CPU's flags
cd "$ROOT"
BENCH="${BENCH:-build/bench_attention}"
[ -x "$BENCH" ] || { echo "$NAME: $BENCH not found: run 'make'" >&2; exit 1; }
[[ "$RUNS" =~ ^[1-9][0-9]*$ ]] || { echo "$NAME: RUNS must be a positive integer (got '$RUNS')" >&2; exit 1; }

for t in 1 2; do
    OMP_NUM_THREADS=$t "$BENCH" 8 128 256 4 "$RUNS"
    /usr/bin/python3 - "$t" "$RUNS" <<'EOF'
import sys, time
import torch
import torch.nn.functional as F
threads, runs = int(sys.argv[1]), int(sys.argv[2])
torch.set_num_threads(threads)
B, T, C, H = 8, 128, 256, 4

def attention(qkv):
    q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in qkv.split(C, dim=2))
    att = (q @ k.transpose(-2, -1)) * (1.0 / (k.size(-1) ** 0.5))
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool)).view(1, 1, T, T)
    att = F.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
    return (att @ v).transpose(1, 2).contiguous().view(B, T, C)

qkv = torch.rand(B, T, 3 * C).mul_(2).sub_(1).requires_grad_()
dy = torch.rand(B, T, C).mul_(2).sub_(1)
attention(qkv).backward(dy)
fw, bw = [], []
for _ in range(runs):
    t0 = time.perf_counter()
    y = attention(qkv)
    t1 = time.perf_counter()
    y.backward(dy)
    t2 = time.perf_counter()
    fw.append((t1 - t0) * 1e3)
    bw.append((t2 - t1) * 1e3)
fw.sort()
bw.sort()
print(f"  pytorch {torch.__version__} eager nanoGPT, {threads} threads: forward {fw[runs // 2]:7.3f} ({fw[0]:7.3f}) ms"
      f"   backward {bw[runs // 2]:7.3f} ({bw[0]:7.3f}) ms")
EOF
done
