#!/usr/bin/env bash
# Cost of memory-level preemption (docs/memory-preemption.md): for sancov builds (clang
# trace-pc-guard,trace-loads,trace-stores) of mem_lost_update (searched with --keep-going) and bench/mem_private_work, the
# executions per second and the steps (scheduling decisions) per execution with no memory points,
# with `--preempt-on memory` (the profile's shared-address filter) and with `memory:all` (every
# granule the profile saw); plus the profile's "N of M granules" line. Prints a Markdown table.
#
#   scripts/bench-memory.sh [RUNS]      (default 300 executions per row, random, seed 1)
#
# DARA_TRACE=/path/to/other/dara-trace runs another build instead (e.g. one without a change,
# to compare; its preload is the one next to it).
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-300}"

bench_kind=sancov
source scripts/bench-setup.sh
build() {
    clang -O1 -g -pthread -fsanitize-coverage=trace-pc-guard,trace-loads,trace-stores "$1" \
        -o "$bin/$(basename "${1%.c}")" -fno-sanitize-link-runtime -L "$lib" -ldara_cov -Wl,-rpath,"$lib"
}
build tests/fixtures/mem_lost_update.c
build bench/mem_private_work.c

echo "| program | --preempt-on | watched / profiled granules | steps per execution | executions/s |"
echo "|---|---|---|---|---|"
for prog in mem_lost_update mem_private_work; do
    for mode in none memory memory:all; do
        rm -rf "$out/run"
        flags=()
        [ "$mode" != none ] && flags=(--preempt-on "$mode")
        log=$("${DARA_TRACE:-target/release/dara-trace}" -o "$out/run" --runs "$runs" --seed 1 --keep-going --no-minimize "${flags[@]}" -- "$bin/$prog" 2>&1 || true)
        profile=$(sed -n 's/^memory profile: \([0-9]*\) of \([0-9]*\) granules.*/\1 \/ \2/p' <<<"$log")
        rate=$(sed -n 's/^executions .* (\([0-9]*\)\/s)$/\1/p' <<<"$log" | tail -1)
        steps=$(target/release/dara info "$out/run/trace.bin" 2>/dev/null | sed -n 's/^steps[^0-9]*\([0-9]*\).*/\1/p' | head -1)
        echo "| $prog | $mode | ${profile:--} | ${steps:-?} | ${rate:-?} |"
    done
done
