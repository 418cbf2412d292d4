# Sourced by bench/ab.sh, bench/ir.sh and bench/vs.sh: start_server BIN SCENARIO
# starts the scenario's server from BIN on core 1, on a random port ($port; its
# command in $serve), stopped by stop_server when the calling script exits.
# Scenario 3's server is the harness's: h2o (one thread) when installed, h2c for s3
# and TLS for s3-tls (a new test CA each time, handed to the clients in
# SWITCHYARD_BENCH_CA); with S3_SERVER=h2, or without h2o, s3 runs on the h2 crate's
# server (this program's serve-h2).
start_server() {
    port=$((20000 + RANDOM % 10000))
    serve=serve-h1
    local extra=()
    [ "$2" = s4 ] && serve=serve-h1-close
    if [ "$2" = s3 ]; then
        serve=serve-h2
        if [ "${S3_SERVER:-h2o}" = h2o ] && command -v h2o >/dev/null; then
            serve=serve-h2o
        fi
    fi
    if [ "$2" = s3-tls ]; then
        command -v h2o >/dev/null || { echo "s3-tls needs h2o" >&2; exit 1; }
        serve=serve-h2o
        server_ca=$(mktemp)
        extra=("$server_ca")
        export SWITCHYARD_BENCH_CA=$server_ca
    fi
    taskset -c 1 "$1" "$serve" "$port" "${extra[@]}" >/dev/null 2>&1 &
    server=$!
    trap stop_server EXIT
    for _ in $(seq 50); do
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return
        sleep 0.1
    done
    echo "the $serve server did not start on port $port" >&2
    exit 1
}

stop_server() {
    kill "$server" 2>/dev/null || true
    # serve-h2o becomes h2o (same process id) and leaves its configuration here.
    rm -rf "${TMPDIR:-/tmp}/switchyard-bench-$server-h2o-serve" "${server_ca:-}"
}
