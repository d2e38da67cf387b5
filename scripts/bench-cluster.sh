#!/usr/bin/env bash
# Cluster benchmarks (issue 4): multi-process test scripts over loopback, natively and under dara,
# measured in the same run.
#
#  1. Executions per second of the 3-node key-value store's test script
#     (tests/fixtures/scripts/kv_test_ok.sh with kv_node_ok: two backups and a primary over TCP,
#     started in the background by bash, a client, QUIT, wait): RUNS runs of the script in a
#     native loop against `dara-trace --runs RUNS --strategy random --seed 1`, both from wall
#     time, TRIALS times alternately; medians and their ratio.
#  3. Executions per second of the Raft-like cluster's test script (tests/fixtures/scripts/
#     raft_test.sh with raft_node_ok: three nodes over TCP, 150-300 ms election timeouts, 50 ms
#     heartbeats, a client writing 5 values with 1 s timeouts, the safety check): RAFT_RUNS native
#     runs against as many dara executions (random, timers at their deadlines), TRIALS times
#     alternately; medians, their ratio, and how many dara executions served every write.
#  2. Wall time of a workload dominated by timeouts (tests/fixtures/scripts/heartbeat_test.sh:
#     a UDP heartbeat server and 3 clients waiting in poll/select/epoll_wait timeouts, about 3 s
#     natively): one native run against one `dara-trace --closed` execution (seeds 1..TRIALS), medians
#     of wall time, and the virtual time and steps the dara execution covered (`dara info`).
#
#   scripts/bench-cluster.sh [RUNS [TRIALS]]      (default 100 executions, 3 trials)
#
# Prints a table; numbers are recorded in docs/performance.md. Exits non-zero if any run fails.
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-100}"
trials="${2:-3}"
cpu="${BENCH_CPU:-0}"

./scripts/install-deps.sh
cargo build --release --workspace -q
trace=target/release/dara-trace
info=target/release/dara

out=$(mktemp -d)
group=""
# Native runs go in their own process group (setsid), killed whole on the way out, so an
# interrupted benchmark leaves no node behind; dara-trace tears down what it traced itself.
cleanup() {
    if [ -n "$group" ]; then kill -- -"$group" 2>/dev/null || true; fi
    rm -rf "$out"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

cc -O1 -g -pthread -Wall tests/fixtures/kv_node_ok.c -o "$out/kv_node_ok"
cc -O1 -g -pthread -Wall tests/fixtures/heartbeat.c -o "$out/heartbeat"
cc -O1 -g -pthread -Wall tests/fixtures/raft_node_ok.c -o "$out/raft_node_ok"
raft_script=tests/fixtures/scripts/raft_test.sh
raft_runs="${RAFT_RUNS:-10}"
kv_script=tests/fixtures/scripts/kv_test_ok.sh
hb_script=tests/fixtures/scripts/heartbeat_test.sh

# A base port whose four ports (TCP and UDP) nobody uses now, below the ephemeral range.
port_in_use() { command -v ss >/dev/null && [ -n "$(ss -Htuan "sport = :$1")" ]; }
base=$((21000 + ($$ % 300) * 10))
while port_in_use "$base" || port_in_use $((base + 1)) || port_in_use $((base + 2)) || port_in_use $((base + 3)); do
    base=$((base + 10))
    [ "$base" -lt 32000 ] || { echo "bench-cluster: no four free ports below 32000" >&2; exit 1; }
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

# One trial of a test script: RUNS native runs in a loop, then RUNS dara executions (random, seed
# 1); sets trial_native and trial_dara (runs or executions per second). The dara log is LOG.
# (Not run in a subshell: `group` must stay visible to the exit trap.)
#   rate_trial SCRIPT NODE RUNS LOG
rate_trial() {
    local script="$1" node="$2" n="$3" log="$4" start
    start=$(now)
    if ! in_group bash -c 'for _ in $(seq 1 "$1"); do "$2" "$3" "$4" >/dev/null 2>&1 || exit 1; done' loop "$n" "$script" "$node" "$base"; then
        echo "bench-cluster: $script failed natively" >&2
        return 1
    fi
    trial_native=$(awk "BEGIN{printf \"%.2f\", $n / ($(now) - $start)}")
    rm -rf "$out/run"
    start=$(now)
    if ! "$trace" -q -o "$out/run" --runs "$n" --strategy random --seed 1 --pin-cpu "$cpu" -- "$script" "$node" "$base" >"$log" 2>&1; then
        echo "bench-cluster: dara-trace on $script failed:" >&2
        tail -5 "$log" >&2
        return 1
    fi
    trial_dara=$(awk "BEGIN{printf \"%.2f\", $n / ($(now) - $start)}")
}

# 1. kv_test_ok.sh: RUNS native runs vs RUNS dara executions, TRIALS times alternately.
native_rates=() dara_rates=() kv_ratios=()
for _ in $(seq 1 "$trials"); do
    rate_trial "$kv_script" "$out/kv_node_ok" "$runs" "$out/kv.log" || exit 1
    native_rates+=("$trial_native")
    dara_rates+=("$trial_dara")
    kv_ratios+=("$(awk "BEGIN{printf \"%.2f\", $trial_dara / $trial_native}")")
done
kv_native=$(printf '%s\n' "${native_rates[@]}" | median)
kv_dara=$(printf '%s\n' "${dara_rates[@]}" | median)
kv_ratio=$(awk "BEGIN{printf \"%.2f\", $kv_dara / $kv_native}")

# 2. heartbeat_test.sh: one native run vs one dara execution (seed t), TRIALS times alternately.
native_s=() dara_ms=() vtime_s=() steps=() native_retries="" dara_retries=()
for t in $(seq 1 "$trials"); do
    start=$(now)
    if ! in_group "$hb_script" "$out/heartbeat" "$base" >"$out/hb-native.log"; then
        echo "bench-cluster: $hb_script failed natively:" >&2
        cat "$out/hb-native.log" >&2
        exit 1
    fi
    native_s+=("$(awk "BEGIN{printf \"%.3f\", $(now) - $start}")")
    native_retries=$(awk '/^client/ {r += $5} END {print r}' "$out/hb-native.log")

    rm -rf "$out/hb-run"
    start=$(now)
    # --closed: a single run would be a recording, which keeps pace with real time (its UDP
    # server could hear from outside); the benchmark measures what virtual time buys.
    if ! "$trace" --closed -o "$out/hb-run" --strategy random --seed "$t" --pin-cpu "$cpu" -- "$hb_script" "$out/heartbeat" "$base" >"$out/hb-dara.log" 2>&1; then
        echo "bench-cluster: dara-trace on $hb_script failed:" >&2
        tail -5 "$out/hb-dara.log" >&2
        exit 1
    fi
    dara_ms+=("$(awk "BEGIN{printf \"%.1f\", ($(now) - $start) * 1000}")")
    json=$("$info" info --json "$out/hb-run/trace.bin")
    vtime_s+=("$(sed -nE 's/.*"virtual_time_ns": ([0-9]+).*/\1/p' <<<"$json" | awk '{printf "%.2f", $1 / 1e9}')")
    steps+=("$(sed -nE 's/.*"steps": ([0-9]+).*/\1/p' <<<"$json")")
    dara_retries+=("$(awk '/^client/ {r += $5} END {print r}' "$out/hb-dara.log")")
done
hb_native=$(printf '%s\n' "${native_s[@]}" | median)
hb_dara=$(printf '%s\n' "${dara_ms[@]}" | median)
hb_speedup=$(awk "BEGIN{printf \"%.0f\", $hb_native * 1000 / $hb_dara}")
hb_vtime=$(printf '%s\n' "${vtime_s[@]}" | median)
hb_steps=$(printf '%s\n' "${steps[@]}" | median)
hb_dara_retries=$(printf '%s\n' "${dara_retries[@]}" | median)

# 3. raft_test.sh: RAFT_RUNS native runs vs RAFT_RUNS dara executions, TRIALS times alternately.
raft_native_rates=() raft_dara_rates=() raft_served=()
for _ in $(seq 1 "$trials"); do
    rate_trial "$raft_script" "$out/raft_node_ok" "$raft_runs" "$out/raft.log" || exit 1
    raft_native_rates+=("$trial_native")
    raft_dara_rates+=("$trial_dara")
    raft_served+=("$(grep -c 'all 5 writes acknowledged' "$out/raft.log" || true)")
done
raft_native=$(printf '%s\n' "${raft_native_rates[@]}" | median)
raft_dara=$(printf '%s\n' "${raft_dara_rates[@]}" | median)
raft_ratio=$(awk "BEGIN{printf \"%.2f\", $raft_dara / $raft_native}")

printf '%-52s %14s\n' "measurement (median of $trials)" "value"
printf '%-52s %14s\n' "kv_test_ok.sh natively (runs/s)" "$kv_native"
printf '%-52s %14s\n' "kv_test_ok.sh under dara, random (executions/s)" "$kv_dara"
printf '%-52s %14s\n' "ratio dara / native" "$kv_ratio"
printf '%-52s %14s\n' "  per trial, native (runs/s)" "${native_rates[*]}"
printf '%-52s %14s\n' "  per trial, dara (executions/s)" "${dara_rates[*]}"
printf '%-52s %14s\n' "  per trial, ratio" "${kv_ratios[*]}"
printf '%-52s %14s\n' "heartbeat_test.sh natively, wall (s)" "$hb_native"
printf '%-52s %14s\n' "heartbeat_test.sh, one dara execution, wall (ms)" "$hb_dara"
printf '%-52s %14s\n' "speed-up native wall / dara wall" "${hb_speedup}x"
printf '%-52s %14s\n' "  virtual time of the dara execution (s)" "$hb_vtime"
printf '%-52s %14s\n' "  scheduling steps of the dara execution" "$hb_steps"
printf '%-52s %14s\n' "  client retries, native / dara" "$native_retries / $hb_dara_retries"
printf '%-52s %14s\n' "  per trial, native (s)" "${native_s[*]}"
printf '%-52s %14s\n' "  per trial, dara (ms)" "${dara_ms[*]}"
printf '%-52s %14s\n' "  per trial, virtual (s)" "${vtime_s[*]}"
printf '%-52s %14s\n' "raft_test.sh natively (runs/s)" "$raft_native"
printf '%-52s %14s\n' "raft_test.sh under dara, random (executions/s)" "$raft_dara"
printf '%-52s %14s\n' "ratio dara / native" "$raft_ratio"
printf '%-52s %14s\n' "  per trial, native (runs/s)" "${raft_native_rates[*]}"
printf '%-52s %14s\n' "  per trial, dara (executions/s)" "${raft_dara_rates[*]}"
printf '%-52s %14s\n' "  dara executions that served all 5 writes" "${raft_served[*]} (of $raft_runs each)"
