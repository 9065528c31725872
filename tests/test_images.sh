#!/usr/bin/env bash
# Image folders through the kiln program: `kiln pack` writes a small part of
# Fashion-MNIST as JPEG and PNG folders; mnist-cnn trains on them with
# --resize 28 --channels 1 (and random crops and flips), evaluates with the
# deterministic transforms, splits a class-folder layout with --val-split;
# bad input exits 2 naming what is wrong: a corrupt file met by a loader
# worker (or by the training thread with --workers 0), samples the model
# cannot take, transforms on IDX data (and what IDX data refuses), malformed transform options, pack's
# options for shards given to another format (shards: test_shards.sh);
# `kiln bench loader` gives a JSON line per workers
# value and exits 2 on bad options.
#
# Needs $KILN_BIN (ctest sets it), Fashion-MNIST in /usr/share/datasets and python3.
set -u

. "$(dirname "$0")/harness.sh"
harness_init test_images
export KILN_CACHE_DIR=

# the JSON line's field, or "" when absent
field() { "$PY" -c "import json,sys; print(json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]).get(sys.argv[2], ''))" "$T/out" "$1" 2>/dev/null; }

if [ ! -d "$DATA" ]; then
    echo "test_images: note: $DATA absent (apt-get install dataset-fashion-mnist); skipped"
    exit 0
fi

small_idx "$T/idx" 640 200

Q=(--quiet --json --model mnist-cnn --batch-size 32 --threads 2)

# ---- kiln pack ----
expect 0 "pack jpeg" -- "$KILN" pack --from "$T/idx" --to "$T/jpg" --format jpeg
check "pack wrote 640 + 200 JPEGs" test "$(find "$T/jpg" -name '*.jpg' | wc -l)" -eq 840
check "pack: class folders 0..9" test "$(ls "$T/jpg/train" | tr '\n' ' ')" = "0 1 2 3 4 5 6 7 8 9 "
expect 0 "pack png, 32x32, RGB" -- "$KILN" pack --from "$T/idx" --to "$T/png" --format png --size 32 --channels 3
check "pack wrote 840 PNGs" test "$(find "$T/png" -name '*.png' | wc -l)" -eq 840
check "a packed PNG is 32x32 RGB" test "$(od -An -tx1 -j16 -N10 "$(find "$T/png/train/0" -name '*.png' | head -n 1)" | tr -d ' \n')" = "00000020000000200802"
# resized images are the data, not blank: blank ones would all be the same file
check "pack --size: the 840 resized PNGs are 840 different images" \
    test "$(find "$T/png" -name '*.png' -exec md5sum {} + | cut -d' ' -f1 | sort -u | wc -l)" -eq 840
expect 2 "pack: --decoded without --format shard" "--decoded" "--format shard" -- "$KILN" pack --from "$T/idx" --to "$T/sh" --decoded
expect 2 "pack over an existing folder" "$T/jpg/train" "already exists" -- "$KILN" pack --from "$T/idx" --to "$T/jpg"
expect 2 "pack: unknown format" "'gif'" -- "$KILN" pack --from "$T/idx" --to "$T/gif" --format gif

# ---- training and evaluating on image folders ----
expect 0 "train on the JPEG folder (--resize 28 --channels 1, 2 workers)" -- \
    "$KILN" train "${Q[@]}" --data "$T/jpg" --resize 28 --channels 1 --max-steps 6 --workers 2 --save "$T/run.safetensors"
check "trained 6 steps" test "$(field steps)" = 6
check "a finite loss below ln(10) * 1.5" "$PY" -c "import sys; v=float(sys.argv[1]); sys.exit(not (0 < v < 3.45))" "$(field final_loss)"
check "test accuracy measured" "$PY" -c "import sys; v=float(sys.argv[1]); sys.exit(not (0 <= v <= 1))" "$(field test_accuracy)"
expect 0 "eval on the JPEG folder" -- "$KILN" eval --model mnist-cnn --data "$T/jpg" --load "$T/run.safetensors" --resize 28 \
    --channels 1 --json
check "eval saw the 200 test images" test "$(field samples)" = 200
expect 0 "train: RGB PNGs to grey, random crops and flips, normalised, 0 workers" -- \
    "$KILN" train "${Q[@]}" --data "$T/png" --random-resized-crop 28,0.5,1 --hflip --channels 1 --normalize 0.2860/0.3530 \
    --max-steps 4 --workers 0
check "trained 4 steps" test "$(field steps)" = 4
expect 0 "train: class folders split by --val-split" -- \
    "$KILN" train "${Q[@]}" --data "$T/jpg/train" --val-split 0.1 --resize 28 --channels 1 --max-steps 3
expect 2 "class folders without --val-split" "--val-split" "--no-test" -- \
    "$KILN" train "${Q[@]}" --data "$T/jpg/train" --resize 28 --channels 1 --max-steps 3
expect 2 "RGB samples for a grey model" "[3, 28, 28]" "mnist-cnn" -- "$KILN" train "${Q[@]}" --data "$T/jpg" --max-steps 3
expect 2 "a resize the model cannot take" "[1, 32, 32]" -- "$KILN" train "${Q[@]}" --data "$T/jpg" --resize 32 --channels 1 --max-steps 3

# ---- kiln bench loader: one JSON line per workers value, a positive rate ----
expect 0 "bench loader on the JPEG folder (workers 0,1,2)" -- "$KILN" bench loader --data "$T/jpg" --workers 0,1,2 \
    --batch-size 16 --batches 12 --warmup 2 --random-resized-crop 24,0.35,1 --hflip --normalize 0.2860/0.3530 --channels 1 --json
check "bench loader: a JSON line per workers value, images_per_s > 0" "$PY" -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
assert [r["workers"] for r in rows] == [0, 1, 2], rows
assert all(r["pin_memory"] is False and r["images_per_s"] > 0 and r["batches"] == 12 for r in rows), rows' "$T/out"
expect 0 "bench loader with --pin-memory, epochs wrap" -- "$KILN" bench loader --data "$T/jpg" --workers 2 --pin-memory \
    --batch-size 64 --batches 25 --resize 28 --channels 1 --json
check "bench loader: pin_memory true" "$PY" -c '
import json, sys
r = json.loads(open(sys.argv[1]).read().strip())
assert r["pin_memory"] is True and r["images_per_s"] > 0 and r["batches"] == 25, r' "$T/out"
expect 2 "bench loader: --workers x" "--workers" -- "$KILN" bench loader --data "$T/jpg" --workers x
expect 2 "bench loader: --batch-size 0" "--batch-size" -- "$KILN" bench loader --data "$T/jpg" --batch-size 0
expect 2 "bench loader: a malformed --normalize" "--normalize" -- "$KILN" bench loader --data "$T/jpg" --normalize 0.5,0.5
expect 2 "bench loader: no --data" "--data" -- "$KILN" bench loader --workers 0

# ---- a corrupt file met while training: exit 2 naming it, with and without workers ----
victim=$(find "$T/jpg/train/3" -name '*.jpg' | sort | head -n 1)
cp "$victim" "$T/victim.orig"
head -c 200 "$victim" >"$T/cut" && cp "$T/cut" "$victim"
for w in 2 0; do
    expect 2 "a truncated JPEG ($w workers)" "$victim" "JPEG" -- \
        "$KILN" train "${Q[@]}" --data "$T/jpg" --resize 28 --channels 1 --workers "$w" --epochs 1 --no-test
done
check "no checkpoint from a failed run" test ! -e "$T/fail.safetensors"
printf 'not an image' >"$victim"
expect 2 "a text file named .jpg" "$victim" "not a JPEG or PNG" -- \
    "$KILN" train "${Q[@]}" --data "$T/jpg" --resize 28 --channels 1 --epochs 1 --no-test --save "$T/fail.safetensors"
check "no checkpoint from a failed run" test ! -e "$T/fail.safetensors"
# skip: a bad file in the middle of a class, and (read at open for the sample shape) the first of another
cp "$T/victim.orig" "$victim"
first=$victim
printf 'not an image' >"$first"
victim=$(find "$T/jpg/train/5" -name '*.jpg' | sort | sed -n 2p)
printf 'not an image' >"$victim"
for w in 2 0; do
    expect 0 "--bad-samples skip goes on past it ($w workers)" "$victim" "--bad-samples skip" -- \
        "$KILN" train "${Q[@]}" --data "$T/jpg" --resize 28 --channels 1 --workers "$w" --epochs 1 --no-test --bad-samples skip
    check "the skips are counted ($w workers)" "$PY" -c "import sys; sys.exit(not int(sys.argv[1]) >= 2)" "$(field skipped_samples)"
done
expect 2 "--bad-samples maybe" "--bad-samples" "fail or skip" -- "$KILN" train "${Q[@]}" --data "$T/jpg" --bad-samples maybe

# ---- --cache while training: the first epoch fills it, the second reads it ----
# --no-autotune in both: without the autotune cache (KILN_CACHE_DIR= above) each run would time the convolution
# algorithms afresh, and a different choice rounds differently
expect 0 "train two epochs with --cache" -- "$KILN" train "${Q[@]}" --data "$T/jpg" --resize 28 --channels 1 --epochs 2 \
    --no-test --bad-samples skip --cache "$T/cache" --no-autotune
check "the cache holds a complete shard of the training split" test -n "$(find "$T/cache" -name 'train-*.kshard' -size +100k)"
loss_cached=$(field final_loss)
expect 0 "the same run without the cache" -- "$KILN" train "${Q[@]}" --data "$T/jpg" --resize 28 --channels 1 --epochs 2 \
    --no-test --bad-samples skip --no-autotune
loss_plain=$(field final_loss)
check "cached and uncached runs train alike (same final loss: $loss_cached with the cache, $loss_plain without)" \
    test "$loss_cached" = "$loss_plain"

# ---- --workers auto and --trace ----
expect 0 "train with --workers auto and --trace" "--workers auto" -- "$KILN" train --json --model mnist-cnn --batch-size 16 \
    --threads 2 --data "$T/jpg" --resize 28 --channels 1 --epochs 1 --no-test --bad-samples skip --trace "$T/trace.json"
check "auto chose a count and said why" "$PY" -c '
import json, sys
r = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
sys.exit(not (r["workers"] >= 1 and "with 1" in r["workers_auto"]))' "$T/out"
check "the trace is valid JSON with the training thread's and the workers' spans" "$PY" -c '
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
names = {e["name"] for e in ev if e["ph"] == "X"}
threads = {e["args"]["name"] for e in ev if e["ph"] == "M"}
ok = {"forward", "backward", "optimizer", "data-wait", "sample", "read", "decode", "augment"} <= names and "train" in threads
ok = ok and any(t.startswith("loader worker") for t in threads)
ok = ok and all(e["dur"] >= 0 and e["ts"] >= 0 for e in ev if e["ph"] == "X")
steps = sum(1 for e in ev if e["name"] == "optimizer")
sys.exit(not (ok and steps == 40))' "$T/trace.json"
expect 2 "--trace into a missing folder" "$T/no/such/trace.json" -- "$KILN" train "${Q[@]}" --data "$T/jpg" --resize 28 \
    --channels 1 --max-steps 1 --trace "$T/no/such/trace.json"
expect 2 "--workers lots" "--workers" -- "$KILN" train "${Q[@]}" --data "$T/jpg" --workers lots

# ---- option errors ----
expect 0 "transforms on IDX data (resnet20's input from 28x28 grey)" -- "$KILN" train "${Q[@]}" --model resnet20 --data "$T/idx" \
    --resize 32 --channels 3 --hflip --batch-size 8 --max-steps 2 --no-test
expect 2 "--val-split on IDX data" "IDX data" "--val-split" -- "$KILN" train "${Q[@]}" --data "$T/idx" --val-split 0.1 --max-steps 1
expect 2 "three means for one IDX channel" "IDX data" "--channels 3" -- "$KILN" train "${Q[@]}" --data "$T/idx" \
    --normalize 0.1,0.2,0.3/0.3,0.3,0.3 --max-steps 1
expect 2 "a crop larger than the IDX images" "idx train" "crop is larger" -- "$KILN" train "${Q[@]}" --data "$T/idx" --center-crop 40 --max-steps 1
expect 2 "a malformed --normalize" "--normalize" "imagenet" -- "$KILN" train "${Q[@]}" --data "$T/jpg" --normalize 0.5,0.5
expect 2 "a malformed --random-resized-crop" "--random-resized-crop" -- "$KILN" train "${Q[@]}" --data "$T/jpg" \
    --random-resized-crop 28,0.9,0.1
expect 2 "--channels 2" "--channels is 2" -- "$KILN" train "${Q[@]}" --data "$T/jpg" --channels 2 --max-steps 1
expect 2 "--val-split 1" "--val-split" -- "$KILN" train "${Q[@]}" --data "$T/jpg/train" --val-split 1 --max-steps 1
expect 2 "eval: a malformed --normalize" "--normalize" -- "$KILN" eval --data "$T/jpg" --load "$T/run.safetensors" --normalize x
expect 0 "kiln train --help lists the transforms" -- "$KILN" train --help
for f in --resize --center-crop --random-resized-crop --hflip --normalize --channels --val-split; do
    check "train --help mentions $f" grep -qF -- "$f" "$T/out"
done

harness_finish
