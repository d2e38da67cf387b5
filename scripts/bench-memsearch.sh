#!/usr/bin/env bash
# Executions to the first bug for the memory-level search families (docs/memory-preemption.md,
# issue 17): the ThreadSanitizer-ABI builds (libdara_tsan.so) of mem_reorder with 3, 5, 10 and 20
# setters, mem_wrong_lock and mem_two_stage (100 writers), and of the atomics fixtures
# (atomic_check_then_act, chase_lev, aba_stack), searched with `--preempt-on memory` by random,
# pct:3, pos and rf over seeds 1..SEEDS, at most RUNS executions each. Prints a Markdown
# table: how many seeds found the bug, and mean, median and worst executions to it (over the
# seeds that found it). Counts, not times, so a loaded machine does not change them.
#
#   scripts/bench-memsearch.sh [SEEDS] [RUNS] [STRATEGY...]   (default 20 seeds, 500 executions,
#                                                             random pct:3 pos rf)
set -euo pipefail
cd "$(dirname "$0")/.."
seeds="${1:-20}"
runs="${2:-500}"
shift $(( $# < 2 ? $# : 2 ))
strategies=("$@")
[ ${#strategies[@]} -eq 0 ] && strategies=(random pct:3 pos rf)
source scripts/first-bug.sh
build_tsan mem_reorder mem_wrong_lock mem_two_stage atomic_check_then_act chase_lev aba_stack

echo "| family | strategy | seeds found | mean | median | worst |"
echo "|---|---|---|---|---|---|"
# Family label, then the fixture and its argument if any.
for family in "reorder 3:mem_reorder 3" "reorder 5:mem_reorder 5" "reorder 10:mem_reorder 10" "reorder 20:mem_reorder 20" \
    "wrong_lock:mem_wrong_lock" "two_stage:mem_two_stage" "atomic_check_then_act:atomic_check_then_act" \
    "chase_lev:chase_lev" "aba_stack:aba_stack"; do
    read -r prog arg <<<"${family#*:}"
    family=${family%%:*}
    command=("$bin/$prog")
    [ -n "${arg:-}" ] && command+=("$arg")
    for strategy in "${strategies[@]}"; do
        seeds_row "$family" "$strategy" "$seeds" "${command[@]}"
    done
done
