#!/usr/bin/env bash
# Real multithreaded programs recorded by `dara-trace` against the same programs run natively, in
# the same run (docs/real-programs.md; docs/performance.md, "Real programs recorded"):
#
#  * tools: wall time natively and recorded, ratio native / recorded (the recorded run's share of
#    native speed): pigz -p 4 on about 20 MB of text, xz -T 4 on 5 MB of it (256 KiB blocks), sort
#    --parallel=4 -n of 600,000 numbers, python3 threads (four on the GIL, then a queue with timed
#    gets), tests/fixtures/sqlite_threads (four threads inserting into one WAL database);
#  * memcached -t 4 under memcslap -c 4 (set, then get) from outside: memcslap's own times, with
#    memcached native and recorded; memcslap on CPU 1, memcached (and dara, which shares the
#    target's CPU as always) on CPU 0;
#  * tests/fixtures/uv_echo (a libuv echo server) with two clients of LINES lines each from
#    outside: the clients' wall time, with the server native and recorded;
#  * postgres 15 (as the user nobody) under `pgbench -S -c 2 -T 5` from outside: transactions per
#    second, ratio recorded / native. The recording is stopped with Ctrl-C (postgres's fast
#    shutdown; the script sends a second one after a second in case the first did not end it).
#
# TRIALS alternating trials, medians. The last recording of each is replayed with --verify
# (checked; postgres's replay runs with its address space bounded to 4 GiB, as a guard). Servers are stopped with Ctrl-C, a second
# one if the first does not reach them (issue 14, item 4).
#
#   scripts/bench-real.sh [TRIALS [KEYS [LINES]]]   (default 3 trials, 2000 keys per memcslap
#                                                    thread, 2000 lines per echo client)
#   ONLY="xz sqlite" scripts/bench-real.sh          (a subset: pigz xz sort python sqlite
#                                                    memcached uv postgres)
#
# Exits non-zero if a run fails.
set -euo pipefail
cd "$(dirname "$0")/.."
trials="${1:-3}"
keys="${2:-2000}"
lines="${3:-2000}"
only="${ONLY:-pigz xz sort python sqlite memcached uv postgres}"
wanted() { [[ " $only " == *" $1 "* ]]; }

./scripts/install-deps.sh
cargo build --release --workspace -q
trace=$PWD/target/release/dara-trace
replay=$PWD/target/release/dara-replay
pg=/usr/lib/postgresql/15/bin

out=$(mktemp -d)
chmod 755 "$out"
server=""
cleanup() {
    if [ -n "$server" ]; then kill -INT "$server" 2>/dev/null || true; sleep 1; kill -INT "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; fi
    rm -rf "$out"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
seconds() { /usr/bin/time -f %e "$@" 2>&1 >/dev/null | tail -1; }
results=()
# result NAME NATIVE RECORDED UNIT RATIO: one line of the table printed at the end.
result() { results+=("$(printf '%-46s %11s %11s %5s %6.2f' "$1" "$2" "$3" "$4" "$5")"); }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.4f", (b > 0 ? a / b : 0) }'; }
# summarize LABEL UNIT: the medians of the arrays native and recorded as a result; UNIT s is a
# time (ratio native / recorded), any other a rate (ratio recorded / native).
summarize() {
    local n r
    n=$(printf '%s\n' "${native[@]}" | median)
    r=$(printf '%s\n' "${recorded[@]}" | median)
    if [ "$2" = s ]; then result "$1" "$n" "$r" s "$(ratio "$n" "$r")"; else result "$1" "$n" "$r" "$2" "$(ratio "$r" "$n")"; fi
}

verify() {
    local name=$1 file=$2
    [ "${REPLAY:-1}" = 1 ] || return 0
    (ulimit -v $((4 << 20)); "$replay" -q --verify "$file") >"$out/verify.log" 2>&1 \
        || { tail -5 "$out/verify.log" >&2; echo "bench-real: the $name recording did not replay" >&2; exit 1; }
    grep -q 'verify: 2 more executions identical' "$out/verify.log" || { echo "bench-real: $name: --verify did not compare" >&2; exit 1; }
}

# compare NAME LABEL CMD...: wall time of CMD natively and recorded, TRIALS times alternating.
compare() {
    local name=$1 label=$2
    shift 2
    native=() recorded=()
    for trial in $(seq 1 "$trials"); do
        native+=("$(seconds "$@")")
        rm -rf "$out/$name"
        recorded+=("$(seconds "$trace" -q -o "$out/$name" -- "$@")")
        echo "trial $trial: $name native ${native[-1]} s, recorded ${recorded[-1]} s" >&2
    done
    verify "$name" "$out/$name/trace.bin"
    summarize "$label" s
}

# The same text every time (words from a fixed awk generator).
awk 'BEGIN { srand(1); split("dara records one schedule of real threads exactly", w, " ");
             for (i = 0; i < 300000; i++) { for (j = 0; j < 8; j++) printf "%s ", w[int(rand() * 8) + 1]; print i } }' >"$out/input.txt"
wanted pigz && compare pigz "pigz -p 4, 20 MB of text (wall)" pigz -p 4 -k -f "$out/input.txt"
head -c 5000000 "$out/input.txt" >"$out/xz.txt"
wanted xz && compare xz "xz -T 4, 5 MB of text (wall)" xz -T 4 --block-size=256KiB -3 -k -f "$out/xz.txt"
awk 'BEGIN { srand(2); for (i = 0; i < 600000; i++) print int(rand() * 1000000007) }' >"$out/numbers.txt"
wanted sort && compare sort "sort --parallel=4 -n, 600,000 numbers (wall)" sort --parallel=4 -S 100M -n -o "$out/sorted.txt" "$out/numbers.txt"
wanted python && compare python "python3, 4 GIL threads + queue (wall)" /usr/bin/python3 tests/fixtures/python_threads.py 300000 2000
cc -O1 -g -pthread -o "$out/sqlite_threads" tests/fixtures/sqlite_threads.c -lsqlite3
cc -O1 -g -pthread -o "$out/uv_echo" tests/fixtures/uv_echo.c -luv
wanted sqlite && compare sqlite "sqlite_threads, 4 threads x 40 rows, WAL (wall)" "$out/sqlite_threads" "$out/test.db"

port_in_use() { command -v ss >/dev/null && [ -n "$(ss -Htuan "sport = :$1")" ]; }
port=$((24000 + ($$ % 300) * 10))
while port_in_use "$port"; do port=$((port + 1)); done

wait_ready() {
    for _ in $(seq 1 1200); do
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0
        sleep 0.05
    done
    echo "bench-real: nothing answered on port $port" >&2
    return 1
}

stop_recording() {
    kill -INT "$server"
    for _ in $(seq 1 50); do kill -0 "$server" 2>/dev/null || break; sleep 0.1; done
    kill -INT "$server" 2>/dev/null || true
    wait "$server" || true
    server=""
}

if wanted memcached; then
    memcached_args=(memcached -u root -t 4 -U 0 -l 127.0.0.1 -p "$port")
    # memcslap's time for one test (seconds).
    slap() {
        taskset -c 1 memcslap -s "127.0.0.1:$port" -c 4 -e "$keys" -t "$1" 2>&1 | awk -v t="$1" '$0 ~ "Time to " t " " { print $(NF - 1) }'
    }
    native_set=() native_get=() dara_set=() dara_get=()
    for trial in $(seq 1 "$trials"); do
        taskset -c 0 "${memcached_args[@]}" >/dev/null 2>&1 &
        server=$!
        wait_ready
        native_set+=("$(slap set)") native_get+=("$(slap get)")
        kill "$server"; wait "$server" || true; server=""

        rm -rf "$out/mc"
        "$trace" -q --pin-cpu 0 -o "$out/mc" -- "${memcached_args[@]}" >"$out/mc.log" 2>&1 </dev/null &
        server=$!
        wait_ready
        dara_set+=("$(slap set)") dara_get+=("$(slap get)")
        stop_recording
        echo "trial $trial: memcslap set native ${native_set[-1]} s, recorded ${dara_set[-1]} s; get native ${native_get[-1]} s, recorded ${dara_get[-1]} s" >&2
    done
    verify memcached "$out/mc/trace.bin"
    for test in set get; do
        declare -n n_ref="native_$test" d_ref="dara_$test"
        n=$(printf '%s\n' "${n_ref[@]}" | median)
        d=$(printf '%s\n' "${d_ref[@]}" | median)
        result "memcached -t 4, memcslap -c 4 -e $keys $test" "$n" "$d" s "$(ratio "$n" "$d")"
        unset -n n_ref d_ref
    done
fi

if wanted uv; then
    clients() { seconds bash -c "'$out/uv_echo' client $port 1 $lines & '$out/uv_echo' client $port 2 $lines; s=\$?; wait \$! && exit \$s"; }
    native=() recorded=()
    for trial in $(seq 1 "$trials"); do
        taskset -c 0 "$out/uv_echo" server "$port" >/dev/null &
        server=$!
        wait_ready
        native+=("$(clients)")
        "$out/uv_echo" quit "$port"; wait "$server"; server=""

        rm -rf "$out/uv"
        "$trace" -q --pin-cpu 0 -o "$out/uv" -- "$out/uv_echo" server "$port" >"$out/uv.log" 2>&1 </dev/null &
        server=$!
        wait_ready
        recorded+=("$(clients)")
        "$out/uv_echo" quit "$port"; wait "$server"; server=""
        echo "trial $trial: uv_echo clients native ${native[-1]} s, recorded ${recorded[-1]} s" >&2
    done
    verify uv_echo "$out/uv/trace.bin"
    summarize "uv_echo, 2 clients x $lines lines (clients' wall)" s
fi

if wanted postgres; then
    chown nobody "$out"
    runuser -u nobody -- "$pg/initdb" -D "$out/pristine" -A trust -U postgres --no-sync >/dev/null
    runuser -u nobody -- "$pg/pg_ctl" -D "$out/pristine" -o "-k '' -p $port -c listen_addresses=127.0.0.1" -w start >/dev/null
    pgbench -i -s 1 -h 127.0.0.1 -p "$port" -U postgres postgres >/dev/null 2>&1
    runuser -u nobody -- "$pg/pg_ctl" -D "$out/pristine" -m fast -w stop >/dev/null
    restore="rm -rf $out/data && cp -a $out/pristine $out/data"
    postgres_args=(runuser -u nobody -- "$pg/postgres" -D "$out/data" -k '' -p "$port" -c listen_addresses=127.0.0.1)
    tps() { taskset -c 1 pgbench -n -S -c 2 -T 5 -h 127.0.0.1 -p "$port" -U postgres postgres 2>&1 | awk '/^tps/ { printf "%.0f\n", $3 }'; }
    native=() recorded=()
    for trial in $(seq 1 "$trials"); do
        bash -c "$restore"
        taskset -c 0 "${postgres_args[@]}" >/dev/null 2>&1 &
        server=$!
        wait_ready
        native+=("$(tps)")
        runuser -u nobody -- "$pg/pg_ctl" -D "$out/data" -m fast -w stop >/dev/null; wait "$server" || true; server=""

        rm -rf "$out/pg"
        "$trace" -q --pin-cpu 0 -o "$out/pg" --setup "$restore" -- "${postgres_args[@]}" >"$out/pg.log" 2>&1 </dev/null &
        server=$!
        wait_ready
        recorded+=("$(tps)")
        stop_recording
        echo "trial $trial: pgbench -S native ${native[-1]} tps, recorded ${recorded[-1]} tps" >&2
    done
    verify postgres "$out/pg/trace.bin"
    summarize "postgres, pgbench -S -c 2 -T 5 (tps)" tps
fi

echo "medians of $trials trials; load average $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-46s %11s %11s %5s %6s\n' "" "native" "recorded" "unit" "ratio"
printf '%s\n' "${results[@]}"
echo "ratio: the recorded run's share of native speed (native time / recorded time, recorded tps / native tps); every last recording replays with --verify"
