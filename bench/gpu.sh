#!/usr/bin/env bash
# kiln against PyTorch 2.x on the same GPU, in one run: one epoch of mnist-cnn
# on Fashion-MNIST (batch 64, Adadelta lr 1.0, dropout on, no evaluation),
# data from each framework's own loader. PyTorch runs in its usual
# configurations: eager fp32, eager with channels_last and bf16 autocast, and
# torch.compile(mode="max-autotune"). kiln runs at --matmul-precision highest
# (fp32, as PyTorch's eager default for matmuls) and high (TF32), at high with
# --sync-loss (each step's loss waited for: what reading it a step late saves)
# and with --precision fp16 (fp16 tensor cores, dynamic loss scaling). Epoch times
# exclude start-up on both sides (kiln's compile and cuDNN timing, PyTorch's 20
# warm-up steps and compilation), which are printed beside them. Medians of
# REPEAT runs (default 3), interleaved. Needs a GPU, build/kiln with the CUDA
# backend, and `python3` holding PyTorch 2.x with CUDA (PYTHON to choose another).
#
#   KILN_BIN  the kiln binary (default build/kiln)   DATA  the Fashion-MNIST folder
#   REPEAT    runs per configuration                 COMPILE=0  skip torch.compile (minutes of autotuning;
#                                                    it runs once, after the others)
set -uo pipefail
cd "$(dirname "$0")/.."
KILN=${KILN_BIN:-build/kiln}
PY=${PYTHON:-python3}
DATA=${DATA:-/usr/share/datasets/fashion-mnist}
REPEAT=${REPEAT:-3}
WORKERS=${WORKERS:-4}
RES=$(mktemp -d)
die() { echo "bench/gpu.sh: $*" >&2; exit 1; }
[ -x "$KILN" ] || die "$KILN not found: run make"
"$KILN" train --device cuda --max-steps 1 --data "$DATA" --no-test >/dev/null 2>"$RES/probe" || die "$(tail -1 "$RES/probe")"
$PY -c "import torch; assert torch.cuda.is_available()" 2>/dev/null || die "$PY has no PyTorch with CUDA"

kiln_run() { # name matmul-precision [more flags]
    local name=$1 mp=$2
    shift 2
    "$KILN" train --device cuda --model mnist-cnn --data "$DATA" --epochs 1 --batch-size 64 --optimizer adadelta --lr 1.0 \
        --workers "$WORKERS" --matmul-precision "$mp" "$@" --no-test --json 2>/dev/null | tail -1 |
        $PY -c "import json,sys; r=json.load(sys.stdin); print(json.dumps({'name':'$name','epoch_s':r['train_time_s']-r['compile_time_s'],'startup_s':r['compile_time_s'],'final_loss':r['final_loss']}))"
}
peer_run() { # name mode
    $PY bench/gpu/pytorch_mnist_gpu.py --mode "$2" --data "$DATA" --workers "$WORKERS" 2>/dev/null | tail -1 |
        $PY -c "import json,sys; r=json.load(sys.stdin); print(json.dumps({'name':'$1','epoch_s':r['epoch_s'],'startup_s':r['warmup_s'],'final_loss':r['final_loss']}))"
}
# each result as it comes (a run cut short by a time limit still leaves the others)
for i in $(seq "$REPEAT"); do
    kiln_run kiln-fp32 highest | tee -a "$RES/all"
    peer_run torch-eager-fp32 eager | tee -a "$RES/all"
    kiln_run kiln-tf32 high | tee -a "$RES/all"
    peer_run torch-eager-cl-bf16 eager-cl-bf16 | tee -a "$RES/all"
    kiln_run kiln-tf32-sync-loss high --sync-loss | tee -a "$RES/all"
    kiln_run kiln-fp16 high --precision fp16 | tee -a "$RES/all"
done
if [ "${COMPILE:-1}" = 1 ]; then
    peer_run torch-compile-reduce-overhead compile-reduce-overhead | tee -a "$RES/all"
    peer_run torch-compile-max-autotune compile | tee -a "$RES/all"
fi
echo
$PY - "$RES/all" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
med = {}
for n in dict.fromkeys(r["name"] for r in rows):
    e = [r["epoch_s"] for r in rows if r["name"] == n]
    s = [r["startup_s"] for r in rows if r["name"] == n]
    med[n] = statistics.median(e)
    print(f"{n:28s} epoch {med[n]:7.3f} s (runs: {', '.join(f'{x:.3f}' for x in e)})  start-up {statistics.median(s):6.2f} s")
torch = {n: v for n, v in med.items() if n.startswith("torch")}
best = min(torch, key=torch.get) if torch else None
for k in ("kiln-fp32", "kiln-tf32", "kiln-fp16"):
    if k in med and "torch-eager-fp32" in med:
        print(f"{k} / torch-eager-fp32 = {med[k] / med['torch-eager-fp32']:.3f}  (target <= 0.3)")
    if k in med and best:
        print(f"{k} / best PyTorch ({best}) = {med[k] / med[best]:.3f}")
PY
