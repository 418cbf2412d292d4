# Sourced by bench/ab.sh and bench/ir.sh: start_server BIN SCENARIO starts the
# scenario's server from BIN on core 1, on a random port ($port), stopped when the
# calling script exits.
start_server() {
    port=$((20000 + RANDOM % 10000))
    local serve=serve-h1
    [ "$2" = s4 ] && serve=serve-h1-close
    [ "$2" = s3 ] && serve=serve-h2
    taskset -c 1 "$1" "$serve" "$port" >/dev/null 2>&1 &
    server=$!
    trap 'kill $server 2>/dev/null' EXIT
    sleep 0.5
}
