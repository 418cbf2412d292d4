#!/usr/bin/env bash
# HTTP/3 racing TCP where UDP is dropped, measured in a network namespace of its
# own (issue 59): `switchyard get --http3` against a server that answers over
# QUIC (aioquic) and over TCP (Python's TLS server) on the same port, first with
# UDP flowing, then with nftables dropping every UDP packet to that port (a true
# black hole: no ICMP, the QUIC attempt only hears silence). Prints, per case, the
# protocol that answered and the median time to the response (curl's time_total)
# over RUNS runs; each run is a new process, so a new pool and a new QUIC memory,
# except the last case: a second connection in the same process, after the first
# race taught it that QUIC is silent here.
#
#   bench/netns-h3.sh [SWITCHYARD_BIN] [RUNS]
#   e.g. bench/netns-h3.sh target/release/switchyard 7
# Needs root (or user namespaces), unshare, nft (Debian's nftables), openssl,
# python3 with aioquic. Nothing leaves the namespace: it has only its loopback.
set -euo pipefail
bin=$(realpath "${1:-target/release/switchyard}")
runs=${2:-5}
here=$(cd "$(dirname "$0")/.." && pwd)
if [ "${SWITCHYARD_NETNS_INSIDE:-}" != 1 ]; then
    command -v nft >/dev/null || { echo "needs nft (apt-get install nftables)"; exit 2; }
    python3 -c "import aioquic" 2>/dev/null || { echo "needs aioquic (pip install aioquic)"; exit 2; }
    SWITCHYARD_NETNS_INSIDE=1 exec unshare -n bash "$0" "$bin" "$runs"
fi

ip link set lo up
dir=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$dir"' EXIT
cd "$dir"
# A CA and a leaf for localhost.
openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 1 -subj /CN=netns-ca 2>/dev/null
openssl req -newkey rsa:2048 -nodes -keyout leaf.key -out leaf.csr -subj /CN=localhost 2>/dev/null
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n' > ext.cnf
openssl x509 -req -in leaf.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out leaf.pem -days 1 \
    -extfile ext.cnf 2>/dev/null
port=44300
# TCP: HTTP/1.1 over TLS. UDP: HTTP/3 (aioquic), same port.
python3 - "$port" <<'EOF' &
import http.server, ssl, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        self.send_response(200); self.send_header("content-length", "5"); self.end_headers(); self.wfile.write(b"hello")
    def log_message(self, *a): pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H)
c = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); c.load_cert_chain("leaf.pem", "leaf.key")
s.socket = c.wrap_socket(s.socket, server_side=True)
s.serve_forever()
EOF
python3 "$here/tests/interop/h3_server.py" leaf.pem leaf.key "$port" > h3.log 2>&1 &
for _ in $(seq 50); do grep -q ready h3.log 2>/dev/null && break; sleep 0.1; done

run() { # -> "VERSION TIME_TOTAL" per run
    for _ in $(seq "$runs"); do
        "$bin" get --http3 --cacert ca.pem --resolve "localhost:$port:127.0.0.1" -s -o /dev/null \
            -w '%{http_version} %{time_total}\n' "https://localhost:$port/hello"
    done
}
report() { # CASE LINES
    python3 - "$1" "$2" <<'EOF'
import statistics, sys
rows = [l.split() for l in sys.argv[2].splitlines() if l.strip()]
versions = sorted({r[0] for r in rows})
times = [float(r[1]) * 1000 for r in rows]
print(f"{sys.argv[1]:<34} answered over HTTP/{','.join(versions):<4} median {statistics.median(times):7.1f} ms  (min {min(times):.1f}, max {max(times):.1f}, {len(rows)} runs)")
EOF
}
report "UDP flowing (QUIC wins)" "$(run)"
nft add table inet quic
nft add chain inet quic out '{ type filter hook output priority 0 ; }'
nft add rule inet quic out udp dport "$port" drop
report "UDP dropped (TCP after the delay)" "$(run)"
# Two calls in one process, each on a new connection: the second race
# remembers QUIC's silence on IPv4 and starts with TCP.
second() {
    for _ in $(seq "$runs"); do
        "$bin" get --http3 --cacert ca.pem --resolve "localhost:$port:127.0.0.1" -s -o /dev/null \
            -o /dev/null -H 'Connection: close' -w '%{http_version} %{time_total}\n' \
            "https://localhost:$port/hello" "https://localhost:$port/hello" | tail -1
    done
}
report "UDP dropped, the next connection" "$(second)"
