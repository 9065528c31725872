#!/usr/bin/env bash
# The HTTP source against a real web server: Debian's nginx, started here in
# the foreground (one process, no daemon) on a free loopback port with a
# temporary configuration whose root, pid, log and temporary files all live
# in the scratch folder (so it runs as root or not), stopped at exit.
#
# Checks: random byte ranges of a file read over HTTP equal the file's bytes
# (test_http_source --ranges: one at a time, from four threads, after
# read-ahead hints, several ranges per request or, where the server refuses
# that, one); a whole shuffled epoch of shards over HTTP gives the batches
# of the same shards on disk (test_http_source --epoch, 0 and 2 workers),
# and `kiln train` the same loss; a wrong path (404) and a server that is
# not there exit 2 naming the URL; a slow server (nginx limit_rate) times
# out with a clear error instead of hanging; a server that ignores ranges
# (max_ranges 0) is read whole with a warning, or refused when the object is
# larger than KILN_HTTP_WHOLE_MAX_MB; the server killed during `kiln train
# --save-every`: exit 2 naming the URL, the last checkpoint loads; over https
# (a self-signed certificate trusted through KILN_HTTP_CA_FILE) ranges and an
# epoch read the same, and an untrusted certificate is refused.
#
# Needs $KILN_BIN (ctest sets it) and nginx (install-deps --test installs
# nginx-light); skipped (exit 77) without nginx.
set -u

. "$(dirname "$0")/harness.sh"
harness_init test_http
export KILN_CACHE_DIR=
SRC_TEST=${HTTP_SOURCE_TEST:-$(dirname "$KILN")/test_http_source}

if ! command -v nginx >/dev/null && [ ! -x /usr/sbin/nginx ]; then
    echo "test_http: skipped: nginx is not installed (scripts/install-deps.sh --test installs nginx-light)"
    exit 77
fi

# ---- nginx on loopback ----
# /          the files, ranges honoured
# /slow/     the same at 64 bytes/s (a stalled server)
# /noranges/ the same, ranges ignored (200 with the whole file)
# /onerange/ the same, one range per request (more: 200 with the whole file)
. "$(dirname "$0")/nginx.sh"
WWW="$T/www"
mkdir -p "$WWW"
trap 'nginx_stop; rm -rf "$T"' EXIT
free_port() { nginx_free_port; }
# https on a second port, with a self-signed certificate for 127.0.0.1 (when openssl is there)
TLS=""
if command -v openssl >/dev/null && openssl req -x509 -newkey rsa:2048 -nodes -keyout "$T/key.pem" -out "$T/cert.pem" \
    -days 2 -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 >/dev/null 2>&1; then
    TLS_PORT=$(free_port)
    TLS="listen 127.0.0.1:$TLS_PORT ssl; ssl_certificate $T/cert.pem; ssl_certificate_key $T/key.pem;"
fi
nginx_start "$T/nginx" "$WWW" "$TLS
        location /slow/ { alias $WWW/; limit_rate 64; }
        location /noranges/ { alias $WWW/; max_ranges 0; }
        location /onerange/ { alias $WWW/; max_ranges 1; }" || exit 1
URL=$NGINX_URL

# ---- byte ranges of a file ----
head -c 300000 /dev/urandom >"$WWW/blob.bin"
SEED=$(od -An -tu4 -N4 /dev/urandom | tr -d ' ')
expect 0 "random ranges over HTTP equal the file (seed $SEED)" -- "$SRC_TEST" --ranges "$URL/blob.bin" "$WWW/blob.bin" "$SEED"
expect 0 "one range per request: the read-ahead falls back to single ranges" -- \
    "$SRC_TEST" --ranges "$URL/onerange/blob.bin" "$WWW/blob.bin" "$SEED"
expect 0 "a server that ignores ranges: the file read whole, with a warning" "ignores Range requests" -- \
    "$SRC_TEST" --ranges "$URL/noranges/blob.bin" "$WWW/blob.bin" "$SEED"
expect 1 "ranges ignored and the file over KILN_HTTP_WHOLE_MAX_MB: refused" "$URL/noranges/blob.bin" "KILN_HTTP_WHOLE_MAX_MB" -- \
    env KILN_HTTP_WHOLE_MAX_MB=0 "$SRC_TEST" --ranges "$URL/noranges/blob.bin" "$WWW/blob.bin" "$SEED"
EXPECT_TIMEOUT=60 expect 1 "a slow server times out, naming the URL" "$URL/slow/blob.bin" "too slow" -- \
    env KILN_HTTP_TIMEOUT=1 "$SRC_TEST" --ranges "$URL/slow/blob.bin" "$WWW/blob.bin" "$SEED"
expect 1 "a wrong path: 404, named" "$URL/nothing.bin" "404" -- "$SRC_TEST" --ranges "$URL/nothing.bin" "$WWW/blob.bin" 1
if [ -n "$TLS" ]; then
    TLS_URL="https://127.0.0.1:$TLS_PORT"
    expect 0 "https: random ranges equal the file (KILN_HTTP_CA_FILE trusts the certificate)" -- \
        env KILN_HTTP_CA_FILE="$T/cert.pem" "$SRC_TEST" --ranges "$TLS_URL/blob.bin" "$WWW/blob.bin" "$SEED"
    expect 1 "https: a certificate nobody vouches for is refused, naming the URL" "$TLS_URL/blob.bin" "certificate" -- \
        "$SRC_TEST" --ranges "$TLS_URL/blob.bin" "$WWW/blob.bin" "$SEED"
else
    echo "test_http: note: openssl absent; the https checks skipped"
fi

if [ ! -d "$DATA" ]; then
    echo "test_http: note: $DATA absent (apt-get install dataset-fashion-mnist); the shard checks skipped"
    harness_finish
    exit
fi
field() { "$PY" -c "import json,sys; print(json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]).get(sys.argv[2], ''))" "$T/out" "$1" 2>/dev/null; }

# ---- shards over HTTP: the same batches and the same training as on disk ----
small_idx "$T/idx" 2000 200
expect 0 "pack a JPEG folder" -- "$KILN" pack --from "$T/idx" --to "$T/jpg" --format jpeg --size 32
expect 0 "pack it as shards of 300" -- "$KILN" pack --from "$T/jpg" --to "$WWW/sh" --format shard --shard-size 300
for w in 0 2; do
    expect 0 "an epoch of the shards on disk, $w workers" -- "$SRC_TEST" --epoch "$WWW/sh" $w
    want=$(cat "$T/out")
    for loc in "" onerange/ noranges/; do
        expect 0 "an epoch over HTTP (/$loc), $w workers" -- "$SRC_TEST" --epoch "$URL/${loc}sh/" $w
        check "the epoch over HTTP (/$loc, $w workers) has the batches of the one on disk" test "$(cat "$T/out")" = "$want"
    done
done
check "the whole epoch was checked (63 batches)" test "${want%% *}" = 63
if [ -n "$TLS" ]; then
    expect 0 "an epoch over https, 2 workers" -- env KILN_HTTP_CA_FILE="$T/cert.pem" "$SRC_TEST" --epoch "$TLS_URL/sh/" 2
    check "the epoch over https has the batches of the one on disk" test "$(cat "$T/out")" = "$want"
fi
# --no-autotune: without the autotune cache (KILN_CACHE_DIR= above) each run would time the convolution
# algorithms afresh, and a different choice rounds differently
Q=(--quiet --json --model mnist-cnn --batch-size 32 --threads 2 --channels 1 --resize 28 --workers 2 --seed 3 --no-autotune)
expect 0 "train on the shards on disk" -- "$KILN" train "${Q[@]}" --data "$WWW/sh" --max-steps 40
loss=$(field final_loss)
acc=$(field test_accuracy)
expect 0 "train on the shards over HTTP" -- "$KILN" train "${Q[@]}" --data "$URL/sh/" --max-steps 40
got="$(field final_loss) $(field test_accuracy)"
check "the same loss and accuracy over HTTP (disk: $loss $acc, HTTP: $got)" test "$got" = "$loss $acc"
expect 0 "train over a server that ignores ranges: a warning" "ignores Range requests" -- \
    "$KILN" train "${Q[@]}" --data "$URL/noranges/sh/" --max-steps 40
check "the same loss when ranges are ignored" test "$(field final_loss)" = "$loss"

# ---- servers that fail: exit 2, the URL named, never a hang ----
expect 2 "a wrong path: 404 naming index.json's URL" "$URL/nothere/index.json" "404" -- \
    "$KILN" train "${Q[@]}" --data "$URL/nothere/" --max-steps 2
rm "$WWW/sh/train-00002.kshard"
expect 2 "a shard missing on the server: 404 naming it" "$URL/sh/train-00002.kshard" "404" -- \
    "$KILN" train "${Q[@]}" --data "$URL/sh" --max-steps 2
rm -r "$WWW/sh" && "$KILN" pack --from "$T/jpg" --to "$WWW/sh" --format shard --shard-size 300 2>/dev/null
EXPECT_TIMEOUT=60 expect 2 "a slow server: a timeout naming the URL" "$URL/slow/sh/" "too slow" -- \
    env KILN_HTTP_TIMEOUT=1 "$KILN" train "${Q[@]}" --data "$URL/slow/sh/" --max-steps 2
nobody=$(free_port)
expect 2 "no server on the port: the URL named" "http://127.0.0.1:$nobody/sh/index.json" "connect" -- \
    "$KILN" train "${Q[@]}" --data "http://127.0.0.1:$nobody/sh/" --max-steps 2

# ---- the server killed during training: exit 2, the last checkpoint intact ----
"$KILN" train "${Q[@]}" --data "$URL/sh/" --epochs 1000 --save-every 20 --save "$T/run.safetensors" \
    >"$T/train.out" 2>"$T/train.err" &
train_pid=$!
for i in $(seq 600); do [ -f "$T/run.safetensors" ] && break; sleep 0.1; done
check "a checkpoint was saved while training over HTTP" test -f "$T/run.safetensors"
nginx_stop
for i in $(seq 600); do kill -0 $train_pid 2>/dev/null || break; sleep 0.1; done
if kill -0 $train_pid 2>/dev/null; then
    bad "the server killed mid-epoch: training still runs after 60 s (a hang)"
    kill -9 $train_pid
fi
wait $train_pid
rc=$?
check "the server killed mid-epoch: exit 2 (got $rc)" test $rc = 2
check "the server killed mid-epoch: the error names the URL" grep -qF "$URL/sh/" "$T/train.err"
[ -n "${HTTP_TEST_VERBOSE:-}" ] && cat "$T/train.err" >&2
grep -qF "$URL/sh/" "$T/train.err" || sed 's/^/    stderr: /' "$T/train.err" | tail -n 5 >&2
expect 0 "the last checkpoint loads and evaluates" -- "$KILN" eval --model mnist-cnn --data "$T/jpg" --load "$T/run.safetensors" \
    --resize 28 --channels 1 --json

harness_finish
