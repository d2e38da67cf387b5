#!/usr/bin/env bash
# Search effort: for every buggy fixture and strategy, the number of executions until the first
# bug, over seeds 1..SEEDS (default 20): mean, worst, and how many seeds found nothing within
# RUNS (default 300) executions; then, for the systematic strategies (seed-independent), the
# executions to the first bug. Prints Markdown tables (recorded in docs/performance.md).
# STRATEGIES and SYSTEMATIC choose the strategies, FIXTURES (names) limits the fixtures. The
# rare_path fixtures are built with sanitizer coverage (gcc trace-pc + libdara_cov) so the
# coverage:* strategies have something to learn from; the others are not instrumented.
#
#   scripts/bench-search.sh [SEEDS] [RUNS]
#   STRATEGIES="random pct:3 coverage:unique coverage:frequency coverage:node-frequency" \
#       FIXTURES=rare_path SYSTEMATIC= scripts/bench-search.sh 20 2000
set -euo pipefail
cd "$(dirname "$0")/.."
seeds="${1:-20}"
runs="${2:-300}"
strategies=(${STRATEGIES:-pct:3 random})

./scripts/install-deps.sh
cargo build --release --workspace -q
bin=target/bench-bin
./scripts/build-fixtures.sh "$bin" >/dev/null 2>&1
lib="$PWD/target/release"
for name in rare_path rare_path_ok; do
    cc -O1 -g -pthread -Wall -fsanitize-coverage=trace-pc "tests/fixtures/$name.c" -o "$bin/$name" -L"$lib" -ldara_cov -Wl,-rpath,"$lib"
done
selected() { [ -z "${FIXTURES:-}" ] || [[ " $FIXTURES " == *" $1 "* ]]; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

printf '| fixture |'; for s in "${strategies[@]}"; do printf ' %s mean | %s worst | %s missed |' "$s" "$s" "$s"; done; echo
printf '|---|'; for _ in "${strategies[@]}"; do printf -- '---|---|---|'; done; echo
for src in tests/fixtures/*.c tests/fixtures/*.cc tests/fixtures/*.rs; do
    name=$(basename "${src%.*}")
    case "$name" in *_ok|spin_yield|long_sleep|raw_blocking|lock_pingpong|busy_loop|many_threads|cov_branches|cov_rust|mem_*|counter_incr|static_helper|proc_fork_exec|proc_spawn|kv_node|heartbeat) continue ;; esac  # mem_*: sancov builds, see bench-memory.sh
    selected "$name" || continue
    printf '| %s |' "$name"
    for strategy in "${strategies[@]}"; do
        total=0; worst=0; missed=0; found=0
        for seed in $(seq 1 "$seeds"); do
            rm -rf "$out/run"
            line=$(target/release/dara-trace -q -o "$out/run" --no-minimize --runs "$runs" --strategy "$strategy" --seed "$seed" -- "$bin/$name" 2>&1 >/dev/null | grep -E '\(execution [0-9]+,' || true)
            if [ -z "$line" ]; then missed=$((missed + 1)); continue; fi
            k=$(sed -E 's/.*\(execution ([0-9]+),.*/\1/' <<<"$line")
            n=$((k + 1)); total=$((total + n)); found=$((found + 1))
            [ "$n" -gt "$worst" ] && worst=$n
        done
        mean=$(awk "BEGIN{ if ($found) printf \"%.1f\", $total / $found; else print \"-\" }")
        [ "$found" -eq 0 ] && worst=-
        printf ' %s | %s | %s |' "$mean" "$worst" "$missed"
    done
    echo
done

systematic=(${SYSTEMATIC-dpor dfs:preempt dfs:delay})
[ ${#systematic[@]} -eq 0 ] && exit 0
echo
printf '| fixture |'; for s in "${systematic[@]}"; do printf ' %s |' "$s"; done; echo
printf '|---|'; for _ in "${systematic[@]}"; do printf -- '---|'; done; echo
for src in tests/fixtures/*.c tests/fixtures/*.cc tests/fixtures/*.rs; do
    name=$(basename "${src%.*}")
    case "$name" in *_ok|spin_yield|long_sleep|raw_blocking|lock_pingpong|busy_loop|many_threads|cov_branches|cov_rust|random_draw|mem_*|counter_incr|static_helper|proc_fork_exec|proc_spawn|kv_node|heartbeat) continue ;; esac
    selected "$name" || continue
    printf '| %s |' "$name"
    for strategy in "${systematic[@]}"; do
        rm -rf "$out/run"
        line=$(target/release/dara-trace -q -o "$out/run" --no-minimize --runs 5000 --strategy "$strategy" -- "$bin/$name" 2>&1 >/dev/null | grep -E '\(execution [0-9]+,' || true)
        if [ -z "$line" ]; then printf ' not found |'; continue; fi
        k=$(sed -E 's/.*\(execution ([0-9]+),.*/\1/' <<<"$line")
        printf ' %s |' "$((k + 1))"
    done
    echo
done
