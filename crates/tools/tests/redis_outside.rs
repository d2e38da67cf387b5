//! A real server recorded under a load generator outside dara: Debian's redis-server runs under
//! `dara-trace` (a recording), redis-benchmark and redis-cli talk to it from outside, and
//! `dara-replay --verify` reproduces the run with nobody outside: every answer the server sent is
//! compared byte for byte with the recording (a difference would be a divergence, exit 3).
mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use dara_scheduler::outside::OutsideWhat;

fn redis_cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli").arg("-p").arg(port.to_string()).args(args).output().expect("redis-cli (run ./scripts/install-deps.sh)");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// redis-server on `port` recorded by dara-trace into `out` (with `dara_options` before the
/// command), once it answers PING.
fn recorded_redis(out: &std::path::Path, port: u16, dara_options: &[&str]) -> std::process::Child {
    let port_arg = port.to_string();
    let mut args = vec!["-q", "-o", out.to_str().unwrap()];
    args.extend_from_slice(dara_options);
    args.extend_from_slice(&["--", "redis-server", "--port", &port_arg, "--save", "", "--appendonly", "no", "--bind", "127.0.0.1"]);
    let server = Command::new(env!("CARGO_BIN_EXE_dara-trace")).args(&args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let started = Instant::now();
    while redis_cli(port, &["ping"]) != "PONG" {
        assert!(started.elapsed() < Duration::from_secs(30), "redis-server under dara-trace did not answer");
        std::thread::sleep(Duration::from_millis(50));
    }
    server
}

/// redis-benchmark's SET, GET, INCR and LPUSH, 300 requests each from 4 clients.
fn benchmark(port: u16) {
    let bench = Command::new("redis-benchmark").args(["-p", &port.to_string(), "-n", "300", "-c", "4", "-t", "set,get,incr,lpush", "-q"]).output().unwrap();
    assert!(bench.status.success(), "{}", String::from_utf8_lossy(&bench.stderr));
}

/// SHUTDOWN NOSAVE, and dara-trace ends with status 0.
fn shut_down(server: &mut std::process::Child, port: u16) {
    redis_cli(port, &["shutdown", "nosave"]);
    let Some(status) = wait_at_most(server, Duration::from_secs(30)) else {
        let _ = server.kill();
        panic!("dara-trace did not end after SHUTDOWN");
    };
    assert_eq!(status.code(), Some(0));
}

#[test]
fn redis_recorded_under_redis_benchmark_replays_offline() {
    let port = free_ports(1);
    let out = out_dir("redis_outside");
    let mut server = recorded_redis(&out, port, &[]);
    benchmark(port);
    assert_eq!(redis_cli(port, &["set", "dara", "recorded"]), "OK");
    assert_eq!(redis_cli(port, &["get", "dara"]), "recorded");
    shut_down(&mut server, port);

    let trace_path = out.join("trace.bin");
    let trace = dara_scheduler::trace::read_file(&trace_path).unwrap();
    let connects = trace.outside.iter().filter(|e| matches!(e.what, OutsideWhat::Connect { .. })).count();
    let answers = trace.outside.iter().filter(|e| matches!(e.what, OutsideWhat::Output(_))).count();
    assert!(connects >= 4 + 3, "redis-benchmark's clients and the redis-cli calls were recorded ({connects} connections)");
    assert!(answers >= 1200 / 16, "{answers} answers recorded");
    // Three I/O threads and jemalloc's background thread, which jemalloc starts through a
    // pthread_create it looks up with dlsym, past dara's hook.
    let created = real::threads_created(&trace_path);
    assert!(created >= 4, "every thread was started under dara ({created} thread creations)");
    let replay = dara_replay(&["-q", "--verify", trace_path.to_str().unwrap()], Duration::from_secs(300));
    assert_eq!(replay.code, 0, "{}", replay.text());
    assert!(replay.stdout.contains("verify: 2 more executions identical"), "{}", replay.text());
    assert!(processes_with(&["redis-server", &port.to_string()]).is_empty(), "a redis-server survived");
    assert!(dara_shm_files().is_empty());
}

/// redis-server recorded with `--host-pids` (no PID namespace, the host's pids) under
/// redis-benchmark and redis-cli replays in a namespace with the recorded pids, and verifies. It
/// diverged until 2026-12-01 (jemalloc woke its background thread at another step): the replay's
/// working directory was unreachable from its mount namespace, and glibc's `getcwd` walked `..`
/// with `malloc`, which the recording, made without a namespace, never did.
#[test]
fn redis_recorded_with_host_pids_replays_in_a_namespace() {
    let port = free_ports(1);
    let out = out_dir("redis_host_pids");
    let mut server = recorded_redis(&out, port, &["--host-pids"]);
    for i in 0..30 {
        assert_eq!(redis_cli(port, &["set", &format!("k{i}"), "v"]), "OK");
    }
    benchmark(port);
    shut_down(&mut server, port);
    let trace_path = out.join("trace.bin");
    let replay = dara_replay(&["-q", "--verify", trace_path.to_str().unwrap()], Duration::from_secs(300));
    assert_eq!(replay.code, 0, "{}", replay.text());
    assert!(replay.stdout.contains("verify: 2 more executions identical"), "{}", replay.text());
    assert!(processes_with(&["redis-server", &port.to_string()]).is_empty(), "a redis-server survived");
    assert!(dara_shm_files().is_empty());
}
