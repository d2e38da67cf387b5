# Shared by the executions-to-first-bug benchmarks (bench-atomics.sh, bench-memsearch.sh); source
# it after `cd` to the repository root with `runs` set. Through bench-setup.sh it builds the tools
# and sets `lib`, `bin` (target/bench-bin/tsan) and `out`; it defines:
#
#   build_tsan NAME...                  tests/fixtures/NAME.c -> $bin/NAME (the TSan-ABI build line)
#   first_bug STRATEGY SEED CMD...      executions up to and including the first bug of a search of
#                                       CMD with --preempt-on memory, at most $runs executions
#                                       (empty if none)
#   seeds_row LABEL STRATEGY N CMD...   first_bug over seeds 1..N, as a Markdown row: seeds found
#                                       out of N, mean, median and worst executions
#
# DARA_TRACE=/path/to/other/dara-trace searches with another build (to compare).
bench_kind=tsan
source scripts/bench-setup.sh

build_tsan() {
    local prog
    for prog in "$@"; do
        clang -O1 -g -pthread -fsanitize=thread -mllvm -tsan-instrument-read-before-write "tests/fixtures/$prog.c" \
            -o "$bin/$prog" -fno-sanitize-link-runtime -L "$lib" -ldara_tsan -Wl,-rpath,"$lib"
    done
}

first_bug() {
    local strategy=$1 seed=$2
    shift 2
    rm -rf "$out/run"
    local log
    log=$("${DARA_TRACE:-target/release/dara-trace}" -q -o "$out/run" --strategy "$strategy" --seed "$seed" --runs "$runs" --no-minimize \
        --epoch 1790000000 --preempt-on memory -- "$@" 2>&1 >/dev/null || true)
    sed -n 's/.*(execution \([0-9]*\), .*/\1/p' <<<"$log" | head -1 | awk '{print $1 + 1}'
}

seeds_row() {
    local label=$1 strategy=$2 n=$3 seed k
    shift 3
    local found=()
    for seed in $(seq 1 "$n"); do
        k=$(first_bug "$strategy" "$seed" "$@")
        [ -n "$k" ] && found+=("$k")
    done
    stats_row "$label" "$strategy" "$n" ${found[@]+"${found[@]}"}
}

# A Markdown row: LABEL STRATEGY N K... with K the executions of each seed that found the bug.
stats_row() {
    local label=$1 strategy=$2 n=$3
    shift 3
    if [ $# -eq 0 ]; then
        echo "| $label | $strategy | 0/$n | - | - | - |"
        return
    fi
    local stats
    stats=$(printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1; s+=$1} END {printf "%.1f | %s | %s", s/NR, a[int((NR+1)/2)], a[NR]}')
    echo "| $label | $strategy | $#/$n | $stats |"
}
