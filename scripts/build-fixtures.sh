#!/usr/bin/env bash
# Build every fixture (tests/fixtures/*.c, *.cc, *.rs, tests/fixtures/go/*/) and benchmark
# (bench/*.c) into OUTDIR.
#
#   scripts/build-fixtures.sh OUTDIR
#
# Each NAME.c becomes OUTDIR/NAME, compiled with `$CC -O1 -g -pthread -Wall` (C++ with $CXX,
# Rust with rustc -O)
# (CC defaults to cc; extra flags may be passed in CFLAGS, e.g. sancov flags).
# Each Go fixture tests/fixtures/go/NAME/ becomes OUTDIR/go/NAME (static: CGO_ENABLED=0, as the
# tests build it: crates/tools/tests/common/go.rs, whose build cache under target/tmp/go it
# shares) and, when it has a twin, OUTDIR/go/NAME_ok (-tags=ok).
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

gocache="${CARGO_TARGET_DIR:-$root/target}/tmp/go"
built_go=0
mkdir -p "$out/go" || exit 1
for dir in "$root"/tests/fixtures/go/*/; do
    name="$(basename "$dir")"
    [ -f "$dir/main.go" ] || continue # package variant
    variants=("$name:")
    grep -q 'variant\.Fixed' "$dir"/*.go && variants+=("${name}_ok:-tags=ok")
    for v in "${variants[@]}"; do
        # -tags=ok, or nothing: one word at most.
        # shellcheck disable=SC2206
        tags=(${v#*:})
        if ! (cd "$root/tests/fixtures/go" && CGO_ENABLED=0 GOFLAGS=-mod=mod GOPROXY=off GOENV=off \
            GOCACHE="$gocache/cache" GOPATH="$gocache/path" \
            go build -trimpath -buildvcs=false "${tags[@]}" -o "$out/go/${v%%:*}" "./$name"); then
            echo "build-fixtures: FAILED: tests/fixtures/go/$name ${tags[*]}" >&2
            failed=$((failed + 1))
        fi
        built_go=$((built_go + 1))
    done
done

if [ "$failed" -ne 0 ]; then
    echo "build-fixtures: $failed of $((${#srcs[@]} + built_go)) failed" >&2
    exit 1
fi
echo "build-fixtures: built $((${#srcs[@]} + built_go)) programs into $out ($built_go Go programs in $out/go)" >&2
