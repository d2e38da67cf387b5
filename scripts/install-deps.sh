#!/usr/bin/env bash
# Installs what dara's build and tests need that a fresh machine may lack: a C compiler and the C
# library's headers and static archive (C, C++ and Rust fixtures, and the static-binary refusal
# test; rustc comes with the Rust toolchain), and clang for the sanitizer-coverage fixtures
# (trace-pc-guard, trace-loads/trace-stores; gcc has only trace-pc).
set -euo pipefail

need=()
command -v cc >/dev/null 2>&1 || need+=(gcc)
command -v c++ >/dev/null 2>&1 || need+=(g++)
[ -f /usr/include/pthread.h ] || need+=(libc6-dev)
[ -f /usr/lib/x86_64-linux-gnu/libc.a ] || need+=(libc6-dev)
command -v clang >/dev/null 2>&1 || need+=(clang)
command -v cargo >/dev/null 2>&1 || { echo "install-deps: cargo is missing: install a Rust toolchain (rustup) first" >&2; exit 1; }

if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "install-deps: missing ${need[*]}; run as root or install them: apt-get install ${need[*]}" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q "${need[@]}"
fi
