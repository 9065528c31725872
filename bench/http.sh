#!/usr/bin/env bash
# Shards over HTTP against the same shards on disk: `kiln bench loader` on
# Fashion-MNIST's 60,000 training images as 64x64 RGB JPEGs packed into
# shards (made once by `kiln pack` into a cache folder), read from the local
# folder and from Debian's nginx on loopback (tests/nginx.sh), with the
# loader benchmark's transforms: RandomResizedCrop(56, scale 0.35-1), flip,
# Normalize(ImageNet), batch 64, shuffled. Rounds alternate local and HTTP
# so drift in machine load hits both alike; the table gives medians and the
# issue's target, HTTP >= 80% of local. `make bench-http` runs it.
#
#   REPEAT=N        rounds (default 5)
#   BATCHES=N       timed batches per setting (default 300)
#   WORKERS=LIST    loader workers (default 0,2)
#   SHARD_SIZE=N    samples per shard (default kiln pack's)
#   KILN=PATH       the kiln program (default build/kiln)
#   DATA_DIR=DIR    the cache folder (default ~/.cache/kiln/bench/fmnist-shard64)
set -euo pipefail

ROOT="$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
cd "$ROOT"
PY=python3
KILN="${KILN:-build/kiln}"
REPEAT="${REPEAT:-5}"
BATCHES="${BATCHES:-300}"
WORKERS="${WORKERS:-0,2}"
DATA_DIR="${DATA_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kiln/bench/fmnist-shard64${SHARD_SIZE:+-$SHARD_SIZE}}"

die() { echo "http: $*" >&2; exit 1; }
[ -x "$KILN" ] || die "$KILN not found: run 'make' (or 'make bench-http', which builds it first)"
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || die "nginx not found: scripts/install-deps.sh --test installs nginx-light"
[[ "$REPEAT" =~ ^[1-9][0-9]*$ ]] || die "REPEAT must be a positive integer (got '$REPEAT')"

# the shards, made once: a half-made folder (no marker) is made again
if [ ! -f "$DATA_DIR/.complete" ]; then
    echo "http: packing Fashion-MNIST as 64x64 RGB JPEG shards into $DATA_DIR ..." >&2
    rm -rf "$DATA_DIR"
    mkdir -p "$DATA_DIR"
    "$KILN" pack --from fashion-mnist --to "$DATA_DIR/jpg" --format jpeg --size 64 --channels 3
    mkdir -p "$DATA_DIR/www"
    "$KILN" pack --from "$DATA_DIR/jpg" --to "$DATA_DIR/www/shards" --format shard ${SHARD_SIZE:+--shard-size "$SHARD_SIZE"}
    rm -rf "$DATA_DIR/jpg"
    touch "$DATA_DIR/.complete"
fi

S=$(mktemp -d /tmp/kiln_bench_http.XXXXXX)
. tests/nginx.sh
trap 'nginx_stop; rm -rf "$S"' EXIT
nginx_start "$S/nginx" "$DATA_DIR/www" || die "nginx did not start"

mkdir -p bench/results
OUT="bench/results/http-$(date +%Y%m%d-%H%M%S).jsonl"
: > "$OUT"
run() { # SOURCE DATA
    "$KILN" bench loader --data "$2" --workers "$WORKERS" --batch-size 64 --batches "$BATCHES" --warmup 20 --seed "$i" \
        --json --random-resized-crop 56,0.35,1 --hflip --normalize imagenet --channels 3 \
        | sed "s/^{/{\"source\": \"$1\", \"repeat\": $i, /" >> "$OUT" || die "kiln bench loader failed on $2"
}
echo "http bench: $REPEAT round(s), $BATCHES batches per setting, workers $WORKERS, local and HTTP interleaved" >&2
for i in $(seq 1 "$REPEAT"); do
    run local "$DATA_DIR/www/shards"
    run http "$NGINX_URL/shards/"
done

"$PY" - "$OUT" <<'PYEOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print(f"{'workers':>7} {'local img/s':>12} {'HTTP img/s':>11} {'HTTP/local':>11}   target   runs")
for w in sorted({r["workers"] for r in rows}):
    med = lambda s: statistics.median(r["images_per_s"] for r in rows if r["source"] == s and r["workers"] == w)
    loc, web = med("local"), med("http")
    n = sum(1 for r in rows if r["source"] == "http" and r["workers"] == w)
    print(f"{w:>7} {loc:>12.0f} {web:>11.0f} {web / loc:>10.0%}   >= 80%  {'MET' if web >= 0.8 * loc else 'NOT MET':>7}  {n}")
PYEOF
echo "raw JSON lines: $OUT" >&2
