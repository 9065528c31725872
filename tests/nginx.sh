# Debian's nginx on loopback for the HTTP tests and benchmark (sourced):
# one foreground process (no daemon, no master) on a free port, with a
# temporary configuration whose pid, log and temporary files all live in a
# scratch folder, so it runs as root or not and leaves nothing behind.
#
#   . tests/nginx.sh
#   nginx_start SCRATCH ROOT [LOCATIONS]   sets NGINX_URL (http://127.0.0.1:PORT) and NGINX_PID
#   nginx_stop                             kills it and waits (call it from an EXIT trap too)
#
# LOCATIONS is extra configuration inside the server block. Needs nginx
# (install-deps --test installs nginx-light) and python3 (a free port).

NGINX_BIN=$(command -v nginx || echo /usr/sbin/nginx)
NGINX_PID=

nginx_stop() {
    if [ -n "$NGINX_PID" ]; then
        kill "$NGINX_PID" 2>/dev/null
        wait "$NGINX_PID" 2>/dev/null
        NGINX_PID=
    fi
}

nginx_free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

nginx_start() {
    local ng=$1 root=$2 locations=${3:-} try i port
    mkdir -p "$ng/tmp"
    for try in 1 2 3; do # a port taken between choosing and binding: another one
        port=$(nginx_free_port)
        cat >"$ng/nginx.conf" <<CONF
daemon off;
master_process off;
worker_processes 1;
pid $ng/nginx.pid;
error_log $ng/error.log;
events { worker_connections 512; }
http {
    access_log off;
    client_body_temp_path $ng/tmp/body;
    proxy_temp_path $ng/tmp/proxy;
    fastcgi_temp_path $ng/tmp/fastcgi;
    uwsgi_temp_path $ng/tmp/uwsgi;
    scgi_temp_path $ng/tmp/scgi;
    default_type application/octet-stream;
    keepalive_requests 1000000;
    keepalive_timeout 60s;
    server {
        listen 127.0.0.1:$port;
        root $root;
        $locations
    }
}
CONF
        "$NGINX_BIN" -p "$ng" -e "$ng/error.log" -c "$ng/nginx.conf" &
        NGINX_PID=$!
        for i in $(seq 50); do
            if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
                NGINX_URL="http://127.0.0.1:$port"
                return 0
            fi
            kill -0 "$NGINX_PID" 2>/dev/null || break
            sleep 0.1
        done
        nginx_stop
    done
    echo "nginx did not start:" >&2
    tail -n 5 "$ng/error.log" >&2
    return 1
}
