#!/usr/bin/env bash
# The gateway's reason to exist, measured: a client that opens a new connection per
# request (the PHP/CGI pattern), direct to a TLS upstream (a TLS handshake each time)
# vs through `switchyard gateway` (plain TCP on loopback, the upstream's warm pooled
# connections) vs through nginx as a reverse proxy with upstream keep-alive. The
# upstream is nginx over TLS (HTTP/1.1 and h2 by ALPN). One run, same machine, each
# client sequential; the medians of per-request wall time are compared.
#
#   bench/gateway.sh [REQUESTS]       (default 400; needs nginx, openssl, python3; h2load for the load runs)
set -euo pipefail
n=${1:-400}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; for f in "$work"/*.pid; do [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null; done; rm -rf "$work"' EXIT
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

# Two nginx instances, so each one's CPU is its own: the TLS upstream, and the
# reverse proxy to compare the gateway with (one worker; a second copy with two).
nginx_conf() { # NAME WORKERS SERVER-BLOCKS
    cat >"$work/$1.conf" <<CONF
worker_processes $2;
pid $work/$1.pid;
error_log $work/$1.error.log;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $work; proxy_temp_path $work; fastcgi_temp_path $work;
    uwsgi_temp_path $work; scgi_temp_path $work;
    $3
}
CONF
    nginx -c "$work/$1.conf" -p "$work"
}
# (the old spelling "listen ... ssl http2": Debian's nginx may predate "http2 on;")
nginx_conf up 1 "server {
        listen 127.0.0.1:$up ssl http2;
        ssl_certificate $work/leaf.pem;
        ssl_certificate_key $work/leaf.key;
        keepalive_requests 100000;
        location / { return 200 \"hello\"; }
    }"
rp_server() { # PORT
    echo "upstream tls_upstream { server 127.0.0.1:$up; keepalive 64; }
    server {
        listen 127.0.0.1:$1;
        keepalive_requests 100000;
        location / {
            proxy_pass https://tls_upstream;
            proxy_http_version 1.1;
            proxy_set_header Connection \"\";
            proxy_ssl_server_name on;
            proxy_ssl_name localhost;
            proxy_ssl_trusted_certificate $work/ca.pem;
            proxy_ssl_verify on;
            proxy_ssl_session_reuse on;
        }
    }"
}
rp2=$(free_port)
nginx_conf rp 1 "$(rp_server "$rp")"
nginx_conf rp2 2 "$(rp_server "$rp2")"

bin=$root/target/release/switchyard
[ -x "$bin" ] || cargo build --release --quiet -p switchyard-cli --manifest-path "$root/Cargo.toml"
"$bin" gateway --listen "127.0.0.1:$gw" --server "https://localhost:$up=2" --cacert "$work/ca.pem" --no-access-log \
    --resolve "localhost:$up:127.0.0.1" >/dev/null 2>"$work/gateway.log" &
gateway_pid=$!
# The same with two worker threads (nginx with two workers is its peer).
gw2=$(free_port)
"$bin" gateway --listen "127.0.0.1:$gw2" --server "https://localhost:$up=2" --cacert "$work/ca.pem" --no-access-log \
    --threads 2 --resolve "localhost:$up:127.0.0.1" >/dev/null 2>"$work/gateway2.log" &
gateway2_pid=$!
for port in $gw $gw2; do
    for _ in $(seq 100); do
        python3 -c "import socket; socket.create_connection(('127.0.0.1', $port), 0.1)" 2>/dev/null && break
        sleep 0.05
    done
done

python3 - "$n" "$up" "$gw" "$rp" "$work/ca.pem" "$gateway_pid" "$(cat "$work/rp.pid")" "$(cat "$work/up.pid")" <<'EOF'
import glob, http.client, ssl, statistics, subprocess, sys, time
n, up, gw, rp, ca = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
pids = {"gateway": sys.argv[6], "nginx": sys.argv[7], "upstream": sys.argv[8]}
ctx = ssl.create_default_context(cafile=ca)

def cpu_ns(pid):
    """CPU time (ns) of a process, all its threads and its children (nginx's workers)."""
    procs = [pid] + subprocess.run(["pgrep", "-P", pid], capture_output=True, text=True).stdout.split()
    total = 0
    for p in procs:
        for f in glob.glob(f"/proc/{p}/task/*/schedstat"):
            try:
                total += int(open(f).read().split()[0])
            except OSError:
                pass
    return total

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
    ("direct TLS, new connection each", direct, "upstream"),
    ("switchyard gateway, new local connection each", lambda: through(gw, f"localhost:{up}"), "gateway"),
    ("nginx reverse proxy (upstream keepalive)", lambda: through(rp, f"localhost:{up}"), "nginx"),
]
medians, cpu = {}, {}
for name, call, who in runs:
    for _ in range(20):
        assert call() == b"hello", name
    times = []
    before = cpu_ns(pids[who])
    for _ in range(n):
        t = time.perf_counter()
        assert call() == b"hello", name
        times.append(time.perf_counter() - t)
    cpu[who] = (cpu_ns(pids[who]) - before) / n / 1e3
    times.sort()
    medians[name] = statistics.median(times)
    p99 = times[int(len(times) * 0.99) - 1]
    print(f"{name:48s} median {medians[name] * 1e6:8.0f} us  p99 {p99 * 1e6:8.0f} us  {who} CPU {cpu[who]:6.1f} us/req")
d, g, r = (medians[k] for k, _, _ in runs)
print(f"gateway vs direct: {d / g:.2f}x faster per request; gateway vs nginx reverse proxy: {r / g:.2f}x")
print(f"CPU per new-connection request: gateway {cpu['gateway']:.1f} us vs nginx {cpu['nginx']:.1f} us ({cpu['gateway'] / cpu['nginx']:.2f}x)")
EOF

# Throughput and latency with keep-alive load (h2load from nghttp2-client): 32
# concurrent HTTP/1.1 clients straight to the TLS upstream, through the gateway and
# through nginx (one worker, then two); the gateway also over h2c (one local
# connection per client, 10 streams each). Added latency = its p50/p99 minus the
# direct run's. CPU per request: the proxy's own (user + system, from /proc), or
# the upstream's on the direct run.
if command -v h2load >/dev/null 2>&1; then
    load=$((n * 50))
    # CPU time in ns (all threads, from schedstat) of a process and its children.
    cpu_ns() { # PID
        local t=0 p f
        for p in "$1" $(pgrep -P "$1"); do
            for f in /proc/"$p"/task/*/schedstat; do
                [ -r "$f" ] && t=$((t + $(awk '{print $1}' "$f")))
            done
        done
        echo "$t"
    }
    run_load() { # name cpu-pid url extra-args...
        local name=$1 pid=$2 url=$3; shift 3
        local before after
        before=$(cpu_ns "$pid")
        h2load -n "$load" -c 32 -t 1 "$@" -H ":authority: localhost:$up" --log-file "$work/$name.tsv" "$url" \
            >"$work/$name.out" 2>&1 || { echo "h2load $name failed:"; cat "$work/$name.out"; return 1; }
        after=$(cpu_ns "$pid")
        # CPU microseconds per request of the process in the middle.
        python3 -c "print(f'{($after - $before) / 1e3 / $load:.1f}')" >"$work/$name.cpu"
    }
    run_load direct "$(cat "$work/up.pid")" "https://127.0.0.1:$up/" --h1
    run_load gateway "$gateway_pid" "http://127.0.0.1:$gw/" --h1
    run_load gateway-2t "$gateway2_pid" "http://127.0.0.1:$gw2/" --h1
    run_load nginx "$(cat "$work/rp.pid")" "http://127.0.0.1:$rp/" --h1
    run_load nginx-2w "$(cat "$work/rp2.pid")" "http://127.0.0.1:$rp2/" --h1
    run_load gateway-h2c "$gateway_pid" "http://127.0.0.1:$gw/" -m 10
    python3 - "$work" <<'PY'
import statistics, sys, re
work = sys.argv[1]
def read(name):
    lat = sorted(int(l.split("\t")[2]) for l in open(f"{work}/{name}.tsv") if l.strip())
    ok = sum(1 for l in open(f"{work}/{name}.tsv") if l.split("\t")[1] == "200")
    rps = float(re.search(r"([\d.]+) req/s", open(f"{work}/{name}.out").read()).group(1))
    return lat, ok, rps
base, _, _ = read("direct")
b50, b99 = statistics.median(base), base[int(len(base) * 0.99) - 1]
rows = {}
cpu = {}
for name in ["direct", "gateway", "nginx", "gateway-2t", "nginx-2w", "gateway-h2c"]:
    lat, ok, rps = read(name)
    p50, p99 = statistics.median(lat), lat[int(len(lat) * 0.99) - 1]
    rows[name] = rps
    cpu[name] = float(open(f"{work}/{name}.cpu").read())
    who = "upstream" if name == "direct" else "proxy"
    added = "" if name == "direct" else f"  added p50 {p50 - b50:+7.0f} us  p99 {p99 - b99:+7.0f} us"
    print(f"h2load {name:12s} {rps:9.0f} req/s  {ok}/{len(lat)} ok  p50 {p50:6.0f} us  p99 {p99:6.0f} us  {who} CPU {cpu[name]:5.1f} us/req{added}")
print(f"h2load: gateway {rows['gateway'] / rows['nginx']:.2f}x nginx's throughput over HTTP/1.1 keep-alive "
      f"({rows['gateway'] / rows['nginx-2w']:.2f}x nginx with 2 workers); h2c {rows['gateway-h2c'] / rows['nginx']:.2f}x")
print(f"CPU per request: gateway {cpu['gateway']:.1f} us vs nginx {cpu['nginx']:.1f} us ({cpu['gateway'] / cpu['nginx']:.2f}x); "
      f"2 threads {cpu['gateway-2t']:.1f} us vs nginx 2 workers {cpu['nginx-2w']:.1f} us ({cpu['gateway-2t'] / cpu['nginx-2w']:.2f}x); "
      f"gateway h2c {cpu['gateway-h2c']:.1f} us")
print(f"h2load: gateway with 2 threads {rows['gateway-2t'] / rows['nginx-2w']:.2f}x the throughput of nginx with 2 workers")
PY
else
    echo "h2load not installed (apt-get install nghttp2-client): throughput runs skipped"
fi
