#!/usr/bin/env bash
# A real server recorded under load: Debian's redis-server 7.0 driven by redis-benchmark from
# outside dara, natively and under `dara-trace` (a recording: the benchmark's connections are
# relayed and recorded, docs/outside.md), with the same client settings, in the same run.
#
#  * throughput (requests/s, redis-benchmark's own figure for SET and GET): native, then recorded;
#    the server on CPU 0 (dara and its target share it, as they always do) and redis-benchmark on
#    CPU 1; TRIALS alternating trials, medians, and the ratio recorded / native;
#  * the recording: steps, trace bytes, and both per request; and that `dara-replay --verify`
#    reproduces it with nobody outside (exit status 0, checked).
#
#   scripts/bench-outside.sh [N [CLIENTS [TRIALS]]]     (default 20000 requests, 20 clients, 3)
#
# Numbers are recorded in docs/performance.md. Exits non-zero if a run fails.
set -euo pipefail
cd "$(dirname "$0")/.."
requests="${1:-20000}"
clients="${2:-20}"
trials="${3:-3}"

./scripts/install-deps.sh
cargo build --release --workspace -q
trace=target/release/dara-trace
replay=target/release/dara-replay

out=$(mktemp -d)
server=""
cleanup() {
    if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; fi
    rm -rf "$out"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

port_in_use() { command -v ss >/dev/null && [ -n "$(ss -Htuan "sport = :$1")" ]; }
port=$((23000 + ($$ % 300) * 10))
while port_in_use "$port"; do port=$((port + 1)); done
server_args=(redis-server --port "$port" --save '' --appendonly no --bind 127.0.0.1)

wait_ready() {
    for _ in $(seq 1 600); do
        redis-cli -p "$port" ping >/dev/null 2>&1 && return 0
        sleep 0.05
    done
    echo "bench-outside: the server did not answer on port $port" >&2
    return 1
}

# redis-benchmark's SET and GET figures (requests/s), as "set get".
load() {
    taskset -c 1 redis-benchmark -p "$port" -n "$requests" -c "$clients" -t set,get --csv 2>/dev/null |
        awk -F'","' '/^"SET"|^"GET"/ { gsub(/"/, "", $2); v[substr($1, 2)] = $2 } END { print v["SET"], v["GET"] }'
}

stop_server() {
    redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
    wait "$server" || true
    server=""
}

median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

native_set=() native_get=() dara_set=() dara_get=()
for trial in $(seq 1 "$trials"); do
    taskset -c 0 "${server_args[@]}" >/dev/null 2>&1 &
    server=$!
    wait_ready
    read -r s g <<<"$(load)"
    native_set+=("$s") native_get+=("$g")
    stop_server

    rm -rf "$out/rec"
    "$trace" -q --pin-cpu 0 -o "$out/rec" -- "${server_args[@]}" >"$out/rec.log" 2>&1 </dev/null &
    server=$!
    wait_ready
    read -r s g <<<"$(load)"
    dara_set+=("$s") dara_get+=("$g")
    stop_server
    echo "trial $trial: native SET ${native_set[-1]} GET ${native_get[-1]}, recorded SET ${dara_set[-1]} GET ${dara_get[-1]} req/s" >&2
done

nset=$(printf '%s\n' "${native_set[@]}" | median)
nget=$(printf '%s\n' "${native_get[@]}" | median)
dset=$(printf '%s\n' "${dara_set[@]}" | median)
dget=$(printf '%s\n' "${dara_get[@]}" | median)
steps=$(target/release/dara info "$out/rec/trace.bin" | awk '/^steps/ { print $2; exit }')
bytes=$(stat -c %s "$out/rec/trace.bin")
total=$((2 * requests))
"$replay" -q --verify "$out/rec/trace.bin" >"$out/verify.log" 2>&1 || { cat "$out/verify.log" >&2; echo "bench-outside: the recording did not replay" >&2; exit 1; }

echo "redis-benchmark -n $requests -c $clients -t set,get; server on CPU 0, benchmark on CPU 1; medians of $trials trials"
printf '%-28s %12s %12s\n' "" "SET req/s" "GET req/s"
printf '%-28s %12s %12s\n' "native" "$nset" "$nget"
printf '%-28s %12s %12s\n' "recorded by dara-trace" "$dset" "$dget"
awk -v ds="$dset" -v ns="$nset" -v dg="$dget" -v ng="$nget" 'BEGIN { printf "%-28s %12.3f %12.3f\n", "ratio recorded / native", ds / ns, dg / ng }'
awk -v t="$total" -v s="$steps" -v b="$bytes" 'BEGIN { printf "last recording: %d requests, %d steps (%.1f per request), %d trace bytes (%.0f per request); dara-replay --verify: identical\n", t, s, s / t, b, b / t }'
