#!/usr/bin/env bash
# Instructions per request of two builds of the harness, counted by callgrind:
# deterministic to about 0.1 %, where requests/s on this VM move by 5-15 % from one
# run to the next. Each client runs N and 3N requests under callgrind against one
# server (native, on core 1); the difference over 2N is the marginal cost of one
# request, without start-up. It counts CPU work, not waits or contention, so pair it
# with bench/ab.sh for throughput.
#
#   bench/ir.sh OLD_BIN NEW_BIN SCENARIO CLIENT [N]
#   e.g. bench/ir.sh /tmp/old/switchyard-bench target/release/switchyard-bench s2 switchyard-tokio 5000
# Needs valgrind and taskset.
set -euo pipefail
old=$1 new=$2 sc=$3 client=$4 n=${5:-5000}
# shellcheck source=bench/serve.sh
. "$(dirname "$0")/serve.sh"
start_server "$new" "$sc"
count() { # BIN REQUESTS -> instructions collected
    valgrind --tool=callgrind --callgrind-out-file=/dev/null "$1" measure "$sc" "$client" "$port" "$2" 2>&1 >/dev/null |
        sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
per_request() { # BIN -> marginal instructions per request
    local a b
    a=$(count "$1" "$n")
    b=$(count "$1" $((3 * n)))
    echo $(((b - a) / (2 * n)))
}
o=$(per_request "$old")
w=$(per_request "$new")
python3 -c "import sys; o, w = int(sys.argv[1]), int(sys.argv[2]); print(f'$sc $client: old {o} instr/request, new {w} instr/request, new/old {w / o:.3f}')" "$o" "$w"
