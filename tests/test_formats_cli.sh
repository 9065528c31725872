#!/usr/bin/env bash
# CIFAR-10's binary batches and token files through the kiln program: the
# committed CIFAR fixtures (tests/ref/fixtures/formats) train the mlp (grey,
# center-cropped to 28) and feed `kiln bench loader`; a truncated batch file,
# a label out of range, a missing file and a token file without --block exit 2
# naming what is wrong.
#
# Needs $KILN_BIN (ctest sets it) and python3.
set -u

. "$(dirname "$0")/harness.sh"
harness_init test_formats_cli
export KILN_CACHE_DIR=
FIX=$(cd "$(dirname "$0")" && pwd)/ref/fixtures/formats

expect 0 "train the mlp on CIFAR-10 (grey, center crop 28, 2 workers)" -- "$KILN" train --quiet --json --model mlp \
    --data "cifar10:$FIX/cifar" --channels 1 --center-crop 28 --batch-size 2 --max-steps 3 --workers 2 --threads 2
check "trained 3 steps" "$PY" -c 'import json,sys; r=json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]); assert r["steps"] == 3, r' "$T/out"
expect 0 "bench loader on CIFAR-10 (random crops, flips, 0 and 2 workers)" -- "$KILN" bench loader --data "cifar10:$FIX/cifar" \
    --workers 0,2 --batch-size 4 --batches 5 --warmup 1 --random-resized-crop 24 --hflip --normalize imagenet --json
check "bench loader: two JSON lines, images_per_s > 0" "$PY" -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
assert [r["workers"] for r in rows] == [0, 2] and all(r["images_per_s"] > 0 for r in rows), rows' "$T/out"

mkdir -p "$T/cut" "$T/label"
cp "$FIX"/cifar/*.bin "$T/cut/"
cp "$FIX"/cifar/*.bin "$T/label/"
head -c 9000 "$FIX/cifar/test_batch.bin" >"$T/cut/test_batch.bin"
printf '\x0c' | dd of="$T/label/data_batch_2.bin" bs=1 seek=0 conv=notrunc status=none
expect 2 "a truncated test batch" "$T/cut/test_batch.bin" "9000 bytes" -- \
    "$KILN" train --quiet --model mlp --data "cifar10:$T/cut" --channels 1 --center-crop 28 --max-steps 2
expect 2 "a label out of range" "$T/label/data_batch_2.bin" "label 12" -- \
    "$KILN" bench loader --data "cifar10:$T/label" --workers 0 --batches 2
rm "$T/label/data_batch_5.bin"
expect 2 "a missing batch file" "$T/label/data_batch_5.bin" "cifar-10-binary.tar.gz" -- \
    "$KILN" bench loader --data "cifar10:$T/label" --workers 0 --batches 2
expect 2 "a token file without a block size" "$FIX/tokens.bin" "--block" -- \
    "$KILN" bench loader --data "tokens:$FIX/tokens.bin" --workers 0 --batches 2

harness_finish
