#!/usr/bin/env bash
# Installs what dara's build and tests need that a fresh machine may lack: a C compiler and the C
# library's headers and static archive (C, C++ and Rust fixtures, and the static-binary refusal
# test; rustc comes with the Rust toolchain), and clang for the sanitizer-coverage fixtures
# (trace-pc-guard, trace-loads/trace-stores; gcc has only trace-pc), and Debian's redis-server
# and redis-tools (redis-cli, redis-benchmark) for the real-server test (crates/tools/tests/redis.rs).
#
# The redis package would start a system service on port 6379 where the init system lets it
# (Debian's postinst runs invoke-rc.d / deb-systemd-invoke). The tests start their own servers on
# free ports and want no other redis on the machine, so while installing it a policy-rc.d that
# denies every start is put in place (unless one is there already: container images ship one),
# and afterwards the service is stopped and disabled with whatever init tooling exists.
set -euo pipefail

need=()
command -v cc >/dev/null 2>&1 || need+=(gcc)
command -v c++ >/dev/null 2>&1 || need+=(g++)
[ -f /usr/include/pthread.h ] || need+=(libc6-dev)
[ -f /usr/lib/x86_64-linux-gnu/libc.a ] || need+=(libc6-dev)
command -v clang >/dev/null 2>&1 || need+=(clang)
redis=()
command -v redis-server >/dev/null 2>&1 || redis+=(redis-server)
{ command -v redis-cli >/dev/null 2>&1 && command -v redis-benchmark >/dev/null 2>&1; } || redis+=(redis-tools)
need+=("${redis[@]}")
command -v cargo >/dev/null 2>&1 || { echo "install-deps: cargo is missing: install a Rust toolchain (rustup) first" >&2; exit 1; }

# Stops and disables the redis system service the package may have installed (no-op when none
# runs: this machine's image has no init system and a policy-rc.d that already denied the start).
no_redis_service() {
    [ -e /etc/init.d/redis-server ] || [ -e /lib/systemd/system/redis-server.service ] || return 0
    # systemctl disables units without a running systemd too (it edits the links).
    if command -v systemctl >/dev/null 2>&1; then systemctl disable redis-server >/dev/null 2>&1 || true; fi
    if [ -d /run/systemd/system ]; then
        systemctl stop redis-server >/dev/null 2>&1 || true
    elif command -v service >/dev/null 2>&1; then
        service redis-server stop >/dev/null 2>&1 || true
    fi
    if command -v update-rc.d >/dev/null 2>&1; then update-rc.d redis-server disable >/dev/null 2>&1 || true; fi
    local pid
    pid=$(cat /run/redis/redis-server.pid 2>/dev/null) || return 0
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        echo "install-deps: the redis-server service (pid $pid, port 6379) still runs: stop it; dara's tests start their own" >&2
    fi
}

if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "install-deps: missing ${need[*]}; run as root or install them: apt-get install ${need[*]}" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    policy=/usr/sbin/policy-rc.d
    if [ ${#redis[@]} -gt 0 ] && [ ! -e "$policy" ]; then
        printf '#!/bin/sh\n# install-deps.sh: no service starts while dara installs packages\nexit 101\n' >"$policy"
        chmod 755 "$policy"
        trap 'rm -f "$policy"' EXIT
    fi
    apt-get install -y -q "${need[@]}"
    if [ ${#redis[@]} -gt 0 ]; then
        no_redis_service
    fi
fi
