# Shared by the executions-to-first-bug benchmarks (bench-atomics.sh, bench-memsearch.sh); source
# it after `cd` to the repository root. It builds the tools, sets `lib` (where libdara_tsan.so
# is), `bin` (where ThreadSanitizer-ABI fixture builds go) and `out` (a scratch directory removed
# on exit), and defines:
#
#   build_tsan NAME...                  tests/fixtures/NAME.c -> $bin/NAME (the TSan-ABI build line)
#   first_bug STRATEGY SEED CMD...      executions up to and including the first bug of a search of
#                                       CMD with --preempt-on memory, at most $runs executions
#                                       (empty if none)
#   stats_row LABEL STRATEGY N K...     a Markdown row: seeds found out of N, mean, median, worst
cargo build --release --workspace -q
lib="$PWD/target/release"
bin=target/bench-bin/tsan
mkdir -p "$bin"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

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
    log=$(target/release/dara-trace -q -o "$out/run" --strategy "$strategy" --seed "$seed" --runs "$runs" --no-minimize \
        --epoch 1790000000 --preempt-on memory -- "$@" 2>/dev/null || true)
    sed -n 's/.*(execution \([0-9]*\), .*/\1/p' <<<"$log" | head -1 | awk '{print $1 + 1}'
}

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
