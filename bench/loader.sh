#!/usr/bin/env bash
# kiln vs PyTorch: the guide's num_workers x pin_memory table for data loading
# alone (no model). Both sides read the same 64x64 RGB JPEG folder made from
# Fashion-MNIST's 60,000 training images (DIR/train/<label>/<index>.jpg, made
# once by `kiln pack` into a cache folder) with the same transforms:
# RandomResizedCrop(56, scale 0.35-1), RandomHorizontalFlip, ToTensor,
# Normalize(ImageNet), batch 64, shuffled. kiln: `kiln bench loader`; PyTorch:
# DataLoader over torchvision's ImageFolder (the shared peer load_bench.py,
# 20 warm-up and 200 timed batches per setting). Rounds alternate kiln and
# PyTorch so drift in machine load hits both alike; the table gives medians.
# `make bench-loader` runs it.
#
#   REPEAT=N      rounds (default 3)
#   BATCHES=N     timed batches per setting, both sides (default 200)
#   KILN=PATH     the kiln program (default build/kiln)
#   DATA_DIR=DIR  the JPEG folder (default ~/.cache/kiln/bench/fmnist-jpeg64)
#   KILN_SHARED   the shared folder holding bench/peers (default ../shared)
set -euo pipefail

NAME=loader REPEAT="${REPEAT:-3}" BATCHES="${BATCHES:-200}"
. "$(dirname "$0")/common.sh"
bench_init
SHARED="${KILN_SHARED:-$ROOT/../shared}"
PEER="$SHARED/bench/peers/load_bench.py"
DATA_DIR="${DATA_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kiln/bench/fmnist-jpeg64}"
[ -f "$PEER" ] || die "$PEER not found: set KILN_SHARED to the folder holding bench/peers"
[ -x "$PY" ] || die "$PY not found (the peer needs Debian's python3-torch and python3-torchvision: scripts/install-deps.sh --bench)"

jpeg_folder "$DATA_DIR" 64 3

TRANSFORMS=(--random-resized-crop 56,0.35,1 --hflip --normalize imagenet --channels 3)
mkdir -p bench/results
OUT="bench/results/loader-$(date +%Y%m%d-%H%M%S).jsonl"
: > "$OUT"

# kiln at workers 0,1,2,4 with pin off or on ($1: "" or --pin-memory)
run_kiln() {
    local lines
    lines=$("$KILN" bench loader --data "$DATA_DIR" --workers 0,1,2,4 $1 --batch-size 64 --batches "$BATCHES" \
            --warmup 20 --seed "$i" --json "${TRANSFORMS[@]}") || die "kiln bench loader failed"
    echo "$lines" | sed "s/^{/{\"framework\": \"kiln\", \"repeat\": $i, /" >> "$OUT"
}

# PyTorch's whole grid once (its RESULT lines, renamed to kiln's keys)
run_torch() {
    local log; log=$(mktemp)
    JPEG_ROOT="$DATA_DIR" PYTHONPATH="$(dirname "$PEER")" "$PY" "$PEER" "$BATCHES" 1 > "$log" 2>&1 \
        || { cat "$log" >&2; rm -f "$log"; die "the PyTorch peer failed"; }
    "$PY" - "$log" "$i" >> "$OUT" <<'PYEOF'
import json, sys
for line in open(sys.argv[1]):
    if line.startswith("RESULT "):
        r = json.loads(line[7:])
        print(json.dumps({"framework": "pytorch", "repeat": int(sys.argv[2]), "workers": r["num_workers"],
                          "pin_memory": r["pin_memory"], "images_per_s": r["img_per_s"], "batches": r["batches"]}))
PYEOF
    rm -f "$log"
}

echo "loader bench on $DATA_DIR: $REPEAT round(s), $BATCHES batches per setting, kiln and PyTorch interleaved" >&2
for i in $(seq 1 "$REPEAT"); do
    echo "  round $i/$REPEAT: kiln ..." >&2
    run_kiln ""
    run_kiln --pin-memory
    echo "  round $i/$REPEAT: pytorch ..." >&2
    run_torch
done

"$PY" - "$OUT" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def med(fw, w, pin):
    xs = [r["images_per_s"] for r in rows if r["framework"] == fw and r["workers"] == w and r["pin_memory"] == pin]
    return statistics.median(xs) if xs else float("nan")
print(f"{'workers':>7} {'pin':>4} {'kiln img/s':>11} {'PyTorch img/s':>14} {'ratio':>7}")
ratio = {}
for w in (0, 1, 2, 4):
    for pin in (False, True):
        k, p = med("kiln", w, pin), med("pytorch", w, pin)
        ratio[(w, pin)] = k / p if p > 0 else float("nan")
        print(f"{w:>7} {'on' if pin else 'off':>4} {k:>11.0f} {p:>14.0f} {ratio[(w, pin)]:>6.2f}x")
def verdict(ok): return "MET" if ok else "NOT MET"
print("\ntargets (medians, pin off)          ratio   target")
for w in (2, 0):
    r = ratio[(w, False)]
    print(f"  kiln / PyTorch at {w} workers      {r:>6.2f}x   >= 3x    {verdict(r >= 3)}")
EOF
echo "raw JSON lines: $OUT" >&2
