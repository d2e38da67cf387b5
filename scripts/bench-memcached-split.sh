#!/usr/bin/env bash
# Where a recorded memcached request's time goes, measured in one run (docs/performance.md, "Where
# a recorded memcached request's time goes"): `memcached -t 4` on CPU 0 under `memcslap -c 4 -e
# KEYS` on CPU 1 (set test: 4 x KEYS sets; get test: memcslap's own time for its 4 x KEYS gets),
# three ways, alternating, TRIALS times:
#
#  * native: memcached alone;
#  * relay model: memcached behind tests/fixtures/tcp_relay (one epoll thread passing bytes on,
#    also on CPU 0): the loopback crossings dara's relay adds (client -> relay -> server -> relay
#    -> client), without any scheduling;
#  * recorded: `dara-trace --pin-cpu 0 -- memcached ...` (recorded0, recorded1, ...: each build of
#    TRACES).
#
# For each: memcslap's times, and during the set test the CPU time a request of each process on
# CPU 0 (from /proc/PID/task/*/schedstat) and CPU 0's idle share; for the recording also its
# context switches a request. Medians at the end, with the load average.
#
#   scripts/bench-memcached-split.sh [TRIALS [KEYS]]     (default 3 trials, 2000 keys)
#   TRACES="/tmp/old/dara-trace target/release/dara-trace" scripts/bench-memcached-split.sh
#                          (several builds, each recorded in every trial: before and after a change;
#                           each dara-trace finds the preload next to it)
set -euo pipefail
cd "$(dirname "$0")/.."
trials="${1:-3}"
keys="${2:-2000}"
requests=$((4 * keys))

cargo build --release --workspace -q
read -r -a traces <<<"${TRACES:-$PWD/target/release/dara-trace}"
out=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -INT "$p" 2>/dev/null || true; done
    sleep 0.5
    for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
    rm -rf "$out"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
cc -O2 -o "$out/tcp_relay" tests/fixtures/tcp_relay.c

port_in_use() { command -v ss >/dev/null && [ -n "$(ss -Htuan "sport = :$1")" ]; }
port=$((26000 + ($$ % 300) * 10))
while port_in_use "$port" || port_in_use $((port + 1)); do port=$((port + 2)); done
relay_port=$((port + 1))

wait_ready() {
    for _ in $(seq 1 1200); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.05
    done
    echo "bench-memcached-split: nothing answered on port $1" >&2
    return 1
}
# CPU nanoseconds all threads of the given processes have run.
cpu_ns() { local p; for p in "$@"; do cat /proc/"$p"/task/*/schedstat 2>/dev/null; done | awk '{ s += $1 } END { printf "%d\n", s }'; }
switches() { local p; for p in "$@"; do cat /proc/"$p"/task/*/status 2>/dev/null; done | awk '/ctxt_switches/ { s += $2 } END { print s + 0 }'; }
cpu0_idle() { awk '$1 == "cpu0" { print $5 + $6 }' /proc/stat; }
slap() { taskset -c 1 memcslap -s "127.0.0.1:$1" -c 4 -e "$keys" -t "$2" 2>&1 | awk -v t="$2" '$0 ~ "Time to " t " " { print $(NF - 1) }'; }
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
per_request() { awk -v ns="$1" -v n="$requests" 'BEGIN { printf "%.1f", ns / n / 1000 }'; }

# measure NAME PORT PID...: memcslap set and get through PORT; CPU a request (µs) of each PID and
# CPU 0's idle share during the set test. Appends to $out/NAME.
measure() {
    local name=$1 at=$2
    shift 2
    local before=() after=() i idle0 idle1 cs0 cs1 set get t0 t1 line
    for p in "$@"; do before+=("$(cpu_ns "$p" $(pgrep -P "$p" -x dara-trace || true))"); done
    idle0=$(cpu0_idle) cs0=$(switches "$@")
    t0=$(date +%s%N)
    set=$(slap "$at" set)
    t1=$(date +%s%N)
    idle1=$(cpu0_idle) cs1=$(switches "$@")
    for p in "$@"; do after+=("$(cpu_ns "$p" $(pgrep -P "$p" -x dara-trace || true))"); done
    get=$(slap "$at" get)
    line="set $set get $get"
    for i in "${!before[@]}"; do line+=" cpu$i $(per_request $((after[i] - before[i])))"; done
    line+=" idle0 $(awk -v a="$idle0" -v b="$idle1" -v t=$((t1 - t0)) 'BEGIN { printf "%.2f", (b - a) * 10e6 / t }')"
    line+=" switches $(awk -v a="$cs0" -v b="$cs1" -v n="$requests" 'BEGIN { printf "%.2f", (b - a) / n }')"
    echo "$line" >>"$out/$name"
    echo "$name: $line" >&2
}

stop() { kill -INT "$@" 2>/dev/null || true; for p in "$@"; do wait "$p" 2>/dev/null || true; done; pids=(); }

for trial in $(seq 1 "$trials"); do
    taskset -c 0 memcached -u root -t 4 -U 0 -l 127.0.0.1 -p "$port" >/dev/null 2>&1 &
    pids=($!)
    wait_ready "$port"
    measure native "$port" "${pids[0]}"
    taskset -c 0 "$out/tcp_relay" "$relay_port" "$port" &
    pids+=($!)
    wait_ready "$relay_port"
    measure relay "$relay_port" "${pids[0]}" "${pids[1]}"
    kill "${pids[1]}"; stop "${pids[0]}" "${pids[1]}"

    for build in "${!traces[@]}"; do
        rm -rf "$out/mc"
        "${traces[build]}" -q --pin-cpu 0 -o "$out/mc" -- memcached -u root -t 4 -U 0 -l 127.0.0.1 -p "$port" >"$out/mc.log" 2>&1 </dev/null &
        pids=($!)
        wait_ready "$port"
        target=$(pgrep -P "${pids[0]}" -x memcached)
        measure "recorded$build" "$port" "${pids[0]}" "$target"
        stop "${pids[0]}"
    done
done

echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
names=(native relay)
for build in "${!traces[@]}"; do names+=("recorded$build"); echo "recorded$build: ${traces[build]}"; done
printf '%-10s %8s %8s %-40s %9s %12s\n' "" "set (s)" "get (s)" "CPU µs a set, by process" "CPU0 idle" "switches/req"
for name in "${names[@]}"; do
    col() { awk -v k="$1" '{ for (i = 1; i < NF; i++) if ($i == k) print $(i + 1) }' "$out/$name" | median; }
    case $name in
        native) cpus="memcached $(col cpu0)" ;;
        relay) cpus="memcached $(col cpu0) + tcp_relay $(col cpu1)" ;;
        *) cpus="dara-trace $(col cpu0) + memcached $(col cpu1)" ;;
    esac
    printf '%-10s %8s %8s %-40s %9s %12s\n' "$name" "$(col set)" "$(col get)" "$cpus" "$(col idle0)" "$(col switches)"
done
