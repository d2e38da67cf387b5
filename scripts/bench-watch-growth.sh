#!/usr/bin/env bash
# Executions to the first bug of tests/fixtures/mem_late_sharing.c, whose racy counter only
# becomes shared on a path the profiling run does not take, so only the adaptive watch set
# (docs/memory-preemption.md, dara_explorer::watch_growth) can find it: its ThreadSanitizer-ABI
# build searched with `--preempt-on memory` by random, pct:3, pos, rf and dpor over seeds
# 1..SEEDS, at most RUNS executions each. Prints a Markdown table (counts, not times). With
# DARA_TRACE set to a build without the adaptive set, every row should read 0/SEEDS.
#
#   scripts/bench-watch-growth.sh [SEEDS] [RUNS]    (default 20 seeds, 200 executions)
set -euo pipefail
cd "$(dirname "$0")/.."
seeds="${1:-20}"
runs="${2:-200}"
source scripts/first-bug.sh
build_tsan mem_late_sharing

echo "| program | strategy | seeds found | mean | median | worst |"
echo "|---|---|---|---|---|---|"
for strategy in random pct:3 pos rf; do
    seeds_row mem_late_sharing "$strategy" "$seeds" "$bin/mem_late_sharing"
done
# dpor does not depend on the seed.
seeds_row mem_late_sharing dpor 1 "$bin/mem_late_sharing"
