//! Helpers for the corpus of real programs (real_programs.rs, real_servers.rs): record a program
//! as a user would, search it briefly, replay a trace with `--verify`, and count what it did.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use dara_abi::Op;

use super::*;

/// Executions of each corpus search (issue 14: a 20-execution search without a false bug).
pub const SEARCH_RUNS: u64 = 20;
/// The seed of every corpus search.
pub const SEARCH_SEED: u64 = 1;

/// Records `command` in a fresh output directory (`test`), expects a clean exit, and returns the
/// trace and what the run printed (stdout and stderr, as `Run::text`).
pub fn record(test: &str, command: &[&str]) -> (PathBuf, String) {
    record_with(test, &[], command)
}

/// Like [`record`], with dara-trace `options` (e.g. `--setup CMD`) before the command.
pub fn record_with(test: &str, options: &[&str], command: &[&str]) -> (PathBuf, String) {
    let out = out_dir(test);
    let mut args = vec!["-q", "-o", out.to_str().unwrap()];
    args.extend_from_slice(options);
    args.push("--");
    args.extend_from_slice(command);
    let run = dara_trace(&args, Duration::from_secs(180));
    assert_eq!(run.code, 0, "{test}: {}", run.text());
    (out.join("trace.bin"), run.text())
}

/// Searches `command` with `runs` random executions (seed [`SEARCH_SEED`], `options` before the
/// command) in a fresh output directory (`test`) and expects no bug; returns the last execution's
/// trace and the run.
pub fn search_clean(test: &str, runs: u64, options: &[&str], command: &[&str]) -> (PathBuf, Run) {
    let out = out_dir(test);
    let (runs_arg, seed) = (runs.to_string(), SEARCH_SEED.to_string());
    let mut args = vec!["-q", "-o", out.to_str().unwrap(), "--runs", &runs_arg, "--strategy", "random", "--seed", &seed];
    args.extend_from_slice(options);
    args.push("--");
    args.extend_from_slice(command);
    let run = dara_trace(&args, Duration::from_secs(480));
    assert_eq!(run.code, 0, "{test}: a false bug in a search of a correct program\n{}", run.text());
    assert!(run.stderr.contains(&format!("no bug found in {runs} executions")), "{test}: {}", run.text());
    (out.join("trace.bin"), run)
}

/// The test script `script` (in tests/fixtures/scripts/) given a fresh data directory and a free
/// port (`script DIR PORT`), searched twice with `runs` executions, the same seed and a fixed wall
/// clock, every execution printing `shows`, with `--setup` emptying the directory before each:
/// the last trace replays identically and the second search made the same decisions. Returns
/// that trace and the port.
#[allow(dead_code)]
pub fn script_with_data_searched_clean_twice(test: &str, script: &str, runs: u64, shows: &str) -> (PathBuf, u16) {
    let script = repo_root().join("tests/fixtures/scripts").join(script);
    let data = out_dir(&format!("{test}-search-data")).join("d");
    let setup = format!("rm -rf {d} && mkdir -p {d}", d = data.display());
    let port = free_ports(1);
    let port_arg = port.to_string();
    let command = [script.to_str().unwrap(), data.to_str().unwrap(), &port_arg];
    // A fixed wall clock: a program that rounds its timed waits on the realtime clock (InnoDB)
    // times out elsewhere when two searches start at different real times.
    let options = ["--setup", &setup, "--epoch", SEARCH_EPOCH];
    let (last, run) = search_clean(&format!("{test}-search"), runs, &options, &command);
    assert_eq!(run.stdout.matches(shows).count() as u64, runs, "{}", run.text());
    replays_identically(&last);
    let (again, _) = search_clean(&format!("{test}-search-again"), runs, &options, &command);
    same_decisions(&last, &again);
    (last, port)
}

/// The trace replays with nobody outside, and twice more step for step alike.
pub fn replays_identically(trace: &Path) {
    let replay = dara_replay(&["-q", "--verify", trace.to_str().unwrap()], Duration::from_secs(300));
    assert_eq!(replay.code, 0, "{}", replay.text());
    assert!(replay.stdout.contains("verify: 2 more executions identical"), "{}", replay.text());
}

/// Like [`replays_identically`], for a program that draws the CPU's own random numbers when it
/// can (libgcrypt mixes `rdrand` into its pool): on a CPU that cannot fault on `cpuid` dara cannot
/// hide them, and the replay may diverge, but then it must say that the CPU is why.
pub fn replays_identically_or_blames_the_cpu(trace: &Path) {
    if !super::rdrand_cannot_be_hidden() {
        return replays_identically(trace);
    }
    let replay = dara_replay(&["-q", "--verify", trace.to_str().unwrap()], Duration::from_secs(300));
    assert!(replay.code == 0 || replay.text().contains("this CPU cannot fault on cpuid"), "{}", replay.text());
}

/// Steps of the trace whose operation is `op`.
pub fn steps_with(trace: &Path, op: Op) -> usize {
    let t = dara_scheduler::trace::read_file(trace).unwrap();
    t.steps.iter().filter(|s| s.choice.op == op).count()
}

/// The largest result the trace's steps whose operation is `op` were granted (0 when none).
pub fn largest_result(trace: &Path, op: Op) -> i64 {
    let t = dara_scheduler::trace::read_file(trace).unwrap();
    t.steps.iter().filter(|s| s.choice.op == op).filter_map(|s| s.result).max().unwrap_or(0)
}

/// How many threads the recorded program created.
pub fn threads_created(trace: &Path) -> usize {
    steps_with(trace, Op::ThreadCreate)
}

/// Waits until something accepts TCP connections on 127.0.0.1:`port` (at most `limit`).
pub fn wait_for_listener(port: u16, limit: Duration, what: &str) {
    wait_for_listener_on("127.0.0.1", port, limit, what);
}

/// Waits until something accepts TCP connections on `host`'s `port`. A server that listens on
/// several addresses opens them one after another: wait for each one a client will use.
pub fn wait_for_listener_on(host: &str, port: u16, limit: Duration, what: &str) {
    let started = Instant::now();
    while std::net::TcpStream::connect((host, port)).is_err() {
        assert!(started.elapsed() < limit, "{what} did not listen on {host} port {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `lines` lines of words from a fixed generator: compressible, not trivially so.
pub fn text(lines: usize) -> String {
    const WORDS: [&str; 8] = ["dara", "records", "one", "schedule", "of", "real", "threads", "exactly"];
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut out = String::new();
    for i in 0..lines {
        for _ in 0..8 {
            state = dara_abi::splitmix64(state);
            out.push_str(WORDS[(state % 8) as usize]);
            out.push(' ');
        }
        out.push_str(&format!("{}\n", state % (i as u64 + 1000)));
    }
    out
}

/// A recording `dara-trace` under way, as a child of the test. If the test fails before ending it
/// (a client's assertion), dropping it stops dara with two SIGINTs and waits: a failed test must
/// not leave dara-trace and the server it records running (one did, for an hour).
pub struct Recording(pub std::process::Child);

impl Drop for Recording {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            // SAFETY: signalling our own child; two SIGINTs stop a recording.
            unsafe { libc::kill(self.0.id() as i32, libc::SIGINT) };
            std::thread::sleep(Duration::from_millis(100));
            // SAFETY: as above.
            unsafe { libc::kill(self.0.id() as i32, libc::SIGINT) };
            if wait_at_most(&mut self.0, Duration::from_secs(30)).is_none() {
                let _ = self.0.kill();
                let _ = self.0.wait();
            }
        }
    }
}

/// `bytes` bytes of a fixed pattern (byte i is the top byte of i * 2654435761): a file a server
/// sends, which no transfer could get right by accident.
#[allow(dead_code)]
pub fn big_body(bytes: usize) -> Vec<u8> {
    (0..bytes as u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect()
}

/// Fetches `url` with curl `times` times into `out` and asserts each fetch brings `body` intact
/// (`what` names the case in the failure).
#[allow(dead_code)]
pub fn fetch_intact(url: &str, out: &Path, times: usize, body: &[u8], what: &str) {
    for fetch in 0..times {
        let got = out.join(format!("got-{fetch}.bin"));
        let curl = std::process::Command::new("curl").args(["-s", "-f", "-m", "60", "-o", got.to_str().unwrap(), url]).output().expect("curl (run ./scripts/install-deps.sh)");
        assert!(curl.status.success(), "{what}, fetch {fetch}: {curl:?}");
        assert!(std::fs::read(&got).unwrap() == body, "{what}, fetch {fetch}: the file arrived changed");
    }
}

/// One Ctrl-C to a recording `dara-trace` (dara passes it on), a second one if it has not ended
/// within `wait`: its exit status and what it wrote to stderr.
pub fn ctrl_c(server: &mut std::process::Child, wait: Duration) -> (std::process::ExitStatus, String) {
    // SAFETY: signalling our own child.
    unsafe { libc::kill(server.id() as i32, libc::SIGINT) };
    let status = match wait_at_most(server, wait) {
        Some(status) => status,
        None => interrupt_after(server, Duration::ZERO),
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(server.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    (status, stderr)
}
