#!/usr/bin/env bash
# Packed shards and --cache through the kiln program: `kiln pack --format
# shard` from IDX data and from an image folder (encoded and --decoded), and
# --format png from an image folder;
# training, evaluation and `kiln bench loader` on them; bench's --epochs 2
# with --cache (a rate per epoch, the cache file written once); bad input
# exits 2 naming the file or flag: truncated, corrupt and mismatched shards,
# manifests that are not JSON, hold wrong counts or point outside the folder,
# a missing shard, an unwritable --cache, packing over existing shards,
# --size without --decoded from an image folder, and a corrupt source file
# (which leaves no index.json and no shard behind). Every bad file is made
# here from a good one.
#
# Needs $KILN_BIN (ctest sets it), Fashion-MNIST in /usr/share/datasets and python3.
set -u

. "$(dirname "$0")/harness.sh"
harness_init test_shards
export KILN_CACHE_DIR=

if [ ! -d "$DATA" ]; then
    echo "test_shards: note: $DATA absent (apt-get install dataset-fashion-mnist); skipped"
    exit 0
fi
field() { "$PY" -c "import json,sys; print(json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]).get(sys.argv[2], ''))" "$T/out" "$1" 2>/dev/null; }

small_idx "$T/idx" 300 100
Q=(--quiet --json --model mnist-cnn --batch-size 32 --threads 2 --channels 1)

# ---- packing ----
expect 0 "pack IDX data as shards of 128" -- "$KILN" pack --from "$T/idx" --to "$T/sh" --format shard --shard-size 128
check "3 train and 1 test shards and a manifest" test "$(ls "$T/sh" | tr '\n' ' ')" = \
    "index.json test-00000.kshard train-00000.kshard train-00001.kshard train-00002.kshard "
check "the manifest lists 300 + 100 encoded samples, 10 classes" "$PY" -c '
import json, sys
m = json.load(open(sys.argv[1]))
assert m["records"] == "encoded" and len(m["classes"]) == 10, m
assert m["splits"]["train"]["count"] == 300 and m["splits"]["test"]["count"] == 100, m
assert [s["count"] for s in m["splits"]["train"]["shards"]] == [128, 128, 44], m' "$T/sh/index.json"
expect 0 "pack the IDX data as a JPEG folder" -- "$KILN" pack --from "$T/idx" --to "$T/jpg" --format jpeg --size 32
expect 0 "pack the JPEG folder as encoded shards" -- "$KILN" pack --from "$T/jpg" --to "$T/enc" --format shard
expect 0 "pack the JPEG folder as decoded shards, 28x28 grey" -- \
    "$KILN" pack --from "$T/jpg" --to "$T/dec" --format shard --decoded --size 28 --channels 1
expect 0 "pack the JPEG folder as a folder of 16x16 grey PNGs" -- \
    "$KILN" pack --from "$T/jpg" --to "$T/png16" --format png --size 16 --channels 1
check "400 PNGs in the source's class folders" test "$(find "$T/png16" -name '*.png' | wc -l):$(ls "$T/png16/test" | tr -d '\n')" = "400:0123456789"
check "a packed PNG is 16x16 grey" test "$(od -An -tx1 -j16 -N10 "$(find "$T/png16/train/5" -name '*.png' | head -n 1)" | tr -d ' \n')" = "00000010000000100800"
expect 0 "train on the repacked PNGs" -- "$KILN" train "${Q[@]}" --data "$T/png16" --resize 28 --max-steps 2 --workers 2
check "encoded shards hold the JPEG files' bytes" test "$(cat "$T"/enc/*.kshard | wc -c)" -lt $(($(cat "$T"/jpg/*/*/*.jpg | wc -c) + 20000))
check "decoded shards: 28x28 bytes per sample and a header" test "$(cat "$T"/dec/train-*.kshard | wc -c)" -gt $((300 * 784))

expect 0 "pack a DIR/<class>/... folder as shards (a train split only)" -- "$KILN" pack --from "$T/jpg/train" --to "$T/flat" --format shard
expect 2 "its missing test split" "no test split" "--no-test" -- "$KILN" train "${Q[@]}" --data "$T/flat" --resize 28 --max-steps 2
expect 0 "its train split with --no-test" -- "$KILN" train "${Q[@]}" --data "$T/flat" --resize 28 --max-steps 2 --no-test

# ---- training, evaluation, the loader benchmark ----
expect 0 "train on encoded shards (random crops, 2 workers)" -- \
    "$KILN" train "${Q[@]}" --data "$T/enc" --random-resized-crop 28,0.5,1 --hflip --max-steps 4 --workers 2 --save "$T/run.safetensors"
check "trained 4 steps" test "$(field steps)" = 4
expect 0 "eval on the encoded shards' test split" -- "$KILN" eval --model mnist-cnn --data "$T/enc" --load "$T/run.safetensors" \
    --random-resized-crop 28,0.5,1 --channels 1 --json
check "eval saw the 100 test samples" test "$(field samples)" = 100
expect 0 "train on decoded shards (0 workers)" -- "$KILN" train "${Q[@]}" --data "$T/dec" --max-steps 3 --workers 0
expect 0 "train on the IDX shards (PNG records)" -- "$KILN" train "${Q[@]}" --data "$T/sh" --max-steps 3
expect 0 "bench loader, 2 epochs with --cache" -- "$KILN" bench loader --data "$T/jpg" --cache "$T/cache" --epochs 2 --workers 2 \
    --batch-size 16 --random-resized-crop 28 --hflip --channels 1 --json
check "bench: one JSON line per epoch, every batch" "$PY" -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
assert [r["epoch"] for r in rows] == [1, 2] and all(r["batches"] == 19 and r["images_per_s"] > 0 for r in rows), rows' "$T/out"
check "the cache file was written once" test "$(ls "$T/cache" | grep -c '^train-.*\.kshard$')" = 1

# ---- bad shards and manifests, made from good ones ----
cp -r "$T/enc" "$T/bad"
S="$T/bad/train-00000.kshard"
cp "$S" "$T/good.kshard"
bad_train() { expect 2 "$1" "${@:2}" -- "$KILN" train "${Q[@]}" --data "$T/bad" --resize 28 --max-steps 2 --workers 0; }
head -c $(($(stat -c %s "$T/good.kshard") - 10)) "$T/good.kshard" >"$S"
bad_train "a truncated shard" "$S" "truncated"
{ printf 'KILNSHRX'; tail -c +9 "$T/good.kshard"; } >"$S"
bad_train "a shard with a wrong magic" "$S" "magic"
head -c 100 "$T/good.kshard" >"$S"
bad_train "a shard cut inside its labels" "$S"
"$PY" - "$T/good.kshard" "$S" <<'PY'
import struct, sys
b = bytearray(open(sys.argv[1], 'rb').read())
count, lab, idx = struct.unpack_from('<qqq', b, 16)
struct.pack_into('<q', b, idx + 8 * 3, struct.unpack_from('<q', b, idx + 8 * 3)[0] + 10**9)
open(sys.argv[2], 'wb').write(b)
PY
bad_train "a shard whose index points outside it" "$S" "index entry 3"
"$PY" - "$T/good.kshard" "$S" <<'PY'
import struct, sys
b = bytearray(open(sys.argv[1], 'rb').read())
struct.pack_into('<i', b, 64 + 4 * 5, 12)
open(sys.argv[2], 'wb').write(b)
PY
bad_train "a label beyond the classes" "$S" "label 12"
"$PY" - "$T/good.kshard" "$S" <<'PY'
import struct, sys
b = bytearray(open(sys.argv[1], 'rb').read())
count, lab, idx, rec = struct.unpack_from('<qqqq', b, 16)
first = struct.unpack_from('<q', b, idx)[0]
b[first:first + 64] = bytes(64)
open(sys.argv[2], 'wb').write(b)
PY
expect 2 "a corrupt record, met by a worker" "$S" "record 0" "not a JPEG or PNG" -- \
    "$KILN" train "${Q[@]}" --data "$T/bad" --max-steps 20 --workers 2 --random-resized-crop 28
cp "$T/good.kshard" "$S"
cp "$T/dec/train-00000.kshard" "$S"
bad_train "a decoded shard where the manifest says encoded" "$S" "decoded" "encoded"
cp "$T/good.kshard" "$S"
M="$T/bad/index.json"
cp "$M" "$T/good.json"
head -c 200 "$T/good.json" >"$M"
bad_train "a truncated manifest" "$M" "not valid JSON"
"$PY" - "$T/good.json" "$M" <<'PY'
import json, sys
m = json.load(open(sys.argv[1])); m["splits"]["train"]["count"] += 1
json.dump(m, open(sys.argv[2], "w"))
PY
bad_train "a manifest whose count is not its shards'" "$M" "splits.train.count"
"$PY" - "$T/good.json" "$M" <<'PY'
import json, sys
m = json.load(open(sys.argv[1])); m["splits"]["train"]["shards"][0]["file"] = "../enc/train-00000.kshard"
json.dump(m, open(sys.argv[2], "w"))
PY
bad_train "a manifest naming a file outside the folder" "$M" "a name inside the folder"
"$PY" - "$T/good.json" "$M" <<'PY'
import json, sys
m = json.load(open(sys.argv[1])); m["splits"]["train"]["shards"][0]["count"] -= 1; m["splits"]["train"]["count"] -= 1
json.dump(m, open(sys.argv[2], "w"))
PY
bad_train "a shard holding other than the manifest's count" "$S" "the manifest says"
"$PY" - "$T/good.json" "$M" <<'PY'
import json, sys
m = json.load(open(sys.argv[1])); m["version"] = 7
json.dump(m, open(sys.argv[2], "w"))
PY
bad_train "a manifest of another version" "$M" "version"
cp "$T/good.json" "$M"
rm "$S"
bad_train "a missing shard" "$S"
cp "$T/good.kshard" "$S"
expect 0 "the repaired copy trains again" -- "$KILN" train "${Q[@]}" --data "$T/bad" --resize 28 --max-steps 2 --workers 0

# ---- bad options ----
touch "$T/afile"
expect 2 "--cache under a file" "--cache" "$T/afile/c" -- "$KILN" bench loader --data "$T/enc" --cache "$T/afile/c" --channels 1
expect 2 "--cache on IDX data" "--cache" "IDX" -- "$KILN" bench loader --data "$T/idx" --cache "$T/c2"
expect 2 "pack over existing shards" "$T/enc/index.json" "already exists" -- \
    "$KILN" pack --from "$T/jpg" --to "$T/enc" --format shard
expect 2 "--size from an image folder without --decoded" "--decoded" -- "$KILN" pack --from "$T/jpg" --to "$T/x" --format shard --size 16
expect 2 "--shard-size 0 is the default, -3 is not" "--shard-size" -- "$KILN" pack --from "$T/idx" --to "$T/y" --format shard --shard-size -3
expect 2 "pack --format jpeg from shards" "--from $T/enc" "IDX" -- "$KILN" pack --from "$T/enc" --to "$T/z" --format jpeg
expect 2 "pack shards from shards" "--from $T/enc" -- "$KILN" pack --from "$T/enc" --to "$T/z" --format shard
check "a refused pack leaves no folder" test ! -e "$T/z"
expect 2 "--val-split on shards" "--val-split" -- "$KILN" train "${Q[@]}" --data "$T/enc" --val-split 0.1 --max-steps 1
V=$(ls "$T/jpg/train/3" | head -n 1)
head -c 300 "$T/jpg/train/3/$V" >"$T/cut.jpg" && cp "$T/cut.jpg" "$T/jpg/train/3/$V"
expect 2 "pack --decoded from a folder with a corrupt JPEG" "$T/jpg/train/3/$V" -- \
    "$KILN" pack --from "$T/jpg" --to "$T/part" --format shard --decoded --shard-size 64
check "a failed pack leaves no manifest and no shard" test -z "$(ls "$T/part" 2>/dev/null)"
expect 2 "pack --format png from a folder with a corrupt JPEG" "$T/jpg/train/3/$V" -- \
    "$KILN" pack --from "$T/jpg" --to "$T/part2" --format png

harness_finish
