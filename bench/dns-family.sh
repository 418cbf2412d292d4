#!/usr/bin/env bash
# The default resolver seen from outside: a DNS server on 127.0.0.1:53 answers A
# at once and AAAA after a delay; /etc/resolv.conf points at it for the run (as
# root; restored on exit); `switchyard get` fetches http://delayed.test:PORT/ with
# the system resolver (the default) and with --dns hickory, each run a fresh
# process (so a cold DNS cache). With A and AAAA asked as one AF_UNSPEC
# getaddrinfo the call waits for the slow AAAA; asked per family, IPv4 goes after
# the 50 ms resolution delay.
#
#   [RUNTIME=tokio|smol|std] bench/dns-family.sh [SWITCHYARD_BIN] [AAAA_DELAY_MS] [RUNS]
#   e.g. bench/dns-family.sh target/release/switchyard 400 7
# Needs root (port 53, /etc/resolv.conf) and python3.
set -euo pipefail
bin=${1:-target/release/switchyard} delay=${2:-400} runs=${3:-7} runtime=${RUNTIME:-tokio}
[ "$(id -u)" = 0 ] || { echo "dns-family.sh: needs root (port 53 and /etc/resolv.conf)" >&2; exit 1; }
work=$(mktemp -d)
cp /etc/resolv.conf "$work/resolv.conf.saved"
cleanup() {
    cat "$work/resolv.conf.saved" > /etc/resolv.conf
    kill "$dns_pid" "$http_pid" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
echo hello > "$work/hello"
python3 -u -m http.server --bind 127.0.0.1 --directory "$work" 0 > "$work/http.log" 2>&1 &
http_pid=$!
python3 - "$delay" > "$work/dns.log" 2>&1 <<'EOF' &
import socket, struct, sys, threading, time
delay = int(sys.argv[1]) / 1000
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.0.0.1", 53))
def answer(data, peer):
    qid, flags, qd = struct.unpack("!HHH", data[:6])
    i, labels = 12, []
    while data[i]:
        labels.append(data[i + 1:i + 1 + data[i]].decode()); i += 1 + data[i]
    qtype = struct.unpack("!H", data[i + 1:i + 3])[0]
    question = data[12:i + 5]
    name = ".".join(labels).lower()
    rdata = {1: socket.inet_pton(socket.AF_INET, "127.0.0.1"), 28: socket.inet_pton(socket.AF_INET6, "::1")}.get(qtype)
    known = name == "delayed.test" and rdata is not None
    if qtype == 28:
        time.sleep(delay)
    head = struct.pack("!HHHHHH", qid, 0x8180 if name == "delayed.test" else 0x8183, 1, 1 if known else 0, 0, 0)
    body = question
    if known:
        body += b"\xc0\x0c" + struct.pack("!HHIH", qtype, 1, 60, len(rdata)) + rdata
    s.sendto(head + body, peer)
    print(f"{time.monotonic():.3f} {name} {qtype}", flush=True)
while True:
    data, peer = s.recvfrom(512)
    threading.Thread(target=answer, args=(data, peer)).start()
EOF
dns_pid=$!
for _ in $(seq 50); do grep -q port "$work/http.log" && break; sleep 0.1; done
port=$(sed -n 's/.*port \([0-9]*\).*/\1/p' "$work/http.log" | head -1)
[ -n "$port" ] || { echo "the HTTP server did not start" >&2; cat "$work/http.log" >&2; exit 1; }
printf 'nameserver 127.0.0.1\noptions timeout:2 attempts:1\n' > /etc/resolv.conf
measure() { # LABEL ARGS... -> median wall time of RUNS fresh processes
    local label=$1; shift
    python3 - "$runs" "$label" "$bin" "$@" <<'EOF'
import statistics, subprocess, sys, time
runs, label, cmd = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
times = []
for _ in range(runs):
    t = time.monotonic()
    out = subprocess.run(cmd, capture_output=True)
    times.append((time.monotonic() - t) * 1000)
    assert out.returncode == 0 and out.stdout == b"hello\n", (out.returncode, out.stdout, out.stderr[-300:])
print(f"{label}: median {statistics.median(times):.0f} ms (min {min(times):.0f}, max {max(times):.0f}, {runs} runs)")
EOF
}
url="http://delayed.test:$port/hello"
echo "AAAA answered ${delay} ms after A; $bin --runtime $runtime"
measure "system resolver (default)" get --runtime "$runtime" --no-proxy-env "$url"
[ "$runtime" = std ] || measure "--dns hickory            " get --runtime "$runtime" --no-proxy-env --dns hickory "$url"
measure "baseline: --resolve      " get --runtime "$runtime" --no-proxy-env --resolve "delayed.test:$port:127.0.0.1" "$url"
