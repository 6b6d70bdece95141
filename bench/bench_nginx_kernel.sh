#!/bin/sh
# Debian's nginx (nginx-light) under `snapprof record -F 1000`, 2 workers,
# 1500 requests over loopback; prints `go tool pprof -top` of each worker.
# Usage: bench_nginx_kernel.sh BUILD_DIR [user]   (user: run everything as
# nobody; else as root, with the workers switching to www-data and the
# output in a root-owned 0755 directory). SNAPPROF_KERNEL is passed on.
set -eu
build=$1
as_user=${2:-}
dir=$(mktemp -d /tmp/snapprof-nginx-XXXXXX)
chmod 0755 "$dir"
mkdir "$dir/out" "$dir/run"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
user_line="user www-data;"
run=""
if [ -n "$as_user" ]; then
    user_line=""
    chmod 0777 "$dir/out" "$dir/run"
    run="setpriv --reuid=65534 --regid=65534 --clear-groups"
fi
mkdir -p "$dir/html" && echo hello > "$dir/html/index.html" && chmod -R a+rX "$dir/html"
cat > "$dir/nginx.conf" <<CONF
$user_line
worker_processes 2;
daemon off;
master_process on;
pid $dir/run/nginx.pid;
error_log $dir/run/error.log;
events { worker_connections 256; }
http {
    access_log off;
    client_body_temp_path $dir/run/body;
    proxy_temp_path $dir/run/proxy;
    server { listen 127.0.0.1:$port; root $dir/html; }
}
CONF
$run "$build/cli/snapprof" record -F 1000 -o "$dir/out/n.pb.gz" -- /usr/sbin/nginx -c "$dir/nginx.conf" -p "$dir/run" > "$dir/record.txt" 2>&1 &
i=0
while ! curl -s "http://127.0.0.1:$port/" >/dev/null 2>&1; do
    i=$((i + 1)); [ $i -gt 300 ] && { echo "nginx did not start"; cat "$dir/record.txt"; exit 1; }
    sleep 0.1
done
n=1
while [ $n -lt 1500 ]; do
    # 50 URLs per curl: keep-alive over loopback
    urls=""; for k in $(seq 1 50); do urls="$urls http://127.0.0.1:$port/"; done
    curl -s $urls > /dev/null
    n=$((n + 50))
done
kill -QUIT "$(cat "$dir/run/nginx.pid")"
wait
cat "$dir/record.txt"
ls -la "$dir/out"
for f in "$dir"/out/n.pb.gz.*; do
    echo "== $f"
    go tool pprof -top -nodecount=12 "$f" 2>/dev/null | sed -n '1,20p'
done
echo "dir: $dir"
