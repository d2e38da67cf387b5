#!/usr/bin/env bash
# Executions to the first bug for the atomics fixtures (docs/memory-preemption.md): the
# ThreadSanitizer-ABI builds (libdara_tsan.so) of atomic_check_then_act, chase_lev and aba_stack, searched
# with `--preempt-on memory` by random, pct:3 and pct:4 over seeds 1..SEEDS (at most RUNS
# executions each), and by dpor once (seed-independent). Prints a Markdown table: mean, median
# and worst executions to the first bug, and how many seeds found it.
#
#   scripts/bench-atomics.sh [SEEDS] [RUNS]      (default 10 seeds, 2000 executions)
set -euo pipefail
cd "$(dirname "$0")/.."
seeds="${1:-10}"
runs="${2:-2000}"
source scripts/first-bug.sh
build_tsan atomic_check_then_act chase_lev aba_stack

echo "| program | strategy | seeds found | mean | median | worst |"
echo "|---|---|---|---|---|---|"
for prog in atomic_check_then_act chase_lev aba_stack; do
    for strategy in random pct:3 pct:4 dpor; do
        n=$seeds
        [ "$strategy" = dpor ] && n=1
        seeds_row "$prog" "$strategy" "$n" "$bin/$prog"
    done
done
