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

cargo build --release --workspace -q
lib="$PWD/target/release"
bin=target/bench-bin/tsan
mkdir -p "$bin"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for prog in atomic_check_then_act chase_lev aba_stack; do
    clang -O1 -g -pthread -fsanitize=thread -mllvm -tsan-instrument-read-before-write "tests/fixtures/$prog.c" \
        -o "$bin/$prog" -fno-sanitize-link-runtime -L "$lib" -ldara_tsan -Wl,-rpath,"$lib"
done

# Executions up to and including the first bug (empty if none within RUNS).
first_bug() {
    rm -rf "$out/run"
    local log
    log=$(target/release/dara-trace -q -o "$out/run" --strategy "$2" --seed "$3" --runs "$runs" --no-minimize \
        --preempt-on memory -- "$bin/$1" 2>/dev/null || true)
    sed -n 's/.*(execution \([0-9]*\), .*/\1/p' <<<"$log" | head -1 | awk '{print $1 + 1}'
}

echo "| program | strategy | seeds found | mean | median | worst |"
echo "|---|---|---|---|---|---|"
for prog in atomic_check_then_act chase_lev aba_stack; do
    for strategy in random pct:3 pct:4 dpor; do
        n=$seeds
        [ "$strategy" = dpor ] && n=1
        found=()
        for seed in $(seq 1 "$n"); do
            k=$(first_bug "$prog" "$strategy" "$seed")
            [ -n "$k" ] && found+=("$k")
        done
        if [ ${#found[@]} -eq 0 ]; then
            echo "| $prog | $strategy | 0/$n | - | - | - |"
            continue
        fi
        stats=$(printf '%s\n' "${found[@]}" | sort -n | awk '{a[NR]=$1; s+=$1} END {printf "%.1f | %s | %s", s/NR, a[int((NR+1)/2)], a[NR]}')
        echo "| $prog | $strategy | ${#found[@]}/$n | $stats |"
    done
done
