#!/usr/bin/env bash
# The ptrace path's costs (docs/ptrace.md), each as a ratio to a baseline measured in the same run:
#  1. a scheduling point: tests/fixtures/lock_pingpong.c built dynamically (preload) and statically
#     (ptrace agent), each under dara on one CPU, alternating trials, best of TRIALS: wall time per
#     step and per round, static / dynamic;
#  2. the Go key-value test script (tests/fixtures/scripts/go_kv_test.sh with the kv twin):
#     executions per second under dara against the script's native runs per second.
#
#   scripts/bench-ptrace.sh [ROUNDS [TRIALS]]      (default 5000 rounds, 3 trials)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-5000}"
trials="${2:-3}"
cpu="${BENCH_CPU:-0}"

./scripts/install-deps.sh
cargo build --release --workspace -q
trace=target/release/dara-trace
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

cc -O1 -g -pthread tests/fixtures/lock_pingpong.c -o "$out/lp_dynamic"
cc -O1 -g -pthread -static tests/fixtures/lock_pingpong.c -o "$out/lp_static"
(cd tests/fixtures/go && CGO_ENABLED=0 GOFLAGS=-mod=mod GOPROXY=off GOCACHE="$out/gocache" go build -trimpath -buildvcs=false -tags=ok -o "$out/kv_ok" ./kv)

# One execution of $1 under dara: "steps ms". `--closed`: one execution as a search makes it
# (a recording, `--runs 1`, takes coarse steps: no probes, locks without points).
steps_ms() {
    "$trace" -o "$out/run" --closed --pin-cpu "$cpu" --max-steps 100000000 -- "$1" "$rounds" 2>&1 >/dev/null | grep '^execution 0:' | sed -E 's/.*\(([0-9]+) steps, ([0-9.]+) ms\).*/\1 \2/'
}
best_dyn="" best_static=""
for _ in $(seq "$trials"); do
    for kind in dynamic static; do
        read -r steps ms < <(steps_ms "$out/lp_$kind")
        per=$(awk "BEGIN{printf \"%.1f\", $ms * 1000 / $steps}")
        if [ "$kind" = dynamic ]; then
            if [ -z "$best_dyn" ] || awk "BEGIN{exit !($per < ${best_dyn%% *})}"; then best_dyn="$per $steps $ms"; fi
        else
            if [ -z "$best_static" ] || awk "BEGIN{exit !($per < ${best_static%% *})}"; then best_static="$per $steps $ms"; fi
        fi
    done
done
read -r dyn_step dyn_steps dyn_ms <<<"$best_dyn"
read -r st_step st_steps st_ms <<<"$best_static"
dyn_round=$(awk "BEGIN{printf \"%.1f\", $dyn_ms * 1000 / $rounds}")
st_round=$(awk "BEGIN{printf \"%.1f\", $st_ms * 1000 / $rounds}")

# 2. The Go kv script: native runs per second, then executions per second under dara.
port=$((24000 + RANDOM % 1000))
start=$(date +%s.%N)
for i in $(seq 10); do
    tests/fixtures/scripts/go_kv_test.sh "$out/kv_ok" "$port" $((port + 1)) >/dev/null
done
native_rate=$(awk "BEGIN{printf \"%.1f\", 10 / ($(date +%s.%N) - $start)}")
dara_rate=$("$trace" -o "$out/kv" --runs 10 --pin-cpu "$cpu" -- tests/fixtures/scripts/go_kv_test.sh "$out/kv_ok" "$port" $((port + 1)) 2>&1 >/dev/null | grep -E '^executions +10 in' | sed -E 's/.*\(([0-9.]+)\/s\).*/\1/')
kv_ratio=$(awk "BEGIN{printf \"%.2f\", $dara_rate / $native_rate}")

printf '%-44s %10s %10s %12s %12s\n' "lock_pingpong $rounds rounds (best of $trials)" steps ms "us/step" "us/round"
printf '%-44s %10s %10s %12s %12s\n' "dynamic, preload" "$dyn_steps" "$dyn_ms" "$dyn_step" "$dyn_round"
printf '%-44s %10s %10s %12s %12s\n' "static, ptrace agent" "$st_steps" "$st_ms" "$st_step" "$st_round"
echo "ptrace / preload: $(awk "BEGIN{printf \"%.2f\", $st_step / $dyn_step}") a step, $(awk "BEGIN{printf \"%.2f\", $st_round / $dyn_round}") a round"
echo "Go kv test script: native ${native_rate}/s, under dara ${dara_rate}/s: ratio $kv_ratio"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
