#!/usr/bin/env bash
# A real server (Debian's redis-server 7.0), natively and under dara, measured in the same run.
#
#  1. Wall time of the closed-world smoke test (tests/fixtures/scripts/redis_smoke.sh: the server,
#     a PING loop, nine checked commands through redis-cli, SHUTDOWN): RUNS native runs against
#     `dara-trace --runs RUNS --strategy random --seed 1`, TRIALS times alternately; medians of
#     the time per run and their ratio, and the steps of dara's last execution (`dara info`).
#  2. Native `redis-benchmark -q -n N -c 20 -t set,get` throughput (requests/s), TRIALS times
#     each: server and benchmark pinned to different CPUs (taskset -c 0 / -c 1), both pinned to
#     one CPU (where dara runs a whole execution), and unpinned; medians.
#  3. What one request costs under dara: the server thread's steps from the epoll_wait that
#     delivers the smoke test's first SET to the send of its +OK, by operation (from the
#     `dara-replay` listing of the last execution), and the steps of one redis-cli process.
#
#   scripts/bench-redis.sh [RUNS [TRIALS [N]]]     (default 20 runs, 3 trials, 50000 requests)
#
# Prints a table; numbers are recorded in docs/performance.md. Exits non-zero if any run fails.
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-20}"
trials="${2:-3}"
requests="${3:-50000}"

./scripts/install-deps.sh
cargo build --release --workspace -q
trace=target/release/dara-trace
replay=target/release/dara-replay
info=target/release/dara
smoke=tests/fixtures/scripts/redis_smoke.sh

out=$(mktemp -d)
group=""
# Native runs go in their own process group (setsid), killed whole on the way out, so an
# interrupted benchmark leaves no server behind; dara-trace tears down what it traced itself.
cleanup() {
    if [ -n "$group" ]; then kill -- -"$group" 2>/dev/null || true; fi
    rm -rf "$out"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A port nobody uses now, below the ephemeral range.
port_in_use() { command -v ss >/dev/null && [ -n "$(ss -Htuan "sport = :$1")" ]; }
port=$((22000 + ($$ % 300) * 10))
while port_in_use "$port"; do
    port=$((port + 1))
    [ "$port" -lt 32000 ] || { echo "bench-redis: no free port below 32000" >&2; exit 1; }
done

# Runs "$@" in a new process group and waits for it; kills whatever of the group is left.
in_group() {
    setsid "$@" &
    group=$!
    local status=0
    wait "$group" || status=$?
    kill -- -"$group" 2>/dev/null || true
    group=""
    return "$status"
}

now() { date +%s.%N; }
median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

# 1. The smoke test: RUNS native runs vs RUNS dara executions, TRIALS times alternately.
native_ms=() dara_ms=() ratios=()
for _ in $(seq 1 "$trials"); do
    start=$(now)
    if ! in_group bash -c 'for _ in $(seq 1 "$1"); do "$2" "$3" >/dev/null || exit 1; done' loop "$runs" "$smoke" "$port"; then
        echo "bench-redis: $smoke failed natively" >&2
        exit 1
    fi
    native_ms+=("$(awk "BEGIN{printf \"%.1f\", 1000 * ($(now) - $start) / $runs}")")

    rm -rf "$out/smoke"
    start=$(now)
    if ! "$trace" -q -o "$out/smoke" --runs "$runs" --strategy random --seed 1 -- "$smoke" "$port" >"$out/smoke.log" 2>&1; then
        echo "bench-redis: dara-trace on $smoke failed:" >&2
        tail -5 "$out/smoke.log" >&2
        exit 1
    fi
    dara_ms+=("$(awk "BEGIN{printf \"%.1f\", 1000 * ($(now) - $start) / $runs}")")
    ratios+=("$(awk "BEGIN{printf \"%.2f\", ${dara_ms[-1]} / ${native_ms[-1]}}")")
done
steps=$("$info" info "$out/smoke/trace.bin" | awk '/^steps:/ {print $2}')
vtime=$("$info" info "$out/smoke/trace.bin" | awk '/^virtual time:/ {print $3}')

# 2. Native redis-benchmark: different CPUs, one CPU, unpinned.
bench_native() { # PLACEMENT -> "SET GET" requests/s
    local server_cpu="" bench_cpu=""
    case "$1" in
        apart) server_cpu="taskset -c 0" bench_cpu="taskset -c 1" ;;
        together) server_cpu="taskset -c 0" bench_cpu="taskset -c 0" ;;
    esac
    mkdir -p "$out/data"
    setsid $server_cpu redis-server --port "$port" --save '' --appendonly no --bind 127.0.0.1 --dir "$out/data" --loglevel warning >/dev/null &
    group=$!
    for _ in $(seq 1 100); do
        [ "$(redis-cli -p "$port" ping 2>/dev/null)" = PONG ] && break
        sleep 0.02
    done
    $bench_cpu redis-benchmark -p "$port" -q -n "$requests" -c 20 -t set,get 2>/dev/null | tr '\r' '\n' \
        | awk '/^SET:/ {s = $2} /^GET:/ {g = $2} END {print s, g}'
    redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
    wait "$group" 2>/dev/null || true
    kill -- -"$group" 2>/dev/null || true
    group=""
}
declare -A set_rps get_rps
for placement in apart together unpinned; do
    sets=() gets=()
    for _ in $(seq 1 "$trials"); do
        read -r s g < <(bench_native "$placement")
        sets+=("$s") gets+=("$g")
    done
    set_rps[$placement]=$(printf '%s\n' "${sets[@]}" | median)
    get_rps[$placement]=$(printf '%s\n' "${gets[@]}" | median)
done

# 3. One request under dara, from the listing of the last smoke execution.
"$replay" "$out/smoke/trace.bin" >"$out/listing.txt" 2>/dev/null || true
per_request=$(awk '
    { sub(/^>>/, "  ") }
    $1 ~ /^[0-9]+$/ && NF >= 4 { n++; who[n] = $3; op[n] = $4; line[n] = $0 }
    END {
        for (i = 1; i <= n; i++) if (op[i] == "recv" && line[i] ~ /"\*3\.\./) { server = who[i]; break }
        if (!server) { print "no SET found"; exit }
        for (s = i; s > 0 && !(who[s] == server && op[s] == "epoll-wait"); s--) {}
        for (e = i; e <= n && !(who[e] == server && op[e] == "send"); e++) {}
        for (j = s; j <= e; j++) if (who[j] == server) { total++; count[op[j]]++ }
        printf "%d steps:", total
        for (o in count) printf " %s %d", o, count[o]
        print ""
    }' "$out/listing.txt")
client_steps=$(awk '
    { sub(/^>>/, "  ") }
    $1 ~ /^[0-9]+$/ && $4 == "send" && $0 ~ /"\*3\.\./ && !p { split($3, a, "/"); p = a[1] }
    { lines[NR] = $0 }
    END {
        for (i = 1; i <= NR; i++) { l = lines[i]; sub(/^>>/, "  ", l); split(l, f, " "); split(f[3], a, "/"); if (a[1] == p) c++ }
        print c
    }' "$out/listing.txt")

printf '\nredis-server %s, %d smoke runs per trial, %d trials\n' "$(redis-server --version | awk '{print $3}' | cut -d= -f2)" "$runs" "$trials"
printf '%-44s %s\n' "smoke test, native (ms per run)" "$(printf '%s\n' "${native_ms[@]}" | median) (trials: ${native_ms[*]})"
printf '%-44s %s\n' "smoke test, dara (ms per execution)" "$(printf '%s\n' "${dara_ms[@]}" | median) (trials: ${dara_ms[*]})"
printf '%-44s %s\n' "dara / native" "$(printf '%s\n' "${ratios[@]}" | median) (trials: ${ratios[*]})"
printf '%-44s %s\n' "steps of the last dara execution" "$steps ($vtime virtual)"
for placement in apart together unpinned; do
    printf '%-44s SET %s  GET %s\n' "redis-benchmark native, $placement (req/s)" "${set_rps[$placement]}" "${get_rps[$placement]}"
done
printf '%-44s %s\n' "one SET under dara, server thread" "$per_request"
printf '%-44s %s\n' "one redis-cli process under dara (steps)" "$client_steps"
