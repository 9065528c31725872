#!/usr/bin/env bash
# --num-classes end to end: resnet20 trained with 12 outputs on a small
# 10-class image folder keeps the count in its checkpoint (fc is 12 x 64);
# --resume takes it back without the flag and refuses another; eval and
# predict need it (without it fc.weight's shape is refused, exit 2); a class
# count below the data's is refused before training.
#
# Needs $KILN_BIN (ctest sets it), python3 and Debian's dataset-fashion-mnist.
set -u

. "$(dirname "$0")/harness.sh"
harness_init test_num_classes
export KILN_CACHE_DIR=

small_idx "$T/idx" 64 32
expect 0 "pack a 32x32 RGB image folder" -- "$KILN_BIN" pack --from "$T/idx" --to "$T/png" --format png --size 32 --channels 3
Q=(--model resnet20 --data "$T/png" --batch-size 16 --optimizer sgd --lr 0.01 --workers 0 --no-autotune --quiet)
expect 0 "train resnet20 with 12 classes" -- "$KILN_BIN" train "${Q[@]}" --num-classes 12 --max-steps 2 --save "$T/ck.safetensors"
check "the checkpoint's fc is 12 x 64 and its settings keep the count" "$PY" - "$T/ck.safetensors" <<'PYEOF'
import json, struct, sys
b = open(sys.argv[1], "rb").read()
h = json.loads(b[8:8 + struct.unpack("<Q", b[:8])[0]])
assert h["fc.weight"]["shape"] == [12, 64] and h["fc.bias"]["shape"] == [12], h["fc.weight"]
assert json.loads(h["__metadata__"]["kiln.settings"])["num-classes"] == "12"
PYEOF
expect 0 "--resume takes the count back" -- "$KILN_BIN" train --resume "$T/ck.safetensors" --max-steps 3 --epochs 2 --quiet
expect 2 "--resume with another count" "--num-classes 10 contradicts" -- \
    "$KILN_BIN" train --resume "$T/ck.safetensors" --num-classes 10 --max-steps 4 --epochs 2 --quiet
expect 0 "eval with --num-classes 12" -- "$KILN_BIN" eval --model resnet20 --num-classes 12 --data "$T/png" --load "$T/ck.safetensors" --workers 0
expect 2 "eval without it" "fc.weight" -- "$KILN_BIN" eval --model resnet20 --data "$T/png" --load "$T/ck.safetensors" --workers 0
expect 0 "predict with --num-classes 12" -- "$KILN_BIN" predict --model resnet20 --num-classes 12 --data "$T/png/test" \
    --load "$T/ck.safetensors" --out "$T/p.jsonl" --autotune off
check "predict: 32 lines of 12 logits" "$PY" -c "
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 32 and all(len(r['logits']) == 12 and len(r['top5']) == 5 for r in rows)" "$T/p.jsonl"
expect 2 "fewer outputs than the data's classes" "10 classes" "9 outputs" -- "$KILN_BIN" train "${Q[@]}" --num-classes 9 --max-steps 1
harness_finish
