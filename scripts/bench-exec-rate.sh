#!/usr/bin/env bash
# Executions per second against plain fork+exec (issue 17, item 5; docs/performance.md): a search
# of RUNS executions of tests/fixtures/demo_ok.c (3 threads, ~15 scheduling points) under
# dara-trace with its fork server, the same with --no-fork-server, and bench/spawn_loop.c doing
# fork+exec+wait of the same binary RUNS times, alternated TRIALS times in the same run (the
# machine's load moves every number; the ratios of one trial are taken side by side). The search
# is pinned to CPU 0 like an execution of `--jobs 1` is; the plain loop is left to the kernel.
# Prints every trial and the medians.
#
#   scripts/bench-exec-rate.sh [RUNS] [TRIALS] [PROGRAM]   (default 300 executions, 5 trials, demo_ok)
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-300}"
trials="${2:-5}"

bench_kind=plain
source scripts/bench-setup.sh
cc -O2 -pthread tests/fixtures/demo_ok.c -o "$bin/demo_ok"
cc -O2 bench/spawn_loop.c -o "$bin/spawn_loop"
program="${3:-$bin/demo_ok}"

# Executions per second of one search (dara-trace's own count and wall time).
dara_rate() {
    rm -rf "$out/run"
    target/release/dara-trace -o "$out/run" --runs "$runs" --pin-cpu 0 --no-minimize "$@" -- "$program" 2>&1 >/dev/null \
        | sed -n -E 's/^executions +[0-9]+ in [0-9.]+ s \(([0-9.]+)\/s\).*/\1/p'
}

printf '%-6s %10s %14s %10s %12s %10s\n' trial "plain/s" "fork-server/s" ratio "fork+exec/s" ratio
rows=()
for t in $(seq 1 "$trials"); do
    plain=$("$bin/spawn_loop" "$runs" "$program" | awk '/spawn_per_sec/ {print $2}')
    served=$(dara_rate)
    launched=$(dara_rate --no-fork-server)
    r1=$(awk -v a="$served" -v b="$plain" 'BEGIN { printf "%.2f", a / b }')
    r2=$(awk -v a="$launched" -v b="$plain" 'BEGIN { printf "%.2f", a / b }')
    printf '%-6s %10s %14s %10s %12s %10s\n' "$t" "$plain" "$served" "$r1" "$launched" "$r2"
    rows+=("$plain $served $r1 $launched $r2")
done
median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
col() { printf '%s\n' "${rows[@]}" | awk -v c="$1" '{ print $c }' | median; }
printf '%-6s %10s %14s %10s %12s %10s\n' median "$(col 1)" "$(col 2)" "$(col 3)" "$(col 4)" "$(col 5)"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
