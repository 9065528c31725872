#!/usr/bin/env bash
# `make interop`: kiln checkpoints load in PyTorch and score the same there,
# and torchvision's resnet18 weights load in kiln and give PyTorch's logits.
# Trains mnist-cnn and mnist-cnn-bn for 200 steps, measures kiln's test
# accuracy, loads each checkpoint into the PyTorch module (Debian's
# python3-torch; the mnist-cnn module comes from ../shared/bench) and checks
# PyTorch's accuracy agrees within 0.1 point.
set -euo pipefail
ROOT="$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
cd "$ROOT"
SHARED="${KILN_SHARED:-$ROOT/../shared}"
PY=/usr/bin/python3
die() { echo "interop: $*" >&2; exit 1; }
[ -x build/kiln ] || die "build/kiln not found: run 'make' first"
[ -f "$SHARED/bench/pytorch_mnist.py" ] || die "$SHARED/bench/pytorch_mnist.py not found: make interop uses the shared \
PyTorch reference beside the repository; set KILN_SHARED to the folder holding bench/"
"$PY" -c 'import torch' 2>/dev/null || die "python3-torch is missing: run scripts/install-deps.sh --oracle"
T=$(mktemp -d /tmp/kiln-interop.XXXXXX)
trap 'rm -rf "$T"' EXIT
for model in mnist-cnn mnist-cnn-bn; do
    build/kiln train --model "$model" --max-steps 200 --no-test --quiet --save "$T/$model.safetensors"
    acc=$(build/kiln eval --model "$model" --load "$T/$model.safetensors" --json 2>/dev/null | tail -n 1 |
          "$PY" -c 'import json, sys; print(json.load(sys.stdin)["test_accuracy"])')
    echo "kiln: test accuracy of $model = $acc"
    KILN_SHARED="$SHARED" "$PY" tests/ref/load_in_pytorch.py --model "$model" "$T/$model.safetensors" "$acc"
done
echo "interop: both checkpoints score the same in PyTorch"
# the other way: torchvision's resnet18 state_dict (random weights and running statistics) in kiln
[ -x build/test_models ] || die "build/test_models not found: run 'make' first"
"$PY" -c 'import torchvision' 2>/dev/null || die "python3-torchvision is missing"
"$PY" tests/ref/torchvision_resnet18.py "$T/tv"
(cd tests && KILN_TORCHVISION_DIR="$T/tv" ../build/test_models)
echo "interop: torchvision's resnet18 gives PyTorch's logits in kiln"
