#!/usr/bin/env bash
# The HTTP source against a real web server: Debian's nginx, started here in
# the foreground (one process, no daemon) on a free loopback port with a
# temporary configuration whose root, pid, log and temporary files all live
# in the scratch folder (so it runs as root or not), stopped at exit.
#
# Checks: random byte ranges of a file read over HTTP equal the file's bytes
# (test_http_source --ranges: one at a time, from four threads, after
# read-ahead hints); a wrong path (404) exits 2 naming the URL; a server
# that is not there exits 2 naming the URL; a slow server (nginx limit_rate)
# times out with a clear error instead of hanging; a server that ignores
# ranges (max_ranges 0) is read whole with a warning, or refused when the
# object is larger than KILN_HTTP_WHOLE_MAX_MB.
#
# Needs $KILN_BIN (ctest sets it) and nginx (install-deps --test installs
# nginx-light); skipped (exit 77) without nginx.
set -u

. "$(dirname "$0")/harness.sh"
harness_init test_http
export KILN_CACHE_DIR=
SRC_TEST=${HTTP_SOURCE_TEST:-$(dirname "$KILN")/test_http_source}

NGINX=$(command -v nginx || echo /usr/sbin/nginx)
if [ ! -x "$NGINX" ]; then
    echo "test_http: skipped: nginx is not installed (scripts/install-deps.sh --test installs nginx-light)"
    exit 77
fi

# ---- nginx on loopback ----
WWW="$T/www"
NG="$T/nginx"
mkdir -p "$WWW" "$NG/tmp"
NGINX_PID=
stop_nginx() {
    if [ -n "$NGINX_PID" ]; then
        kill "$NGINX_PID" 2>/dev/null
        wait "$NGINX_PID" 2>/dev/null
        NGINX_PID=
    fi
}
trap 'stop_nginx; rm -rf "$T"' EXIT

free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# /      the files, ranges honoured
# /slow/ the same at 64 bytes/s after the first 1 KiB (a stalled server)
# /noranges/ the same, ranges ignored (200 with the whole file)
start_nginx() {
    local try
    for try in 1 2 3; do
        PORT=$(free_port)
        cat >"$NG/nginx.conf" <<EOF
daemon off;
master_process off;
worker_processes 1;
pid $NG/nginx.pid;
error_log $NG/error.log;
events { worker_connections 512; }
http {
    access_log off;
    client_body_temp_path $NG/tmp/body;
    proxy_temp_path $NG/tmp/proxy;
    fastcgi_temp_path $NG/tmp/fastcgi;
    uwsgi_temp_path $NG/tmp/uwsgi;
    scgi_temp_path $NG/tmp/scgi;
    default_type application/octet-stream;
    keepalive_requests 1000000;
    keepalive_timeout 60s;
    server {
        listen 127.0.0.1:$PORT;
        root $WWW;
        location /slow/ { alias $WWW/; limit_rate_after 1k; limit_rate 64; }
        location /noranges/ { alias $WWW/; max_ranges 0; }
    }
}
EOF
        "$NGINX" -p "$NG" -e "$NG/error.log" -c "$NG/nginx.conf" &
        NGINX_PID=$!
        local i
        for i in $(seq 50); do
            if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
                URL="http://127.0.0.1:$PORT"
                return 0
            fi
            kill -0 "$NGINX_PID" 2>/dev/null || break
            sleep 0.1
        done
        stop_nginx
    done
    echo "test_http: FAIL: nginx did not start:" >&2
    tail -n 5 "$NG/error.log" >&2
    exit 1
}
start_nginx

# ---- byte ranges of a file ----
head -c 300000 /dev/urandom >"$WWW/blob.bin"
SEED=$(od -An -tu4 -N4 /dev/urandom | tr -d ' ')
expect 0 "random ranges over HTTP equal the file (seed $SEED)" -- "$SRC_TEST" --ranges "$URL/blob.bin" "$WWW/blob.bin" "$SEED"
expect 0 "a server that ignores ranges: the file read whole, with a warning" "ignores Range requests" -- \
    "$SRC_TEST" --ranges "$URL/noranges/blob.bin" "$WWW/blob.bin" "$SEED"
expect 1 "ranges ignored and the file over KILN_HTTP_WHOLE_MAX_MB: refused" "$URL/noranges/blob.bin" "KILN_HTTP_WHOLE_MAX_MB" -- \
    env KILN_HTTP_WHOLE_MAX_MB=0 "$SRC_TEST" --ranges "$URL/noranges/blob.bin" "$WWW/blob.bin" "$SEED"
EXPECT_TIMEOUT=60 expect 1 "a slow server times out, naming the URL" "$URL/slow/blob.bin" "too slow" -- \
    env KILN_HTTP_TIMEOUT=1 "$SRC_TEST" --ranges "$URL/slow/blob.bin" "$WWW/blob.bin" "$SEED"
expect 1 "a wrong path: 404, named" "$URL/nothing.bin" "404" -- "$SRC_TEST" --ranges "$URL/nothing.bin" "$WWW/blob.bin" 1

harness_finish
