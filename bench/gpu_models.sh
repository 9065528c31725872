#!/usr/bin/env bash
# The issue's GPU step targets, kiln against PyTorch 2.x on the same GPU in
# one run: GPT-2 small (12 layers, 12 heads, 768 wide, block 1024, vocab
# 50257; batch 16 windows; AdamW, clipping) in tokens/s, and resnet50 (batch
# 256, 224x224, synthetic data, SGD) in images/s. kiln runs `kiln bench step
# --device cuda` at --matmul-precision high (TF32) and medium (bf16 tensor
# cores), and with --precision bf16 (autocast: the attention's products on
# tensor cores as well, src/backends/cuda/flash_tc.cu, and for the GPT
# flash_mma.cu's under KILN_CUDA_FLASH=mma as kiln-bf16-mma, with cuBLASLt on 16-bit operand copies as
# kiln-bf16-mma-half, and with the half-storage pass as kiln-bf16-mma-store); PyTorch runs bench/gpu/pytorch_step_gpu.py eager fp32, eager with
# bf16 autocast, and torch.compile (max-autotune) of the bf16 model. Medians
# over STEPS timed steps each, REPEAT rounds interleaved; the ratio is kiln's
# best against PyTorch's best, and kiln's achieved TFLOP/s against the bf16
# matmul peak `kiln bench peak` measures on this GPU first (cuBLASLt through
# kiln's plans: MFU against a measured peak, never a datasheet's). Needs a GPU, build/kiln with the CUDA backend,
# and `python3` holding PyTorch 2.x with CUDA (torchvision for resnet50).
#
#   MODELS="gpt2 resnet50"  REPEAT=2  STEPS=20  COMPILE=0 (skip torch.compile)
set -uo pipefail
cd "$(dirname "$0")/.."
KILN=${KILN_BIN:-build/kiln}
PY=${PYTHON:-python3}
MODELS=${MODELS:-gpt2 resnet50}
REPEAT=${REPEAT:-2}
STEPS=${STEPS:-20}
RES=$(mktemp -d)
die() { echo "bench/gpu_models.sh: $*" >&2; exit 1; }
[ -x "$KILN" ] || die "$KILN not found: run make"
"$KILN" bench step --model mlp --batch-size 4 --steps 1 --warmup 0 --device cuda >/dev/null 2>"$RES/probe" || die "$(tail -1 "$RES/probe")"
$PY -c "import torch; assert torch.cuda.is_available()" 2>/dev/null || die "$PY has no PyTorch with CUDA"
"$KILN" bench peak --device cuda --precision bf16 --json 2>"$RES/err" | tail -1 >"$RES/peak" ||
    echo "kiln bench peak failed: $(tail -1 "$RES/err")" >&2

kiln_args() { # model
    case $1 in
    gpt2) echo "--model gpt --layers 12 --heads 12 --dim 768 --block 1024 --vocab 50257 --batch-size 16" ;;
    resnet50) echo "--model resnet50 --size 224 --num-classes 1000 --batch-size 256" ;;
    esac
}
items() { case $1 in gpt2) echo $((16 * 1024)) ;; resnet50) echo 256 ;; esac; }
kiln_run() { # model matmul-precision [name --precision P]
    local name=kiln-$2 more=()
    [ $# -ge 4 ] && name=$3 more=(--precision "$4")
    # shellcheck disable=SC2046
    "$KILN" bench step $(kiln_args "$1") --device cuda --matmul-precision "$2" "${more[@]}" --steps "$STEPS" --warmup 3 --json 2>"$RES/err" |
        tail -1 | $PY -c "import json,sys; r=json.load(sys.stdin); print(json.dumps({'model':'$1','name':'$name','ms':r['ms'],'per_s':$(items "$1")/r['ms']*1e3,'tflops':r['gflops']/1e3}))" ||
        echo "kiln $1 $name failed: $(tail -1 "$RES/err")" >&2
}
peer_run() { # model mode
    local b=16; [ "$1" = resnet50 ] && b=256
    $PY bench/gpu/pytorch_step_gpu.py --model "$1" --mode "$2" --batch "$b" --steps "$STEPS" 2>"$RES/err" | tail -1 |
        $PY -c "import json,sys; r=json.load(sys.stdin); print(json.dumps({'model':'$1','name':'torch-$2','ms':r['ms'],'per_s':r['items_per_s']}))" ||
        echo "torch $1 $2 failed: $(tail -1 "$RES/err")" >&2
}
for m in $MODELS; do
    # the likely bests first, so a run cut short by its time limit still has the pair the target compares
    # (on the H200, 2026-11-30, resnet50's stage ended before PyTorch's bf16 run when it came fourth)
    for i in $(seq "$REPEAT"); do
        peer_run "$m" eager-bf16 | tee -a "$RES/all"
        kiln_run "$m" medium kiln-bf16 bf16 | tee -a "$RES/all" # autocast: attention on tensor cores too
        # the attention's tiles in registers (flash_mma.cu), not yet the default
        [ "$m" = gpt2 ] && KILN_CUDA_FLASH=mma kiln_run "$m" medium kiln-bf16-mma bf16 | tee -a "$RES/all"
        # and cuBLASLt on 16-bit copies of its operands (linear.c, KILN_CUDA_GEMM=half), not yet the default either
        [ "$m" = gpt2 ] && KILN_CUDA_FLASH=mma KILN_CUDA_GEMM=half kiln_run "$m" medium kiln-bf16-mma-half bf16 | tee -a "$RES/all"
        # and the activations only matmuls read stored in bf16 (the half-storage pass, KILN_CUDA_STORE=half)
        [ "$m" = gpt2 ] && KILN_CUDA_FLASH=mma KILN_CUDA_GEMM=half KILN_CUDA_STORE=half kiln_run "$m" medium kiln-bf16-mma-store bf16 |
            tee -a "$RES/all"
        # resnet50: the convolutions' 16-bit outputs stored as cuDNN rounds them (batch norm and relu's backward read them)
        [ "$m" = resnet50 ] && KILN_CUDA_STORE=half kiln_run "$m" medium kiln-bf16-store bf16 | tee -a "$RES/all"
        # and channels last (the cuda layout pass, KILN_CUDA_LAYOUT=nhwc): cuDNN on the 16-bit tensors as they are
        [ "$m" = resnet50 ] && KILN_CUDA_LAYOUT=nhwc KILN_CUDA_STORE=half kiln_run "$m" medium kiln-bf16-nhwc-store bf16 |
            tee -a "$RES/all"
        peer_run "$m" eager | tee -a "$RES/all"
        kiln_run "$m" medium | tee -a "$RES/all"
        kiln_run "$m" high | tee -a "$RES/all"
    done
    [ "${COMPILE:-1}" = 1 ] && peer_run "$m" compile | tee -a "$RES/all"
done
echo
$PY - "$RES/all" "$RES/peak" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
try:
    peak = json.load(open(sys.argv[2]))["gflops"] / 1e3
    print(f"bf16 matmul peak measured here (kiln bench peak): {peak:.1f} TFLOP/s")
except (OSError, ValueError, KeyError):
    peak = 0
for m in dict.fromkeys(r["model"] for r in rows):
    med = {}
    for n in dict.fromkeys(r["name"] for r in rows if r["model"] == m):
        v = [r["per_s"] for r in rows if r["model"] == m and r["name"] == n]
        med[n] = statistics.median(v)
        print(f"{m:9s} {n:18s} {med[n]:12.1f} {'tokens' if m == 'gpt2' else 'images'}/s (rounds: {', '.join(f'{x:.0f}' for x in v)})")
    k = {n: v for n, v in med.items() if n.startswith("kiln")}
    t = {n: v for n, v in med.items() if n.startswith("torch")}
    if k and t:
        bk, bt = max(k, key=k.get), max(t, key=t.get)
        print(f"{m}: kiln's best ({bk}) / PyTorch's best ({bt}) = {k[bk] / t[bt]:.2f}x  (target >= 1.1)")
    for n in k:
        tf = statistics.median([r["tflops"] for r in rows if r["model"] == m and r["name"] == n and "tflops" in r] or [0])
        if tf and peak:
            print(f"{m}: {n} achieves {tf:.1f} TFLOP/s, {100 * tf / peak:.1f} % of the measured bf16 matmul peak")
PY
