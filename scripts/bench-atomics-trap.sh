#!/usr/bin/env bash
# Cost of `--preempt-on atomics` on a prebuilt binary (docs/memory-preemption.md): bench/atomic_counter
# built with plain `cc -O2` (two threads, ROUNDS `lock xadd`s each on one shared counter), searched
# with random for RUNS executions without memory points and with `--preempt-on atomics`, in the
# same run; prints the executions per second, the steps per execution and the ratio, plus the same
# for the redis smoke script (tests/fixtures/scripts/redis_smoke.sh) when redis is installed; and,
# as the baseline of what a trap adds to a scheduling point, the same program making as many
# sched_yield points instead (`yield` rows: none and atomics alike have no trap there).
#
#   scripts/bench-atomics-trap.sh [RUNS] [ROUNDS]   (default 20 executions, 1000 rounds)
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-20}"
rounds="${2:-1000}"

bench_kind=plain
source scripts/bench-setup.sh
cc -O2 -pthread bench/atomic_counter.c -o "$bin/atomic_counter"

# Seconds one search of `runs` executions took, and the steps of its last execution.
measure() {
    rm -rf "$out/run"
    local start end
    start=$(date +%s.%N)
    target/release/dara-trace -q -o "$out/run" --runs "$runs" --seed 1 --no-minimize "$@" >/dev/null 2>&1 || true
    end=$(date +%s.%N)
    local steps
    steps=$(target/release/dara info "$out/run/trace.bin" 2>/dev/null | sed -n 's/^steps[^0-9]*\([0-9]*\).*/\1/p' | head -1)
    echo "$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.3f", b - a }') ${steps:-?}"
}

echo "| program | --preempt-on | steps per execution | executions/s | ratio to none |"
echo "|---|---|---|---|---|"
row() {
    local name=$1; shift
    read -r plain_s plain_steps < <(measure "$@")
    read -r trap_s trap_steps < <(measure --preempt-on atomics "$@")
    awk -v name="$name" -v runs="$runs" -v p="$plain_s" -v t="$trap_s" -v ps="$plain_steps" -v ts="$trap_steps" 'BEGIN {
        printf "| %s | none | %s | %.1f | 1.00 |\n", name, ps, runs / p
        printf "| %s | atomics | %s | %.1f | %.2f |\n", name, ts, runs / t, p / t
    }'
}
row "atomic_counter $rounds" -- "$bin/atomic_counter" "$rounds"
row "atomic_counter $rounds yield" -- "$bin/atomic_counter" "$rounds" yield
if command -v redis-server >/dev/null; then
    row "redis smoke script" -- tests/fixtures/scripts/redis_smoke.sh "$(shuf -i 20000-30000 -n 1)"
fi
