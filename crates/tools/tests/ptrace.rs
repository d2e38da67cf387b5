//! The ptrace path end to end: statically linked C programs (glibc and musl) and Go programs,
//! which dara's preload cannot enter, run under `dara-agent` (crates/tracer/src/ptrace). Each
//! bug is found, replayed 20 times with `--verify`, found again the same way with the same seed;
//! each twin is clean; what a Go program observes (time, randomness, map order, `select`) is the
//! same on every replay.
mod common;

use std::time::Duration;

use common::go::{self, GoBug};
use common::*;

/// A static C lost update (the preload cannot enter it): found through the preemption probes at
/// libc's own `pthread_mutex_lock`/`unlock`, replayed, the same with the same seed; its twin clean.
fn static_lost_update(build: fn(&str) -> std::path::PathBuf, libc: &str, shows: &str) {
    let program = private_copy(&build("lost_update"), &format!("ptrace-lost-update-{libc}"));
    let first = out_dir(&format!("ptrace-lost-update-{libc}"));
    let run = search(&first, "pct:3", 1, 50, &program);
    assert_eq!(run.code, 1, "{libc}: the lost update was not found\n{}", run.text());
    let bug = first.join("bug-0001/trace.bin");
    replays(&bug, shows);
    let again = out_dir(&format!("ptrace-lost-update-{libc}-again"));
    assert_eq!(search(&again, "pct:3", 1, 50, &program).code, 1);
    same_decisions(&bug, &again.join("bug-0001/trace.bin"));

    let twin = build("lost_update_ok");
    let clean = out_dir(&format!("ptrace-lost-update-{libc}-ok"));
    let run = search(&clean, "pct:3", 1, 30, &twin);
    assert_eq!(run.code, 0, "{libc}: a false bug in the twin\n{}", run.text());
    assert_no_survivors(&program);
}

#[test]
fn a_glibc_static_lost_update_is_found_replayed_and_its_twin_is_clean() {
    static_lost_update(|name| fixture_with(name, &["-static"]), "glibc", "Assertion `counter == NTHREADS * ITERS' failed");
}

#[test]
fn a_musl_static_lost_update_is_found_replayed_and_its_twin_is_clean() {
    static_lost_update(musl_fixture, "musl", "killed by SIGABRT");
}

/// A Go bug is found within `runs` random executions, named by Go's own message, replayed; the
/// same seed finds it again identically; the twin runs clean.
fn go_bug(bug: GoBug, runs: u64, twin_runs: u64) {
    let program = private_copy(&go::go_fixture(bug.name), &format!("ptrace-go-{}", bug.name));
    let out = out_dir(&format!("ptrace-go-{}", bug.name));
    let run = search(&out, "random", 1, runs, &program);
    assert_eq!(run.code, 1, "{}: not found in {runs} executions\n{}", bug.name, run.text());
    assert!(run.text().contains(bug.prints), "{}: found as something else\n{}", bug.name, run.text());
    let trace = out.join("bug-0001/trace.bin");
    replays(&trace, &format!("exited with status {}", bug.status));
    let again = out_dir(&format!("ptrace-go-{}-again", bug.name));
    assert_eq!(search(&again, "random", 1, runs, &program).code, 1);
    same_decisions(&trace, &again.join("bug-0001/trace.bin"));

    let twin = go::go_twin(bug.name);
    let clean = out_dir(&format!("ptrace-go-{}-ok", bug.name));
    let run = search(&clean, "random", 1, twin_runs, &twin);
    assert_eq!(run.code, 0, "{}: a false bug in the twin\n{}", bug.name, run.text());
    assert_no_survivors(&program);
}

#[test]
fn go_loop_variable_capture_is_found_and_replayed() {
    go_bug(go::LOOPVAR, 20, 20);
}

#[test]
fn go_dining_philosophers_deadlock_is_found_and_replayed() {
    go_bug(go::PHILOSOPHERS, 20, 20);
}

#[test]
fn go_concurrent_map_writes_are_found_and_replayed() {
    go_bug(go::MAPWRITES, 20, 10);
}

#[test]
fn go_send_on_a_closed_channel_is_found_and_replayed() {
    go_bug(go::PRODCONS, 60, 30);
}

/// Everything a Go program observes that varies natively (the time, `math/rand` seeded from it,
/// `crypto/rand`, a map's iteration order, `select`'s choices) is the same on every replay of a
/// recording and in two recordings with the same seed and epoch.
#[test]
fn what_a_go_program_observes_is_the_same_on_every_replay() {
    observes_the_same(&go::go_fixture("determinism"), "static");
}

/// The same with the program linked against libc (cgo): dynamically linked, but run by the agent
/// (the preload is not loaded into it).
#[test]
fn a_go_program_linked_with_cgo_runs_under_the_agent_too() {
    let program = go::go_fixture_linked("determinism", go::Cgo::On, &[]);
    assert!(go::has_interpreter(&program), "a cgo build is dynamically linked");
    observes_the_same(&program, "cgo");
}

fn observes_the_same(program: &std::path::Path, how: &str) {
    let record = |name: &str| {
        let out = out_dir(name);
        let run = dara_trace(&["-o", out.to_str().unwrap(), "--epoch", SEARCH_EPOCH, "--", program.to_str().unwrap()], Duration::from_secs(60));
        assert_eq!(run.code, 0, "{}", run.text());
        (out, run.stdout)
    };
    let (out, first) = record(&format!("ptrace-go-determinism-{how}"));
    let (_, second) = record(&format!("ptrace-go-determinism-{how}-again"));
    let observed = |text: &str| text.lines().filter(|l| ["time:", "math/rand:", "seeded:", "crypto/rand:", "map:", "select:"].iter().any(|p| l.starts_with(p))).map(str::to_owned).collect::<Vec<_>>();
    assert_eq!(observed(&first).len(), 6, "{first}");
    assert!(first.contains(&format!("time: {SEARCH_EPOCH}")), "the program's clock starts at the epoch\n{first}");
    assert_eq!(observed(&first), observed(&second), "two recordings with one seed and epoch differ");
    let trace = out.join("trace.bin");
    let verify = dara_replay(&["--verify", trace.to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(verify.code, 0, "{}", verify.text());
    assert!(verify.stdout.contains("verify: 2 more executions identical"), "{}", verify.text());
    let replayed = observed(&verify.stdout);
    assert_eq!(replayed.len(), 18, "three replays, six lines each\n{}", verify.text());
    for chunk in replayed.chunks(6) {
        assert_eq!(chunk, observed(&first).as_slice(), "a replay observed something else");
    }
}

/// A bash script (the preload's) that starts a statically linked helper twice runs as one
/// schedule: the helper's exec goes to the agent, its two threads are created under control, the
/// script checks both sums; 10 executions clean, the last one replayed with `--verify`.
#[test]
fn a_bash_script_running_a_static_helper_is_one_schedule() {
    let helper = private_copy(&fixture_with("static_helper", &["-static"]), "ptrace-static-helper");
    let script = repo_root().join("tests/fixtures/scripts/static_helper_test.sh");
    let out = out_dir("ptrace-static-helper-script");
    let args = ["-q", "-o", out.to_str().unwrap(), "--seed", "1", "--runs", "10", "--epoch", SEARCH_EPOCH, "--", script.to_str().unwrap(), helper.to_str().unwrap()];
    let run = dara_trace(&args, Duration::from_secs(300));
    assert_eq!(run.code, 0, "{}", run.text());
    let trace = out.join("trace.bin");
    assert!(common::real::threads_created(&trace) >= 4, "the helper's threads (two runs, two each) were created under control");
    common::real::replays_identically(&trace);
    assert_no_survivors(&helper);
}

/// The Go key-value pair's test script (bash starting two Go servers and a Go client over
/// loopback TCP, goroutines on Go's netpoller): the stale read is found by PCT (the backup serves
/// the client's GET before it has read the primary's forward; the agent sees both as the sends
/// and receives they are), replayed exactly, found again the same way with the same seed; the
/// correct twin runs clean and replays.
#[test]
fn a_go_key_value_stale_read_is_found_through_its_messages_and_replayed() {
    let script = repo_root().join("tests/fixtures/scripts/go_kv_test.sh");
    let port = free_ports(2);
    let (primary, backup) = (port.to_string(), (port + 1).to_string());
    let search = |kv: &std::path::Path, name: &str, runs: &str| {
        let out = out_dir(name);
        let args = ["-q", "-o", out.to_str().unwrap(), "--strategy", "pct:3", "--seed", "1", "--runs", runs, "--epoch", SEARCH_EPOCH, "--no-minimize", "--", script.to_str().unwrap(), kv.to_str().unwrap(), &primary, &backup];
        (dara_trace(&args, Duration::from_secs(600)), out)
    };
    let kv = private_copy(&go::go_fixture(go::KV.name), "ptrace-go-kv");
    let (run, out) = search(&kv, "ptrace-go-kv-stale-read", "40");
    assert_eq!(run.code, 1, "the stale read was not found in 40 executions\n{}", run.text());
    assert!(run.stdout.contains(go::KV.prints), "found as something else\n{}", run.text());
    let bug = out.join("bug-0001/trace.bin");
    // The backup answered NONE, and received the primary's forward only after that.
    let listing = dara_replay(&[bug.to_str().unwrap()], Duration::from_secs(60));
    let lines: Vec<&str> = listing.stdout.lines().collect();
    let answered = lines.iter().position(|l| l.contains(" send ") && l.contains("\"NONE\"")).unwrap_or_else(|| panic!("no NONE sent\n{}", listing.stdout));
    assert!(lines[answered..].iter().any(|l| l.contains(" recv ") && l.contains("\"PUT ")), "the forward was received before the GET was answered\n{}", listing.stdout);
    replays(&bug, go::KV.prints);
    let (again, again_out) = search(&kv, "ptrace-go-kv-stale-read-again", "40");
    assert_eq!(again.code, 1, "{}", again.text());
    same_decisions(&bug, &again_out.join("bug-0001/trace.bin"));

    let twin = private_copy(&go::go_twin(go::KV.name), "ptrace-go-kv-ok");
    let (run, out) = search(&twin, "ptrace-go-kv-ok", "20");
    assert_eq!(run.code, 0, "a false bug in the twin\n{}", run.text());
    common::real::replays_identically(&out.join("trace.bin"));
    assert_no_survivors(&kv);
    assert_no_survivors(&twin);
}
