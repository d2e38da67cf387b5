#!/usr/bin/env bash
# Real multithreaded programs recorded by `dara-trace` against the same programs run natively, in
# the same run (docs/performance.md, "Real programs recorded"):
#
#  * pigz -p 4 compressing a text file of about 20 MB: wall time natively and recorded, the ratio
#    native / recorded (the recorded run's share of native speed);
#  * memcached -t 4 under memcslap -c 4 (set, then get) from outside: memcslap's own times for
#    each test, natively and with memcached recorded, the ratio native / recorded; memcslap on
#    CPU 1, memcached (and dara, which shares the target's CPU as always) on CPU 0.
#
# TRIALS alternating trials, medians. The last recording of each is replayed with --verify
# (checked). The recorded memcached is stopped with Ctrl-C, a second one if the first does not
# reach it (issue 14, item 4).
#
#   scripts/bench-real.sh [TRIALS [KEYS]]     (default 3 trials, 2000 keys per memcslap thread)
#
# Exits non-zero if a run fails.
set -euo pipefail
cd "$(dirname "$0")/.."
trials="${1:-3}"
keys="${2:-2000}"

./scripts/install-deps.sh
cargo build --release --workspace -q
trace=target/release/dara-trace
replay=target/release/dara-replay

out=$(mktemp -d)
server=""
cleanup() {
    if [ -n "$server" ]; then kill -INT "$server" 2>/dev/null || true; sleep 1; kill -INT "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; fi
    rm -rf "$out"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
seconds() { /usr/bin/time -f %e "$@" 2>&1 >/dev/null | tail -1; }

# pigz: the same input every time (words from a fixed awk generator).
awk 'BEGIN { srand(1); split("dara records one schedule of real threads exactly", w, " ");
             for (i = 0; i < 300000; i++) { for (j = 0; j < 8; j++) printf "%s ", w[int(rand() * 8) + 1]; print i } }' >"$out/input.txt"
native_pigz=() dara_pigz=()
for trial in $(seq 1 "$trials"); do
    native_pigz+=("$(seconds pigz -p 4 -k -f "$out/input.txt")")
    rm -rf "$out/pigz"
    dara_pigz+=("$(seconds "$trace" -q -o "$out/pigz" -- pigz -p 4 -k -f "$out/input.txt")")
    echo "trial $trial: pigz native ${native_pigz[-1]} s, recorded ${dara_pigz[-1]} s" >&2
done
"$replay" -q --verify "$out/pigz/trace.bin" >"$out/verify.log" 2>&1 || { cat "$out/verify.log" >&2; echo "bench-real: the pigz recording did not replay" >&2; exit 1; }

port_in_use() { command -v ss >/dev/null && [ -n "$(ss -Htuan "sport = :$1")" ]; }
port=$((24000 + ($$ % 300) * 10))
while port_in_use "$port"; do port=$((port + 1)); done
memcached_args=(memcached -u root -t 4 -U 0 -l 127.0.0.1 -p "$port")

wait_ready() {
    for _ in $(seq 1 600); do
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0
        sleep 0.05
    done
    echo "bench-real: memcached did not answer on port $port" >&2
    return 1
}

# memcslap's time for one test (seconds).
slap() {
    taskset -c 1 memcslap -s "127.0.0.1:$port" -c 4 -e "$keys" -t "$1" 2>&1 | awk -v t="$1" '$0 ~ "Time to " t " " { print $(NF - 1) }'
}

stop_recording() {
    kill -INT "$server"
    for _ in $(seq 1 50); do kill -0 "$server" 2>/dev/null || break; sleep 0.1; done
    kill -INT "$server" 2>/dev/null || true
    wait "$server" || true
    server=""
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
"$replay" -q --verify "$out/mc/trace.bin" >"$out/verify.log" 2>&1 || { cat "$out/verify.log" >&2; echo "bench-real: the memcached recording did not replay" >&2; exit 1; }

np=$(printf '%s\n' "${native_pigz[@]}" | median)
dp=$(printf '%s\n' "${dara_pigz[@]}" | median)
ns=$(printf '%s\n' "${native_set[@]}" | median)
ds=$(printf '%s\n' "${dara_set[@]}" | median)
ng=$(printf '%s\n' "${native_get[@]}" | median)
dg=$(printf '%s\n' "${dara_get[@]}" | median)
echo "medians of $trials trials; load average $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-44s %10s %10s %8s\n' "" "native" "recorded" "ratio"
awk -v n="$np" -v d="$dp" 'BEGIN { printf "%-44s %9.2fs %9.2fs %8.2f\n", "pigz -p 4, 20 MB of text (wall time)", n, d, n / d }'
awk -v n="$ns" -v d="$ds" -v k="$keys" 'BEGIN { printf "%-44s %9.3fs %9.3fs %8.2f\n", "memcached -t 4, memcslap -c 4 -e " k " set", n, d, n / d }'
awk -v n="$ng" -v d="$dg" -v k="$keys" 'BEGIN { printf "%-44s %9.3fs %9.3fs %8.2f\n", "memcached -t 4, memcslap -c 4 -e " k " get", n, d, n / d }'
echo "ratio: native time / recorded time (the recorded run's share of native speed); both last recordings replay with --verify"
