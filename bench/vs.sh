#!/usr/bin/env bash
# Pinned head-to-head of several clients on one scenario: one server (core 1), each
# client in turn on core 0, ROUNDS alternating rounds, medians. Beside requests/s it
# prints the waits the time hides: the client's voluntary context switches per 1 000
# requests (it blocked with nothing to do) and involuntary ones (it was preempted),
# from GNU time, and the server's CPU per request (from /proc): on loopback a client
# can idle because the server is saturated, and what it sends shapes the server's cost.
#
#   bench/vs.sh BIN SCENARIO N ROUNDS CLIENT...
#   e.g. bench/vs.sh target/release/switchyard-bench s3 30000 5 hyper-util switchyard-tokio
# The first client is the baseline of the ratios. Needs taskset and GNU time.
set -euo pipefail
bin=$1 sc=$2 n=$3 rounds=$4
shift 4
# shellcheck source=bench/serve.sh
. "$(dirname "$0")/serve.sh"
start_server "$bin" "$sc"
tck=$(getconf CLK_TCK)
tmp=$(mktemp -d)
trap 'stop_server; rm -rf "$tmp"' EXIT
echo "server: $serve (core 1); clients on core 0; $rounds rounds of $n requests" >&2
server_ticks() { awk '{print $14 + $15}' "/proc/$server/stat"; }
rows=""
for _ in $(seq "$rounds"); do
    for c in "$@"; do
        before=$(server_ticks)
        /usr/bin/time -o "$tmp/waits" -f '%w %c' taskset -c 0 "$bin" measure "$sc" "$c" "$port" "$n" \
            >"$tmp/out" 2>/dev/null || true
        after=$(server_ticks)
        rows+="$c|$(tail -1 "$tmp/out")|$(tail -1 "$tmp/waits")|$((after - before))"$'\n'
    done
done
python3 - "$n" "$tck" "$@" <<PY
import json, statistics, sys
n, tck = int(sys.argv[1]), int(sys.argv[2])
clients = sys.argv[3:]
res = {}
for row in """$rows""".strip().splitlines():
    c, out, waits, ticks = row.split("|")
    try:
        rps = json.loads(out)["rps"]
        vol, inv = (int(x) for x in waits.split())
    except Exception:
        continue
    r = res.setdefault(c, {"rps": [], "vol": [], "inv": [], "srv": []})
    r["rps"].append(rps)
    r["vol"].append(vol * 1000 / n)
    r["inv"].append(inv * 1000 / n)
    r["srv"].append(int(ticks) / tck / n * 1e6)
m = statistics.median
base = m(res[clients[0]]["rps"]) if clients[0] in res else None
print(f"{'client':<24} {'req/s':>9} {'ratio':>6}  {'spread':>15}  {'vol/1k':>6} {'inv/1k':>6} {'server us/req':>13}")
for c in clients:
    if c not in res or base is None:
        print(f"{c:<24} no result")
        continue
    r = res[c]
    print(f"{c:<24} {m(r['rps']):>9.0f} {m(r['rps'])/base:>6.3f}  {min(r['rps']):>7.0f}-{max(r['rps']):<7.0f}  "
          f"{m(r['vol']):>6.2f} {m(r['inv']):>6.2f} {m(r['srv']):>13.2f}")
PY
