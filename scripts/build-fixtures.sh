#!/usr/bin/env bash
# Build every fixture (tests/fixtures/*.c, *.cc, *.rs) and benchmark (bench/*.c) into OUTDIR.
#
#   scripts/build-fixtures.sh OUTDIR
#
# Each NAME.c becomes OUTDIR/NAME, compiled with `$CC -O1 -g -pthread -Wall` (C++ with $CXX,
# Rust with rustc -O)
# (CC defaults to cc; extra flags may be passed in CFLAGS, e.g. sancov flags).
# Warnings are shown but do not fail the build; any compile failure does, and
# the script exits non-zero after trying every file.
set -u

if [ $# -ne 1 ]; then
    echo "usage: $0 OUTDIR" >&2
    exit 2
fi

root="$(cd "$(dirname "$0")/.." && pwd)"
out="$1"
cc="${CC:-cc}"
mkdir -p "$out" || exit 1

shopt -s nullglob
srcs=("$root"/tests/fixtures/*.c "$root"/tests/fixtures/*.cc "$root"/tests/fixtures/*.rs "$root"/bench/*.c)
if [ ${#srcs[@]} -eq 0 ]; then
    echo "build-fixtures: no sources found under $root/tests/fixtures or $root/bench" >&2
    exit 1
fi

failed=0
for src in "${srcs[@]}"; do
    name="$(basename "${src%.*}")"
    case "$src" in
        *.rs) build=(rustc -O -g -o "$out/$name" "$src") ;;
        # shellcheck disable=SC2086 # CXXFLAGS is meant to word-split
        *.cc) build=("${CXX:-c++}" -O1 -g -pthread -Wall ${CXXFLAGS:-} "$src" -o "$out/$name") ;;
        # shellcheck disable=SC2086 # CFLAGS is meant to word-split
        *) build=("$cc" -O1 -g -pthread -Wall ${CFLAGS:-} "$src" -o "$out/$name") ;;
    esac
    # Fixtures on a real library link it (as the tests build them: fixture_with); the ones that
    # are a library and a program from one source are built by their tests only.
    case "$name" in
        launch_ctor_random | start_wrapper_block | start_wrapper_block_ok) continue ;;
        sqlite_threads) build+=(-lsqlite3) ;;
        uv_echo) build+=(-luv) ;;
        lmdb_writers) build+=(-llmdb) ;;
    esac
    if ! "${build[@]}"; then
        echo "build-fixtures: FAILED: $src" >&2
        failed=$((failed + 1))
    fi
done

if [ "$failed" -ne 0 ]; then
    echo "build-fixtures: $failed of ${#srcs[@]} failed" >&2
    exit 1
fi
echo "build-fixtures: built ${#srcs[@]} programs into $out" >&2
