#!/usr/bin/env bash
# Where loading time goes: `kiln bench loader` on the 64x64 RGB JPEG folder of
# bench/loader.sh, on the same images packed as encoded shards (the JPEG
# bytes, memory-mapped) and as decoded shards (pixels, no decoding), and with
# --cache (two whole epochs from the JPEG folder: the first decodes and fills
# the cache, the second reads it). Transforms as loader.sh: RandomResizedCrop
# (56, scale 0.35-1), flip, Normalize(ImageNet), batch 64; workers 0 and 2;
# the cache also with deterministic transforms (Resize 32, CenterCrop 28,
# flip), where it keeps the cropped pixels.
# Rounds interleave the sources so drift in machine load hits all alike; the
# table gives medians; an uncached whole epoch shows what filling the cache
# costs. The issue's target: the cache's second epoch loads at
# least 2x faster than its first. `make bench-shards` runs it.
#
#   REPEAT=N      rounds (default 3)
#   BATCHES=N     timed batches per setting (default 200; the cache rows time whole epochs)
#   KILN=PATH     the kiln program (default build/kiln)
#   DATA_DIR=DIR  the JPEG folder (default ~/.cache/kiln/bench/fmnist-jpeg64, shared with loader.sh);
#                 the shards are made once beside it (DIR-shards, DIR-shards-decoded)
set -euo pipefail

NAME=shards REPEAT="${REPEAT:-3}" BATCHES="${BATCHES:-200}"
. "$(dirname "$0")/common.sh"
bench_init
DATA_DIR="${DATA_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kiln/bench/fmnist-jpeg64}"

# the folder and the shards, made once (a shard folder is complete when its index.json exists: it is written last)
jpeg_folder "$DATA_DIR" 64 3
ENC="$DATA_DIR-shards" DEC="$DATA_DIR-shards-decoded"
[ -f "$ENC/index.json" ] || { rm -rf "$ENC"; "$KILN" pack --from "$DATA_DIR" --to "$ENC" --format shard; }
[ -f "$DEC/index.json" ] || { rm -rf "$DEC"; "$KILN" pack --from "$DATA_DIR" --to "$DEC" --format shard --decoded; }

RANDOM_CROPS=(--random-resized-crop 56,0.35,1 --hflip --normalize imagenet --channels 3)
FIXED=(--resize 32 --center-crop 28 --hflip --normalize imagenet --channels 3)
TRANSFORMS=("${RANDOM_CROPS[@]}")
mkdir -p bench/results
OUT="bench/results/shards-$(date +%Y%m%d-%H%M%S).jsonl"
: > "$OUT"
CACHE=$(mktemp -d)
trap 'rm -rf "$CACHE"' EXIT

# $1: the source's name in the table, then kiln bench loader's arguments
run() {
    local name=$1 lines
    shift
    lines=$("$KILN" bench loader --batch-size 64 --seed "$i" --json "${TRANSFORMS[@]}" "$@" 2>/dev/null) \
        || die "kiln bench loader $* failed"
    echo "$lines" | sed "s/^{/{\"source\": \"$name\", \"repeat\": $i, /" >> "$OUT"
}

echo "shards bench on $DATA_DIR: $REPEAT round(s), workers 0 and 2" >&2
for i in $(seq 1 "$REPEAT"); do
    echo "  round $i/$REPEAT" >&2
    for w in 0 2; do
        run "jpeg folder" --data "$DATA_DIR" --workers "$w" --batches "$BATCHES" --warmup 20
        run "encoded shards" --data "$ENC" --workers "$w" --batches "$BATCHES" --warmup 20
        run "decoded shards" --data "$DEC" --workers "$w" --batches "$BATCHES" --warmup 20
        run "no cache" --data "$DATA_DIR" --workers "$w" --epochs 1
        rm -rf "${CACHE:?}"/*
        run "cache" --data "$DATA_DIR" --workers "$w" --epochs 2 --cache "$CACHE"
        rm -rf "${CACHE:?}"/*
        TRANSFORMS=("${FIXED[@]}")
        run "cache, fixed" --data "$DATA_DIR" --workers "$w" --epochs 2 --cache "$CACHE"
        TRANSFORMS=("${RANDOM_CROPS[@]}")
    done
done

"$PY" - "$OUT" <<'PYEOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def med(src, w, epoch=None):
    xs = [r["images_per_s"] for r in rows if r["source"] == src and r["workers"] == w and r.get("epoch") == epoch]
    return statistics.median(xs) if xs else float("nan")
print(f"{'source (images/s, medians)':<32} {'workers 0':>10} {'workers 2':>10}")
for src in ("jpeg folder", "encoded shards", "decoded shards"):
    print(f"{src:<32} {med(src, 0):>10.0f} {med(src, 2):>10.0f}")
print(f"{'jpeg folder, a whole epoch':<32} {med('no cache', 0, 1):>10.0f} {med('no cache', 2, 1):>10.0f}")
for e in (1, 2):
    print(f"{'--cache, epoch %d (whole epoch)' % e:<32} {med('cache', 0, e):>10.0f} {med('cache', 2, e):>10.0f}")
for e in (1, 2):
    print(f"{'--cache, Resize+CenterCrop, ep. %d' % e:<32} {med('cache, fixed', 0, e):>10.0f} {med('cache, fixed', 2, e):>10.0f}")
print("\ntarget: the cache's second epoch >= 2x its first")
for src, what in (("cache", "random crops"), ("cache, fixed", "Resize 32 + CenterCrop 28")):
    for w in (0, 2):
        r = med(src, w, 2) / med(src, w, 1)
        print(f"  {what}, workers {w}: {r:.2f}x   {'MET' if r >= 2 else 'NOT MET'}")
PYEOF
echo "raw JSON lines: $OUT" >&2
