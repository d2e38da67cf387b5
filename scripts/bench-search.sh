#!/usr/bin/env bash
# Search effort: for every buggy fixture and strategy, the number of executions until the first
# bug, over seeds 1..SEEDS (default 20): mean, worst, and how many seeds found nothing within
# RUNS (default 300) executions; then, for the systematic strategies (seed-independent), the
# executions to the first bug. Prints Markdown tables (recorded in docs/performance.md).
#
#   scripts/bench-search.sh [SEEDS] [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
seeds="${1:-20}"
runs="${2:-300}"
strategies=(${STRATEGIES:-pct:3 random})

./scripts/install-deps.sh
cargo build --release --workspace -q
bin=target/bench-bin
./scripts/build-fixtures.sh "$bin" >/dev/null 2>&1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

printf '| fixture |'; for s in "${strategies[@]}"; do printf ' %s mean | %s worst | %s missed |' "$s" "$s" "$s"; done; echo
printf '|---|'; for _ in "${strategies[@]}"; do printf -- '---|---|---|'; done; echo
for src in tests/fixtures/*.c tests/fixtures/*.cc tests/fixtures/*.rs; do
    name=$(basename "${src%.*}")
    case "$name" in *_ok|spin_yield|long_sleep|raw_blocking|lock_pingpong|busy_loop|many_threads|cov_branches|mem_*) continue ;; esac  # mem_*: sancov builds, see bench-memory.sh
    printf '| %s |' "$name"
    for strategy in "${strategies[@]}"; do
        total=0; worst=0; missed=0; found=0
        for seed in $(seq 1 "$seeds"); do
            rm -rf "$out/run"
            line=$(target/release/dara-trace -q -o "$out/run" --runs "$runs" --strategy "$strategy" --seed "$seed" -- "$bin/$name" | grep -E '\(execution [0-9]+,' || true)
            if [ -z "$line" ]; then missed=$((missed + 1)); continue; fi
            k=$(sed -E 's/.*\(execution ([0-9]+),.*/\1/' <<<"$line")
            n=$((k + 1)); total=$((total + n)); found=$((found + 1))
            [ "$n" -gt "$worst" ] && worst=$n
        done
        mean=$(awk "BEGIN{ if ($found) printf \"%.1f\", $total / $found; else print \"-\" }")
        printf ' %s | %s | %s |' "$mean" "$worst" "$missed"
    done
    echo
done

systematic=(${SYSTEMATIC:-dpor dfs:preempt dfs:delay})
echo
printf '| fixture |'; for s in "${systematic[@]}"; do printf ' %s |' "$s"; done; echo
printf '|---|'; for _ in "${systematic[@]}"; do printf -- '---|'; done; echo
for src in tests/fixtures/*.c tests/fixtures/*.cc tests/fixtures/*.rs; do
    name=$(basename "${src%.*}")
    case "$name" in *_ok|spin_yield|long_sleep|raw_blocking|lock_pingpong|busy_loop|many_threads|cov_branches|random_draw) continue ;; esac
    printf '| %s |' "$name"
    for strategy in "${systematic[@]}"; do
        rm -rf "$out/run"
        line=$(target/release/dara-trace -q -o "$out/run" --runs 5000 --strategy "$strategy" -- "$bin/$name" | grep -E '\(execution [0-9]+,' || true)
        if [ -z "$line" ]; then printf ' not found |'; continue; fi
        k=$(sed -E 's/.*\(execution ([0-9]+),.*/\1/' <<<"$line")
        printf ' %s |' "$((k + 1))"
    done
    echo
done
