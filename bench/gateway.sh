#!/usr/bin/env bash
# The gateway's reason to exist, measured: a client that opens a new connection per
# request (the PHP/CGI pattern), direct to a TLS upstream (a TLS handshake each time)
# vs through `switchyard gateway` (plain TCP on loopback, the upstream's warm pooled
# connections) vs through nginx as a reverse proxy with upstream keep-alive. The
# upstream is nginx over TLS (HTTP/1.1 and h2 by ALPN). One run, same machine, each
# client sequential; the medians of per-request wall time are compared.
#
#   bench/gateway.sh [REQUESTS]       (default 400; needs nginx, openssl, python3)
set -euo pipefail
n=${1:-400}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; [ -f "$work/nginx.pid" ] && kill "$(cat "$work/nginx.pid")" 2>/dev/null; rm -rf "$work"' EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
up=$(free_port) rp=$(free_port) gw=$(free_port)

# A CA and a certificate for localhost.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=bench-ca \
    -keyout "$work/ca.key" -out "$work/ca.pem" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=localhost \
    -keyout "$work/leaf.key" -out "$work/leaf.csr" 2>/dev/null
printf 'subjectAltName=DNS:localhost\n' >"$work/ext"
openssl x509 -req -in "$work/leaf.csr" -CA "$work/ca.pem" -CAkey "$work/ca.key" -CAcreateserial -days 2 \
    -extfile "$work/ext" -out "$work/leaf.pem" 2>/dev/null

cat >"$work/nginx.conf" <<EOF
worker_processes 1;
pid $work/nginx.pid;
error_log $work/error.log;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path $work; proxy_temp_path $work; fastcgi_temp_path $work;
    uwsgi_temp_path $work; scgi_temp_path $work;
    server {
        # (the old spelling: Debian's nginx may predate "http2 on;")
        listen 127.0.0.1:$up ssl http2;
        ssl_certificate $work/leaf.pem;
        ssl_certificate_key $work/leaf.key;
        keepalive_requests 100000;
        location / { return 200 "hello"; }
    }
    upstream tls_upstream { server 127.0.0.1:$up; keepalive 16; }
    server {
        listen 127.0.0.1:$rp;
        location / {
            proxy_pass https://tls_upstream;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_ssl_server_name on;
            proxy_ssl_name localhost;
            proxy_ssl_trusted_certificate $work/ca.pem;
            proxy_ssl_verify on;
            proxy_ssl_session_reuse on;
        }
    }
}
EOF
nginx -c "$work/nginx.conf" -p "$work"

bin=$root/target/release/switchyard
[ -x "$bin" ] || cargo build --release --quiet -p switchyard-cli --manifest-path "$root/Cargo.toml"
"$bin" gateway --listen "127.0.0.1:$gw" --server "https://localhost:$up=2" --cacert "$work/ca.pem" \
    --resolve "localhost:$up:127.0.0.1" >/dev/null 2>"$work/gateway.log" &
for _ in $(seq 100); do
    python3 -c "import socket; socket.create_connection(('127.0.0.1', $gw), 0.1)" 2>/dev/null && break
    sleep 0.05
done

python3 - "$n" "$up" "$gw" "$rp" "$work/ca.pem" <<'EOF'
import http.client, ssl, statistics, sys, time
n, up, gw, rp, ca = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
ctx = ssl.create_default_context(cafile=ca)

def direct():
    c = http.client.HTTPSConnection("localhost", int(up), context=ctx)
    c.request("GET", "/", headers={"Connection": "close"})
    body = c.getresponse().read()
    c.close()
    return body

def through(port, host_header):
    c = http.client.HTTPConnection("127.0.0.1", port)
    c.request("GET", "/", headers={"Host": host_header, "Connection": "close"})
    body = c.getresponse().read()
    c.close()
    return body

runs = [
    ("direct TLS, new connection each", direct),
    ("switchyard gateway, new local connection each", lambda: through(gw, f"localhost:{up}")),
    ("nginx reverse proxy (upstream keepalive)", lambda: through(rp, f"localhost:{up}")),
]
medians = {}
for name, call in runs:
    for _ in range(20):
        assert call() == b"hello", name
    times = []
    for _ in range(n):
        t = time.perf_counter()
        assert call() == b"hello", name
        times.append(time.perf_counter() - t)
    times.sort()
    medians[name] = statistics.median(times)
    p99 = times[int(len(times) * 0.99) - 1]
    print(f"{name:48s} median {medians[name] * 1e6:8.0f} us  p99 {p99 * 1e6:8.0f} us")
d, g, r = (medians[k] for k, _ in runs)
print(f"gateway vs direct: {d / g:.2f}x faster per request; gateway vs nginx reverse proxy: {r / g:.2f}x")
EOF
