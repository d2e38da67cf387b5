#!/usr/bin/env bash
# Executions to the first bug for the memory-level search families (docs/memory-preemption.md,
# issue 17): the ThreadSanitizer-ABI builds (libdara_tsan.so) of mem_reorder with 3, 5, 10 and 20
# setters, mem_wrong_lock and mem_two_stage (100 writers), searched with `--preempt-on memory` by
# random, pct:3, pos and rf over seeds 1..SEEDS, at most RUNS executions each. Prints a Markdown
# table: how many seeds found the bug, and mean, median and worst executions to it (over the
# seeds that found it). Counts, not times, so a loaded machine does not change them.
#
#   scripts/bench-memsearch.sh [SEEDS] [RUNS] [STRATEGIES...]   (default 20 seeds, 500 executions,
#                                                               random pct:3 pos rf)
set -euo pipefail
cd "$(dirname "$0")/.."
seeds="${1:-20}"
runs="${2:-500}"
shift $(( $# < 2 ? $# : 2 ))
strategies=("$@")
[ ${#strategies[@]} -eq 0 ] && strategies=(random pct:3 pos rf)

cargo build --release --workspace -q
lib="$PWD/target/release"
bin=target/bench-bin/tsan
mkdir -p "$bin"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for prog in mem_reorder mem_wrong_lock mem_two_stage; do
    clang -O1 -g -pthread -fsanitize=thread -mllvm -tsan-instrument-read-before-write "tests/fixtures/$prog.c" \
        -o "$bin/$prog" -fno-sanitize-link-runtime -L "$lib" -ldara_tsan -Wl,-rpath,"$lib"
done

# Executions up to and including the first bug (empty if none within RUNS).
first_bug() {
    local strategy=$1 seed=$2
    shift 2
    rm -rf "$out/run"
    local log
    log=$(target/release/dara-trace -q -o "$out/run" --strategy "$strategy" --seed "$seed" --runs "$runs" --no-minimize \
        --epoch 1790000000 --preempt-on memory -- "$@" 2>/dev/null || true)
    sed -n 's/.*(execution \([0-9]*\), .*/\1/p' <<<"$log" | head -1 | awk '{print $1 + 1}'
}

echo "| family | strategy | seeds found | mean | median | worst |"
echo "|---|---|---|---|---|---|"
for family in "reorder 3" "reorder 5" "reorder 10" "reorder 20" "wrong_lock" "two_stage"; do
    set -- $family
    command=("$bin/mem_$1" "${@:2}")
    for strategy in "${strategies[@]}"; do
        found=()
        for seed in $(seq 1 "$seeds"); do
            k=$(first_bug "$strategy" "$seed" "${command[@]}")
            [ -n "$k" ] && found+=("$k")
        done
        if [ ${#found[@]} -eq 0 ]; then
            echo "| $family | $strategy | 0/$seeds | - | - | - |"
            continue
        fi
        stats=$(printf '%s\n' "${found[@]}" | sort -n | awk '{a[NR]=$1; s+=$1} END {printf "%.1f | %s | %s", s/NR, a[int((NR+1)/2)], a[NR]}')
        echo "| $family | $strategy | ${#found[@]}/$seeds | $stats |"
    done
done
