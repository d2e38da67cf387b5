#!/usr/bin/env bash
# Handoff benchmark: the cost of one dara scheduling point on a two-thread lock ping-pong, as a
# ratio to a bare futex round trip between two threads pinned to one core, both measured now, on
# this machine. Also: executions per second against a plain fork+exec loop, the wall time
# of ten virtual minutes of sleep, and the cost of coverage collection (a sancov build against
# the plain build of the same program, both under dara). At the end, the cluster benchmarks
# (scripts/bench-cluster.sh: the 3-node kv test script's executions per second and a timeout-bound
# heartbeat workload, natively and under dara; about half a minute, BENCH_CLUSTER=0 skips them)
# and the real-server benchmark (scripts/bench-redis.sh: redis-server's smoke test natively and
# under dara, native redis-benchmark, one request's steps; about 20 s, BENCH_REDIS=0 skips it),
# and redis-server recorded under redis-benchmark from outside vs native (scripts/bench-outside.sh;
# about 2 min, BENCH_OUTSIDE=0 skips it).
#
#   scripts/bench.sh [ITERATIONS]        (default 50000 ping-pong rounds)
#
# Prints a table and the ratios; numbers are recorded in docs/performance.md.
set -euo pipefail
cd "$(dirname "$0")/.."
iters="${1:-50000}"
cpu="${BENCH_CPU:-0}"

./scripts/install-deps.sh
cargo build --release --workspace -q
bin=target/bench-bin
./scripts/build-fixtures.sh "$bin" >/dev/null
trace=target/release/dara-trace
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# 1. The floor: a futex round trip between two threads on one core (best of 5).
floor=""
for _ in 1 2 3 4 5; do
    ns=$("$bin/futex_pingpong" 200000 "$cpu" | awk '/futex_roundtrip_ns/ {print $2}')
    if [ -z "$floor" ] || awk "BEGIN{exit !($ns < $floor)}"; then floor=$ns; fi
done

# 2. dara: the same shape of work, gated. Per scheduling point = execution wall time / steps.
best=""
steps=0
for _ in 1 2 3; do
    line=$("$trace" -o "$out" --pin-cpu "$cpu" --max-steps 100000000 -- "$bin/lock_pingpong" "$iters" 2>&1 >/dev/null | grep '^execution 0:')
    steps=$(sed -E 's/.*\(([0-9]+) steps, ([0-9.]+) ms\).*/\1/' <<<"$line")
    ms=$(sed -E 's/.*\(([0-9]+) steps, ([0-9.]+) ms\).*/\2/' <<<"$line")
    per=$(awk "BEGIN{printf \"%.0f\", $ms * 1e6 / $steps}")
    if [ -z "$best" ] || [ "$per" -lt "$best" ]; then best=$per; fi
done
ratio=$(awk "BEGIN{printf \"%.2f\", $best / $floor}")

# 3. Executions per second on a small fixture (demo_ok: 3 threads, ~15 scheduling points),
#    against fork+exec+wait of the same binary without dara.
plain=$("$bin/spawn_loop" 300 "$bin/demo_ok" | awk '/spawn_per_sec/ {print $2}')
dara_rate=$("$trace" -o "$out" --runs 300 --pin-cpu "$cpu" -- "$bin/demo_ok" 2>&1 >/dev/null | grep -E '^executions +300 in' | sed -E 's/.*\(([0-9.]+)\/s\).*/\1/')
exec_ratio=$(awk "BEGIN{printf \"%.2f\", $dara_rate / $plain}")

# 4. Virtual time: ten minutes of sleeping.
sleep_line=$("$trace" -o "$out" -- "$bin/long_sleep" 2>&1 >/dev/null | grep '^execution 0:')
sleep_ms=$(sed -E 's/.*\(([0-9]+) steps, ([0-9.]+) ms\).*/\2/' <<<"$sleep_line")

# 5. Coverage collection: the same branchy two-thread program plain, built with gcc trace-pc and
#    with clang trace-pc-guard, each under dara (best of 3 wall times of one execution).
lib="$PWD/target/release"
cc -O1 -g -pthread bench/cov_work.c -o "$out/cov_plain"
cc -O1 -g -pthread -fsanitize-coverage=trace-pc bench/cov_work.c -L"$lib" -ldara_cov -Wl,-rpath,"$lib" -o "$out/cov_gcc"
clang -O1 -g -pthread -fsanitize-coverage=trace-pc-guard bench/cov_work.c -fno-sanitize-link-runtime -L"$lib" -ldara_cov -Wl,-rpath,"$lib" -o "$out/cov_clang"
best_ms() {
    local best=""
    for _ in 1 2 3; do
        local line ms
        line=$("$trace" -o "$out/cov-run" --pin-cpu "$cpu" -- "$@" 2>&1 >/dev/null | grep '^execution 0:')
        ms=$(sed -E 's/.*steps, ([0-9.]+) ms.*/\1/' <<<"$line")
        if [ -z "$best" ] || awk "BEGIN{exit !($ms < $best)}"; then best=$ms; fi
    done
    echo "$best"
}
cov_plain_ms=$(best_ms "$out/cov_plain" 100000)
cov_gcc_ms=$(best_ms "$out/cov_gcc" 100000)
cov_clang_ms=$(best_ms "$out/cov_clang" 100000)
cov_gcc_ratio=$(awk "BEGIN{printf \"%.2f\", $cov_gcc_ms / $cov_plain_ms}")
cov_clang_ratio=$(awk "BEGIN{printf \"%.2f\", $cov_clang_ms / $cov_plain_ms}")

# 6. A bash test script of three processes (tests/fixtures/scripts/counter_test_ok.sh: two
#    background workers that nap 1 ms each, a wait, a check), natively vs under dara.
cc -O1 -g -pthread tests/fixtures/counter_incr.c -o "$out/counter_incr"
mkdir -p "$out/work"
script=tests/fixtures/scripts/counter_test_ok.sh
start=$(date +%s.%N)
for _ in $(seq 1 100); do "$script" "$out/counter_incr" "$out/work" >/dev/null; done
native_rate=$(awk "BEGIN{printf \"%.0f\", 100 / ($(date +%s.%N) - $start)}")
script_rate=$("$trace" -o "$out/script-run" --runs 100 --pin-cpu "$cpu" -- "$script" "$out/counter_incr" "$out/work" 2>&1 >/dev/null | grep -E '^executions +100 in' | sed -E 's/.*\(([0-9.]+)\/s\).*/\1/')
script_ratio=$(awk "BEGIN{printf \"%.2f\", $script_rate / $native_rate}")

printf '%-48s %12s\n' "measurement" "value"
printf '%-48s %12s\n' "futex round trip, 2 threads on one core (ns)" "$floor"
printf '%-48s %12s\n' "dara scheduling point, lock ping-pong (ns)" "$best"
printf '%-48s %12s\n' "  scheduling points in that run" "$steps"
printf '%-48s %12s\n' "ratio scheduling point / futex round trip" "$ratio"
printf '%-48s %12s\n' "plain fork+exec of demo_ok (per s)" "$plain"
printf '%-48s %12s\n' "dara executions of demo_ok (per s)" "$dara_rate"
printf '%-48s %12s\n' "ratio dara / plain" "$exec_ratio"
printf '%-48s %12s\n' "600 s of virtual sleep, wall time (ms)" "$sleep_ms"
printf '%-48s %12s\n' "cov_work under dara, plain build (ms)" "$cov_plain_ms"
printf '%-48s %12s\n' "  gcc trace-pc build (ms)" "$cov_gcc_ms"
printf '%-48s %12s\n' "  clang trace-pc-guard build (ms)" "$cov_clang_ms"
printf '%-48s %12s\n' "ratio coverage / plain, gcc trace-pc" "$cov_gcc_ratio"
printf '%-48s %12s\n' "ratio coverage / plain, clang trace-pc-guard" "$cov_clang_ratio"
printf '%-48s %12s\n' "counter_test_ok.sh natively (runs/s)" "$native_rate"
printf '%-48s %12s\n' "counter_test_ok.sh under dara (executions/s)" "$script_rate"
printf '%-48s %12s\n' "ratio dara / native" "$script_ratio"

# 7. Multi-process test scripts over loopback (scripts/bench-cluster.sh).
if [ "${BENCH_CLUSTER:-1}" != 0 ]; then
    echo
    ./scripts/bench-cluster.sh
fi

# 8. A real server: Debian's redis-server (scripts/bench-redis.sh).
if [ "${BENCH_REDIS:-1}" != 0 ]; then
    echo
    ./scripts/bench-redis.sh
fi

# 9. The same server recorded under outside load (scripts/bench-outside.sh).
if [ "${BENCH_OUTSIDE:-1}" != 0 ]; then
    echo
    ./scripts/bench-outside.sh
fi
