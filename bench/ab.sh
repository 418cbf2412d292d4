#!/usr/bin/env bash
# Head-to-head: two builds of the harness, one scenario and client, alternately,
# client pinned to core 0 and the server to core 1, one server process. Prints
# the median requests/s of each and the ratio new/old. On a small, noisy VM this
# sees a few per cent where whole harness runs move by ten.
#
#   bench/ab.sh OLD_BIN NEW_BIN SCENARIO CLIENT REQUESTS [ROUNDS]
#   e.g. bench/ab.sh /tmp/old/switchyard-bench target/release/switchyard-bench s1 switchyard-std 20000
# Scenarios: s1 (sequential), s2 (64 concurrent), s3 (64 h2c streams, h2-crate server), s4 (churn). Needs taskset and python3.
set -euo pipefail
old=$1 new=$2 sc=$3 client=$4 n=$5 rounds=${6:-5}
# shellcheck source=bench/serve.sh
. "$(dirname "$0")/serve.sh"
start_server "$new" "$sc"
out=$(for _ in $(seq "$rounds"); do
    echo "old $(taskset -c 0 "$old" measure "$sc" "$client" "$port" "$n" 2>/dev/null)"
    echo "new $(taskset -c 0 "$new" measure "$sc" "$client" "$port" "$n" 2>/dev/null)"
done)
python3 - "$sc" "$client" <<PY
import json, statistics, sys
rows = """$out""".splitlines()
rps = lambda tag: statistics.median(json.loads(r[4:])["rps"] for r in rows if r.startswith(tag + " {"))
o, n = rps("old"), rps("new")
print(f"{sys.argv[1]} {sys.argv[2]}: old {o:.0f} req/s, new {n:.0f} req/s, new/old {n / o:.3f}")
PY
