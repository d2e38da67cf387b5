//! A real server under dara: Debian's redis-server 7.0 (bookworm's package; `scripts/install-deps.sh`,
//! which the README's test command runs, installs it). A bash smoke test
//! (`tests/fixtures/scripts/redis_smoke.sh`) starts the server on a free port, waits for PING,
//! checks the answers to SET/GET/INCR/LPUSH/LRANGE/DEL through redis-cli and shuts the server
//! down: a closed world, every process traced (bash, redis-server with its three background
//! threads, jemalloc and OpenSSL, each redis-cli). Random executions all end with exit status 0
//! and every answer right, the last one replays identically (`--verify`), the same seed gives the
//! same decisions, and no redis process or shared memory survives.
mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use dara_scheduler::outcome::Outcome;
use dara_scheduler::trace;

/// Random executions of the smoke test (about 0.2 s each).
const RUNS: u64 = 10;
const SEED: u64 = 1;
const ANSWERS_RIGHT: &str = "redis_smoke: every answer was right";

fn smoke_script() -> PathBuf {
    repo_root().join("tests/fixtures/scripts/redis_smoke.sh")
}

/// Fails (never skips) when the redis package is missing.
fn require_redis() {
    for tool in ["redis-server", "redis-cli"] {
        let found = std::process::Command::new("sh").args(["-c", &format!("command -v {tool}")]).output().is_ok_and(|o| o.status.success());
        assert!(found, "{tool} not found: run ./scripts/install-deps.sh (installs Debian's redis-server and redis-tools)");
    }
}

fn smoke(out: &Path, port: u16) -> Run {
    let (seed, runs, port, script) = (SEED.to_string(), RUNS.to_string(), port.to_string(), smoke_script());
    let args = ["-q", "-o", out.to_str().unwrap(), "--strategy", "random", "--seed", &seed, "--runs", &runs, "--", script.to_str().unwrap(), &port];
    dara_trace(&args, Duration::from_secs(180))
}

#[test]
fn redis_server_answers_every_command_under_dara_and_replays() {
    require_redis();
    let port = free_ports(1);
    let out = out_dir("redis-smoke");
    let run = smoke(&out, port);
    assert_eq!(run.code, 0, "the smoke test failed under dara\n{}", run.text());
    assert!(run.stderr.contains(&format!("no bug found in {RUNS} executions")), "{}", run.text());
    assert_eq!(run.stdout.matches(ANSWERS_RIGHT).count() as u64, RUNS, "every execution got every answer right\n{}", run.text());

    let last = out.join("trace.bin");
    let t = trace::read_file(&last).unwrap();
    assert!(matches!(t.outcome, Outcome::Exited { code: 0, .. }), "outcome {:?}", t.outcome);
    let count = |op: &str| t.steps.iter().filter(|s| s.choice.op.name() == op).count();
    assert!(count("thread-create") >= 3, "redis-server's background threads are created under control");
    assert!(count("cond-wait") >= 3, "and wait in the model for jobs");
    // One connection per redis-cli that reached the server: the successful PING, nine
    // commands and the SHUTDOWN; a blocking accept and the non-blocking one that finds nothing.
    assert!(count("accept") >= 2 * 11, "{} accepts", count("accept"));
    assert!(count("epoll-wait") >= 11, "the event loop waits in the model");

    // The listing shows the protocol: a SET arriving (3 arguments) and its +OK going back.
    let listing = dara_replay(&[last.to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(listing.code, 0, "{}", listing.text());
    assert!(listing.stdout.lines().any(|l| l.contains(" recv ") && l.contains("\"*3")), "a 3-argument command received\n{}", listing.stdout);
    assert!(listing.stdout.lines().any(|l| l.contains(" send ") && l.contains("\"+OK")), "+OK sent\n{}", listing.stdout);

    let verify = dara_replay(&["-q", "--verify", last.to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(verify.code, 0, "{}", verify.text());
    assert!(verify.stdout.contains("verify: 2 more executions identical"), "{}", verify.text());
    assert!(verify.stdout.contains(ANSWERS_RIGHT), "{}", verify.text());

    let again = out_dir("redis-smoke-again");
    let run2 = smoke(&again, port);
    assert_eq!(run2.code, 0, "the same seed failed the second time\n{}", run2.text());
    same_decisions(&last, &again.join("trace.bin"));

    let port = port.to_string();
    let left = processes_with(&["redis-server", &port]);
    assert!(left.is_empty(), "redis-server processes survived: {left:?}");
    let script = smoke_script();
    let left = processes_with(&[script.to_str().unwrap(), &port]);
    assert!(left.is_empty(), "smoke script processes survived: {left:?}");
    assert!(dara_shm_files().is_empty(), "shared memory left in /dev/shm");
}
