#!/usr/bin/env bash
# One call on a lent GPU machine (the device tool runs it in the repository
# root): unpacks gpu-bundle.tar.xz (scripts/gpu_bundle.sh, made here and
# carried), then runs the stages in STAGES in order, each under its own time
# limit, every log under $OUT (which the device tool brings back), and prints
# a table last. Device minutes are few: build, bundle and read here.
#
#   STAGES   info test optin sanitize train bench models profile peak doctor   (default: info test sanitize train)
#     info      nvidia-smi, the driver, python3's torch
#     test      test_cuda, then test_ops, test_gpt, test_models and test_attention_tc (their cuda checks run on the GPU)
#     optin     test_mma_gpu (mma.sync's layout), then test_ops, test_gpt, test_attention_tc with
#               KILN_CUDA_FLASH=mma KILN_CUDA_GEMM=half KILN_CUDA_STORE=half (not yet defaults)
#     sanitize  compute-sanitizer memcheck and racecheck over test_cuda (KILN_TEST_CUDA_QUICK=1)
#               and test_attention_tc's GPU shapes (KILN_TEST_CUDA_ONLY=1);
#               Firecracker machines only (gVisor refuses the device)
#     train     kiln train --device cuda, mnist-cnn, 300 steps
#     bench     bench/gpu.sh, REPEAT=1 COMPILE=0 (mnist-cnn epoch against PyTorch)
#     models    bench/gpu_models.sh, REPEAT=1 STEPS=10 COMPILE=0 (GPT-2 small and resnet50)
#     profile   kiln bench step --profile of both (every kernel's time)
#     peak      kiln bench peak --device cuda: the matmul's GFLOP/s in fp32, TF32 and bf16, and the copy GB/s
#     doctor    kiln doctor train --device cuda on mnist-cnn and mlp in fp32 (the GPU's remedies: bf16, TF32)
#   LIMIT    seconds per stage (default 240)
#
#   e.g. (device tool): bash scripts/gpu_session.sh   carry: ["gpu-bundle.tar.xz"]
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-$ROOT/gpu-session-logs}
STAGES=${STAGES:-info test sanitize train}
LIMIT=${LIMIT:-240}
mkdir -p "$OUT"
[ -f gpu-bundle.tar.xz ] || { echo "gpu_session: gpu-bundle.tar.xz not here: make it with scripts/gpu_bundle.sh and carry it"; exit 2; }
B=$(mktemp -d)
tar -C "$B" -xJf gpu-bundle.tar.xz || { echo "gpu_session: cannot unpack gpu-bundle.tar.xz"; exit 2; }
export LD_LIBRARY_PATH="$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# NCCL is not in the bundle (218 MB): test_cuda loads the machine's, or the one PyTorch's wheels bring
NCCL_DIR=$(python3 -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib'))" 2>/dev/null)
[ -n "$NCCL_DIR" ] && [ -d "$NCCL_DIR" ] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$NCCL_DIR"
# KILN_DATA_ROOT: --data fashion-mnist (test_cuda's trainer runs) finds the bundle's copy
export KILN_BIN="$B/bin/kiln" DATA="$B/fashion-mnist" KILN_DATA_ROOT="$B" KILN_CACHE_DIR="$B/cache" OMP_NUM_THREADS=${OMP_NUM_THREADS:-8}
mkdir -p "$KILN_CACHE_DIR"

stage_info() {
    nvidia-smi
    "$KILN_BIN" --version
    python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name(0))"
}
stage_test() { # the tests read their fixtures relative to tests/, as ctest runs them
    local rc=0
    for t in test_cuda test_ops test_gpt test_models test_attention_tc test_conv_half; do
        echo "== $t"
        # no autotune cache, as under ctest: the trainer runs of one test must not choose another's kernels (a
        # remembered Winograd put test_models' cpu golden check 1.7e-4 off on an H200 machine's Xeon)
        (cd tests && KILN_CACHE_DIR= "$B/bin/$t")
        case $? in 0) ;; 77) echo "== $t skipped (no GPU?)"; rc=1 ;; *) rc=1 ;; esac
    done
    return $rc
}
stage_optin() { # the paths not yet the default, which have never run on a GPU: the op harness, the gpt and the attention
    local rc=0
    echo "== test_mma_gpu (mma.sync's fragment layout as simt emulates it)"
    "$B/bin/test_mma_gpu" || rc=1
    for t in test_ops test_gpt test_attention_tc; do
        echo "== $t with KILN_CUDA_FLASH=mma KILN_CUDA_GEMM=half KILN_CUDA_STORE=half"
        (cd tests && KILN_CACHE_DIR= KILN_CUDA_FLASH=mma KILN_CUDA_GEMM=half KILN_CUDA_STORE=half "$B/bin/$t") || rc=1
    done
    return $rc
}
stage_sanitize() {
    local rc=0
    for tool in memcheck racecheck; do
        echo "== compute-sanitizer --tool $tool"
        (cd tests && KILN_TEST_CUDA_QUICK=1 compute-sanitizer --tool "$tool" --error-exitcode 9 "$B/bin/test_cuda") || rc=1
        # the tensor-core attention's shared-memory tiles (warp-level hazards simt cannot show)
        (cd tests && KILN_TEST_CUDA_ONLY=1 compute-sanitizer --tool "$tool" --error-exitcode 9 "$B/bin/test_attention_tc") || rc=1
    done
    return $rc
}
stage_train() {
    "$KILN_BIN" train --device cuda --model mnist-cnn --data "$DATA" --epochs 1 --max-steps 300 --no-test
}
stage_bench() { REPEAT=1 COMPILE=0 bash bench/gpu.sh; }
stage_models() { REPEAT=1 STEPS=10 COMPILE=0 bash bench/gpu_models.sh; }
stage_profile() { # where a step's time goes: every kernel timed alone (kiln bench step --profile)
    "$KILN_BIN" bench step --model gpt --layers 12 --heads 12 --dim 768 --block 1024 --vocab 50257 --batch-size 16 \
        --device cuda --matmul-precision medium --precision bf16 --steps 3 --warmup 1 --profile
    KILN_CUDA_FLASH=mma KILN_CUDA_GEMM=half KILN_CUDA_STORE=half "$KILN_BIN" bench step --model gpt --layers 12 --heads 12 \
        --dim 768 --block 1024 --vocab 50257 --batch-size 16 --device cuda --matmul-precision medium --precision bf16 --steps 3 --warmup 1 --profile
    # bf16: the convolutions on 16-bit channels-last copies (conv.c, since 2026-11-30 late; the fp32 profile is in
    # bench/README.md)
    "$KILN_BIN" bench step --model resnet50 --size 224 --num-classes 1000 --batch-size 256 \
        --device cuda --matmul-precision medium --precision bf16 --steps 3 --warmup 1 --profile
    KILN_CUDA_LAYOUT=nhwc KILN_CUDA_STORE=half "$KILN_BIN" bench step --model resnet50 --size 224 --num-classes 1000 \
        --batch-size 256 --device cuda --matmul-precision medium --precision bf16 --steps 3 --warmup 1 --profile
}

stage_peak() {
    "$KILN_BIN" bench peak --device cuda --matmul-precision highest
    "$KILN_BIN" bench peak --device cuda --matmul-precision high
    "$KILN_BIN" bench peak --device cuda --precision bf16
}
stage_doctor() {
    "$KILN_BIN" doctor train --device cuda --model mnist-cnn --data "$DATA" --batch-size 64 --window-steps 8
    "$KILN_BIN" doctor train --device cuda --model mlp --data "$DATA" --batch-size 256 --window-steps 8 --json
}

printf '%s\n' "stage rc seconds" >"$OUT/summary"
for s in $STAGES; do
    declare -F "stage_$s" >/dev/null || { echo "$s unknown-stage 0" >>"$OUT/summary"; continue; }
    t0=$(date +%s)
    timeout "$LIMIT" bash -c "$(declare -f "stage_$s"); B='$B'; stage_$s" >"$OUT/$s.log" 2>&1
    rc=$?
    echo "$s $rc $(($(date +%s) - t0))" >>"$OUT/summary"
done
rm -rf "$B"
for s in $STAGES; do [ -f "$OUT/$s.log" ] && { echo "---- $s (last lines)"; tail -n 6 "$OUT/$s.log"; }; done
echo "----"
column -t "$OUT/summary" 2>/dev/null || cat "$OUT/summary"
