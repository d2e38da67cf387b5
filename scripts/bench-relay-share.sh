#!/usr/bin/env bash
# What a recorded server's request costs, split by process, against the same server natively and
# behind a relay model, in one run (docs/performance.md, "The relay's share"). Each server runs on
# CPU 0 and its load generator on CPU 1, three ways, alternating, TRIALS times:
#
#  * native: the server alone;
#  * relay model: the server behind tests/fixtures/tcp_relay (one epoll thread passing bytes on,
#    also on CPU 0): the loopback crossings dara's relay adds (client -> relay -> server -> relay
#    -> client), without any scheduling;
#  * recorded: `dara-trace --pin-cpu 0 -- SERVER` (recorded0, recorded1, ...: each build of TRACES).
#
# Servers (SERVERS, default both):
#  * memcached: `memcached -t 4` under `memcslap -c 4 -e KEYS`; figures: memcslap's times for its
#    set and get tests (s); CPU measured during the set test (4 x KEYS requests);
#  * redis: `redis-server` under `redis-benchmark -n 10 x KEYS -c 20 -t set,get`; figures: its SET
#    and GET rates (req/s); CPU measured over both (20 x KEYS requests).
# For each: the figures, the CPU time a request of each process (from /proc/PID/task/*/schedstat;
# dara-trace's own processes apart from the server's), CPU 0's idle share and the context switches
# a request of those processes. Medians at the end, with the load average.
#
#   scripts/bench-relay-share.sh [TRIALS [KEYS]]     (default 3 trials, 2000 keys)
#   TRACES="/tmp/old/dara-trace target/release/dara-trace" scripts/bench-relay-share.sh
#                          (several builds, each recorded in every trial: before and after a change;
#                           each dara-trace finds the preload next to it)
#   SERVERS=redis scripts/bench-relay-share.sh
set -euo pipefail
cd "$(dirname "$0")/.."
trials="${1:-3}"
keys="${2:-2000}"
servers="${SERVERS:-memcached redis}"

cargo build --release --workspace -q
read -r -a traces <<<"${TRACES:-$PWD/target/release/dara-trace}"
out=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -INT "$p" 2>/dev/null || true; done
    sleep 1
    for p in "${pids[@]}"; do kill -INT "$p" 2>/dev/null || true; kill -TERM "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
    rm -rf "$out"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
cc -O2 -o "$out/tcp_relay" tests/fixtures/tcp_relay.c

port_in_use() { command -v ss >/dev/null && [ -n "$(ss -Htuan "sport = :$1")" ]; }
# Each server its own pair of ports (the server's, the relay model's): a server started right
# after another one stopped does not meet its port.
free_pair() { local p=$1; while port_in_use "$p" || port_in_use $((p + 1)); do p=$((p + 2)); done; echo "$p"; }
declare -A ports
next=$((26000 + ($$ % 300) * 10))
for server in $servers; do ports[$server]=$(free_pair "$next"); next=$((ports[$server] + 2)); done

wait_ready() {
    for _ in $(seq 1 1200); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.05
    done
    echo "bench-relay-share: nothing answered on port $1" >&2
    return 1
}
# CPU nanoseconds all threads of the given processes have run.
cpu_ns() { local p; for p in "$@"; do cat /proc/"$p"/task/*/schedstat 2>/dev/null; done | awk '{ s += $1 } END { printf "%d\n", s }'; }
switches() { local p; for p in "$@"; do cat /proc/"$p"/task/*/status 2>/dev/null; done | awk '/ctxt_switches/ { s += $2 } END { print s + 0 }'; }
cpu0_idle() { awk '$1 == "cpu0" { print $5 + $6 }' /proc/stat; }
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

# Per server: its command line (on port $1) in the array `args`.
server_args() {
    case $server in
        memcached) args=(memcached -u root -t 4 -U 0 -l 127.0.0.1 -p "$1") ;;
        redis) args=(redis-server --port "$1" --save '' --appendonly no --bind 127.0.0.1) ;;
    esac
}
# load PORT: runs the load; the CPU window is from `mark_start` to `mark_end`, which it calls.
load() {
    case $server in
        memcached)
            local set get
            mark_start
            set=$(taskset -c 1 memcslap -s "127.0.0.1:$1" -c 4 -e "$keys" -t set 2>&1 | awk '$0 ~ "Time to set " { print $(NF - 1) }')
            mark_end
            get=$(taskset -c 1 memcslap -s "127.0.0.1:$1" -c 4 -e "$keys" -t get 2>&1 | awk '$0 ~ "Time to get " { print $(NF - 1) }')
            echo "$set $get"
            ;;
        redis)
            local figures
            mark_start
            figures=$(taskset -c 1 redis-benchmark -p "$1" -n $((10 * keys)) -c 20 -t set,get --csv 2>/dev/null |
                awk -F'","' '/^"SET"|^"GET"/ { gsub(/"/, "", $2); v[substr($1, 2)] = $2 } END { printf "%.0f %.0f\n", v["SET"], v["GET"] }')
            mark_end
            echo "$figures"
            ;;
    esac
}
requests() { case $server in memcached) echo $((4 * keys)) ;; redis) echo $((20 * keys)) ;; esac; }
units() { case $server in memcached) echo "set / get (s)" ;; redis) echo "SET / GET (req/s)" ;; esac; }

# measure NAME PORT PID...: the load through PORT; CPU a request (µs) of each PID (with its child
# dara-trace processes), CPU 0's idle share and switches a request during the window. Appends a
# line to $out/$server.NAME.
measure() {
    local name=$1 at=$2
    shift 2
    watched=("$@")
    local figures line i n
    load "$at" >"$out/figures" # not in a subshell: mark_start and mark_end set this shell's variables
    figures=$(cat "$out/figures")
    n=$(requests)
    line="a ${figures% *} b ${figures#* }"
    for i in "${!before[@]}"; do line+=" cpu$i $(awk -v ns=$((after[i] - before[i])) -v n="$n" 'BEGIN { printf "%.1f", ns / n / 1000 }')"; done
    line+=" idle0 $(awk -v a="$idle0" -v b="$idle1" -v t=$((t1 - t0)) 'BEGIN { printf "%.2f", (b - a) * 10e6 / t }')"
    line+=" switches $(awk -v a="$cs0" -v b="$cs1" -v n="$n" 'BEGIN { printf "%.2f", (b - a) / n }')"
    echo "$line" >>"$out/$server.$name"
    echo "$server $name: $line" >&2
}
mark_start() {
    before=()
    for p in "${watched[@]}"; do before+=("$(cpu_ns "$p" $(pgrep -P "$p" -x dara-trace || true))"); done
    idle0=$(cpu0_idle) cs0=$(switches "${watched[@]}") t0=$(date +%s%N)
}
mark_end() {
    t1=$(date +%s%N) idle1=$(cpu0_idle) cs1=$(switches "${watched[@]}")
    after=()
    for p in "${watched[@]}"; do after+=("$(cpu_ns "$p" $(pgrep -P "$p" -x dara-trace || true))"); done
}

# stop SIGNAL PID...: ends the processes and waits for them.
stop() {
    local sig=$1
    shift
    kill "-$sig" "$@" 2>/dev/null || true
    for p in "$@"; do wait "$p" 2>/dev/null || true; done
    pids=()
}

for trial in $(seq 1 "$trials"); do
    for server in $servers; do
        port=${ports[$server]} relay_port=$((ports[$server] + 1))
        server_args "$port"
        taskset -c 0 "${args[@]}" >/dev/null 2>&1 &
        pids=($!)
        wait_ready "$port"
        measure native "$port" "${pids[0]}"
        taskset -c 0 "$out/tcp_relay" "$relay_port" "$port" &
        pids+=($!)
        wait_ready "$relay_port"
        measure relay "$relay_port" "${pids[0]}" "${pids[1]}"
        stop TERM "${pids[0]}" "${pids[1]}"

        for build in "${!traces[@]}"; do
            rm -rf "$out/rec"
            "${traces[build]}" -q --pin-cpu 0 -o "$out/rec" -- "${args[@]}" >"$out/rec.log" 2>&1 </dev/null &
            pids=($!)
            wait_ready "$port"
            target=$(pgrep -P "${pids[0]}" -x "${server/redis/redis-server}")
            measure "recorded$build" "$port" "${pids[0]}" "$target"
            # Ctrl-C, passed on to the server, which shuts down; a second one stops dara if not.
            kill -INT "${pids[0]}"
            for _ in $(seq 1 50); do kill -0 "${pids[0]}" 2>/dev/null || break; sleep 0.1; done
            stop INT "${pids[0]}"
        done
    done
done

echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
for build in "${!traces[@]}"; do echo "recorded$build: ${traces[build]}"; done
for server in $servers; do
    names=(native relay)
    for build in "${!traces[@]}"; do names+=("recorded$build"); done
    printf '\n%-20s %20s %-42s %9s %12s\n' "$server" "$(units)" "CPU µs a request, by process" "CPU0 idle" "switches/req"
    for name in "${names[@]}"; do
        col() { awk -v k="$1" '{ for (i = 1; i < NF; i++) if ($i == k) print $(i + 1) }' "$out/$server.$name" | median; }
        case $name in
            native) cpus="$server $(col cpu0)" ;;
            relay) cpus="$server $(col cpu0) + tcp_relay $(col cpu1)" ;;
            *) cpus="dara-trace $(col cpu0) + $server $(col cpu1)" ;;
        esac
        printf '%-20s %20s %-42s %9s %12s\n' "$name" "$(col a) / $(col b)" "$cpus" "$(col idle0)" "$(col switches)"
    done
done
