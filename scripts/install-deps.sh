#!/usr/bin/env bash
# Installs what dara's build and tests need that a fresh machine may lack: a C compiler and the C
# library's headers and static archive (C, C++ and Rust fixtures, and the static-binary refusal
# test; rustc comes with the Rust toolchain), and clang for the sanitizer-coverage fixtures
# (trace-pc-guard, trace-loads/trace-stores; gcc has only trace-pc), and Debian's redis-server
# and redis-tools (redis-cli, redis-benchmark) for the real-server test (crates/tools/tests/redis.rs),
# and the real programs of crates/tools/tests/real_programs.rs: pigz, python3 (Debian's, at
# /usr/bin/python3), memcached and libmemcached-tools (memcslap), nginx (master and
# workers recorded while curl fetches pages) and curl, openssl (`openssl speed -multi`, whose
# parent reads its children's pipes through stdio: crates/tools/tests/patterns.rs), xz-utils
# (`xz -T 4`), libsqlite3-dev, libuv1-dev and liblmdb-dev (the sqlite_threads, uv_echo and
# lmdb_writers fixtures link them; lmdb-utils' mdb_stat reads the LMDB environment afterwards),
# and Debian's PostgreSQL 15 (initdb, postgres, pg_ctl under /usr/lib/postgresql/15/bin; psql),
# Debian's default JDK (javac and java: the JVM test compiles tests/fixtures/java/Workers.java),
# GNU make (`make -j4` builds a small C project under dara), perl with ithreads, git (`git clone
# --no-local` between processes), mosquitto with its clients (an MQTT broker on both families), and
# haproxy in front of lighttpd (a threaded proxy and a web server: tests/fixtures/scripts/haproxy_test.sh),
# and Node.js (worker_threads: tests/fixtures/node/workers.js; any `node` on PATH will do),
# and Debian's golang-go (1.19 in bookworm: the Go fixtures under tests/fixtures/go/, built by
# crates/tools/tests/common/go.rs) and musl-tools (musl-gcc: static C fixtures against musl),
# and Debian's etcd-server, etcd-client and hugo (real Go programs: crates/tools/tests/real_go.rs),
# and busybox-static (a statically linked shell that runs its applets by exec'ing /proc/self/exe:
# crates/tools/tests/ptrace_calls.rs), and gnupg (gpg and gpg-agent on libgcrypt and npth: an RSA
# key made under dara, crates/tools/tests/real_programs.rs), and Apache httpd 2.4 (apache2: the
# event MPM under curl), unbound (a DNS server whose threads share its port) and varnish (Varnish
# Cache 7.1 in front of python3's http.server: tests/fixtures/scripts/varnish_test.sh; varnishd
# compiles its VCL with cc, installed above), all three in crates/tools/tests/real_servers.rs, and
# erlang-base (the BEAM VM, erl and erlc: tests/fixtures/erlang/workers.erl, real_programs.rs),
# and MariaDB 10.11 (mariadb-server: mariadbd and mariadb-install-db; mariadb-client: the
# mariadb client; crates/tools/tests/mariadb.rs), and OpenSSH's server and client (sshd, ssh,
# scp, ssh-keygen: tests/fixtures/scripts/sshd_test.sh, crates/tools/tests/sshd.rs).
# postgres refuses to run as root: the tests run it as the unprivileged user `nobody` (runuser,
# from util-linux).
#
# The redis, memcached, nginx, mosquitto, lighttpd, haproxy, etcd, apache2, unbound, varnish,
# erlang-base, mariadb-server and openssh-server packages would start a system service (on ports
# 6379, 11211, 80, 1883, 2379, 53, 6081 with varnish's log reader varnishncsa beside it, epmd's
# 4369, socket-activated, 3306 and 22; ssh's is never stopped, see below) where
# the init system lets them (Debian's postinst runs invoke-rc.d / deb-systemd-invoke). The tests
# start their own servers on free ports and want no other on the machine, so while installing them
# a policy-rc.d that denies every start is put in place (unless one is there already: container
# images ship one), and afterwards the services are stopped and disabled with whatever init
# tooling exists.
set -euo pipefail

need=()
command -v cc >/dev/null 2>&1 || need+=(gcc)
command -v c++ >/dev/null 2>&1 || need+=(g++)
[ -f /usr/include/pthread.h ] || need+=(libc6-dev)
[ -f /usr/lib/x86_64-linux-gnu/libc.a ] || need+=(libc6-dev)
command -v clang >/dev/null 2>&1 || need+=(clang)
# Packages that install a system service (see above).
services=()
command -v redis-server >/dev/null 2>&1 || services+=(redis-server)
{ command -v redis-cli >/dev/null 2>&1 && command -v redis-benchmark >/dev/null 2>&1; } || services+=(redis-tools)
command -v pigz >/dev/null 2>&1 || need+=(pigz)
[ -x /usr/bin/python3 ] || need+=(python3)
command -v memcached >/dev/null 2>&1 || services+=(memcached)
command -v memcslap >/dev/null 2>&1 || need+=(libmemcached-tools)
command -v nginx >/dev/null 2>&1 || services+=(nginx)
command -v curl >/dev/null 2>&1 || need+=(curl)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
command -v xz >/dev/null 2>&1 || need+=(xz-utils)
command -v zstd >/dev/null 2>&1 || need+=(zstd)
[ -f /usr/include/sqlite3.h ] || need+=(libsqlite3-dev)
[ -f /usr/include/uv.h ] || need+=(libuv1-dev)
[ -f /usr/include/lmdb.h ] || need+=(liblmdb-dev)
command -v mdb_stat >/dev/null 2>&1 || need+=(lmdb-utils)
command -v runuser >/dev/null 2>&1 || need+=(util-linux)
command -v psql >/dev/null 2>&1 || need+=(postgresql-client-15)
command -v javac >/dev/null 2>&1 || need+=(default-jdk-headless)
command -v make >/dev/null 2>&1 || need+=(make)
perl -Mthreads -e 1 >/dev/null 2>&1 || need+=(perl)
command -v git >/dev/null 2>&1 || need+=(git)
command -v node >/dev/null 2>&1 || need+=(nodejs)
command -v go >/dev/null 2>&1 || need+=(golang-go)
command -v musl-gcc >/dev/null 2>&1 || need+=(musl-tools)
command -v mosquitto >/dev/null 2>&1 || [ -x /usr/sbin/mosquitto ] || services+=(mosquitto)
command -v lighttpd >/dev/null 2>&1 || [ -x /usr/sbin/lighttpd ] || services+=(lighttpd)
command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ] || services+=(haproxy)
command -v mosquitto_pub >/dev/null 2>&1 || need+=(mosquitto-clients)
# dnsmasq-base: the DNS server alone (the dnsmasq package would start a system service); dig.
command -v dnsmasq >/dev/null 2>&1 || [ -x /usr/sbin/dnsmasq ] || need+=(dnsmasq-base)
command -v dig >/dev/null 2>&1 || need+=(dnsutils)
command -v iperf3 >/dev/null 2>&1 || need+=(iperf3)
[ -x /usr/lib/postgresql/15/bin/postgres ] || services+=(postgresql-15)
command -v etcd >/dev/null 2>&1 || services+=(etcd-server)
# Apache httpd 2.4 with the event MPM (tests/fixtures/scripts/apache_test.sh, real_servers.rs).
[ -x /usr/sbin/apache2 ] || services+=(apache2)
# unbound 1.17: a threaded DNS server whose threads share the port (tests/fixtures/scripts/unbound_test.sh).
command -v unbound >/dev/null 2>&1 || [ -x /usr/sbin/unbound ] || services+=(unbound)
# Varnish Cache 7.1 (tests/fixtures/scripts/varnish_test.sh) and Erlang/OTP's VM, whose package
# brings epmd's units (tests/fixtures/erlang/workers.erl).
command -v varnishd >/dev/null 2>&1 || [ -x /usr/sbin/varnishd ] || services+=(varnish)
{ command -v erl >/dev/null 2>&1 && command -v erlc >/dev/null 2>&1; } || services+=(erlang-base)
# MariaDB 10.11 (tests/fixtures/scripts/mariadb_test.sh).
{ command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ]; } || services+=(mariadb-server)
command -v mariadb >/dev/null 2>&1 || need+=(mariadb-client)
# OpenSSH (tests/fixtures/scripts/sshd_test.sh).
[ -x /usr/sbin/sshd ] || services+=(openssh-server)
{ command -v ssh >/dev/null 2>&1 && command -v ssh-keygen >/dev/null 2>&1 && command -v scp >/dev/null 2>&1; } || need+=(openssh-client)
command -v etcdctl >/dev/null 2>&1 || need+=(etcd-client)
command -v hugo >/dev/null 2>&1 || need+=(hugo)
dpkg -s busybox-static >/dev/null 2>&1 || need+=(busybox-static)
{ command -v gpg >/dev/null 2>&1 && command -v gpg-agent >/dev/null 2>&1; } || need+=(gnupg)
# dara-replay --gdb STEP hands a paused replay to gdbserver; tests/replay_gdb.rs drives it with gdb.
# setcap marks a program with file capabilities (tests/processes.rs: an exec that is a secure exec).
{ command -v setcap >/dev/null 2>&1 || [ -x /sbin/setcap ]; } || need+=(libcap2-bin)
command -v gdb >/dev/null 2>&1 || need+=(gdb)
command -v gdbserver >/dev/null 2>&1 || need+=(gdbserver)
# Debian's separate debug files for libc and its loader (/usr/lib/debug/.build-id): listings
# name their frames by source line (tests/explanations.rs).
dpkg -s libc6-dbg >/dev/null 2>&1 || need+=(libc6-dbg)
# A headless browser loads `dara timeline` pages in tests/explanations.rs.
command -v chromium >/dev/null 2>&1 || need+=(chromium)
need+=("${services[@]}")
command -v cargo >/dev/null 2>&1 || { echo "install-deps: cargo is missing: install a Rust toolchain (rustup) first" >&2; exit 1; }

# Stops and disables the system service NAME a package may have installed (no-op when none runs:
# this machine's image has no init system and a policy-rc.d that already denied the start).
# PIDFILE and PORT name it in the warning when it still runs.
no_service() {
    local name=$1 pidfile=$2 port=$3
    [ -e "/etc/init.d/$name" ] || [ -e "/lib/systemd/system/$name.service" ] || return 0
    # systemctl disables units without a running systemd too (it edits the links).
    if command -v systemctl >/dev/null 2>&1; then systemctl disable "$name" >/dev/null 2>&1 || true; fi
    if [ -d /run/systemd/system ]; then
        systemctl stop "$name" >/dev/null 2>&1 || true
    elif command -v service >/dev/null 2>&1; then
        service "$name" stop >/dev/null 2>&1 || true
    fi
    if command -v update-rc.d >/dev/null 2>&1; then update-rc.d "$name" disable >/dev/null 2>&1 || true; fi
    local pid
    pid=$(cat "$pidfile" 2>/dev/null) || return 0
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        echo "install-deps: the $name service (pid $pid, port $port) still runs: stop it; dara's tests start their own" >&2
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
    if [ ${#services[@]} -gt 0 ] && [ ! -e "$policy" ]; then
        printf '#!/bin/sh\n# install-deps.sh: no service starts while dara installs packages\nexit 101\n' >"$policy"
        chmod 755 "$policy"
        trap 'rm -f "$policy"' EXIT
    fi
    apt-get install -y -q "${need[@]}"
    if [ ${#services[@]} -gt 0 ]; then
        no_service redis-server /run/redis/redis-server.pid 6379
        no_service memcached /run/memcached/memcached.pid 11211
        no_service nginx /run/nginx.pid 80
        no_service postgresql /run/postgresql/15-main.pid 5432
        no_service mosquitto /run/mosquitto/mosquitto.pid 1883
        no_service lighttpd /run/lighttpd.pid 80
        no_service haproxy /run/haproxy.pid 80
        no_service etcd /run/etcd.pid 2379
        no_service apache2 /run/apache2/apache2.pid 80
        no_service unbound /run/unbound.pid 53
        no_service varnish /run/varnish.pid 6081
        no_service varnishncsa /run/varnishncsa/varnishncsa.pid none
        no_service epmd /run/epmd.pid 4369
        no_service mariadb /run/mysqld/mysqld.pid 3306
        # ssh's service is left alone: the machine may be reached through it. (Installed here, it
        # does not start: policy-rc.d denies it; the test's sshd listens on a port of its own.)
        # epmd starts on the first connection to its socket unit: that unit goes too.
        if command -v systemctl >/dev/null 2>&1; then systemctl disable epmd.socket >/dev/null 2>&1 || true; fi
        if [ -d /run/systemd/system ]; then systemctl stop epmd.socket >/dev/null 2>&1 || true; fi
    fi
fi
