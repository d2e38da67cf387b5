//! Native checks of the Go and static C fixtures, without dara (the ptrace path's end-to-end tests
//! run them under dara): every fixture builds, each correct twin passes on every run, each bug
//! shows natively where it does so often enough to assert within a bounded number of runs, the
//! determinism fixture's lines really change between native runs, and the fixtures are linked
//! the way the ptrace path expects (CGO_ENABLED=0 and `-static`: no PT_INTERP; cgo: one).
//!
//! Native failure rates measured on the project's 2-core VM (docs/go.md): loopvar 100%,
//! philosophers about 97%, mapwrites 26-92% (with the load), prodcons 0.6-5.5%, kv's stale read
//! 0-6.5%, lost_update 0 in 500 with either libc.
mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::go::*;
use common::*;

/// Runs of a correct twin that must all pass.
const TWIN_RUNS: usize = 5;
/// No native run of a fixture takes long; this only stops a hang from stalling the suite.
const NATIVE_LIMIT: Duration = Duration::from_secs(60);

struct Native {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Native {
    fn text(&self) -> String {
        format!("exit {:?}\n--- stdout\n{}\n--- stderr\n{}", self.code, self.stdout, self.stderr)
    }
}

/// Runs `program args` natively with `env` added, at most [`NATIVE_LIMIT`].
fn native(program: &Path, args: &[&str], env: &[(&str, &str)]) -> Native {
    let mut child = Command::new(program)
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}: {e}", program.display()));
    // Drain the pipes on threads: a race report may be longer than a pipe holds.
    let drain = |mut pipe: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            pipe.read_to_string(&mut s).ok();
            s
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    let Some(status) = wait_at_most(&mut child, NATIVE_LIMIT) else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("{} {args:?} did not finish within {NATIVE_LIMIT:?}", program.display());
    };
    Native { code: status.code(), stdout: out.join().unwrap(), stderr: err.join().unwrap() }
}

/// Whether `run` ended as `bug` does when it shows.
fn shows(bug: GoBug, run: &Native) -> bool {
    run.code == Some(bug.status) && (run.stdout.contains(bug.prints) || run.stderr.contains(bug.prints))
}

/// `bug` shows as described within `runs` native runs of its buggy build (with `env`). Other
/// failures do not count (a racing map write may also corrupt the map: another message).
fn shows_natively(bug: GoBug, env: &[(&str, &str)], runs: usize) {
    let program = go_fixture(bug.name);
    let mut other = None;
    for _ in 0..runs {
        let run = native(&program, &[], env);
        if shows(bug, &run) {
            return;
        }
        if run.code != Some(0) {
            other = Some(run);
        }
    }
    let other = other.map_or("none".to_string(), |run| run.text());
    panic!("{} did not fail with \"{}\", exit {}, in {runs} native runs ({env:?}); the last other failure:\n{other}", bug.name, bug.prints, bug.status);
}

/// `program` passes [`TWIN_RUNS`] native runs in a row, printing `shows` each time.
fn always_passes(program: &Path, env: &[(&str, &str)], shows: &str) {
    for i in 0..TWIN_RUNS {
        let run = native(program, &[], env);
        assert_eq!(run.code, Some(0), "run {i} of the correct {} failed\n{}", program.display(), run.text());
        assert!(run.stdout.contains(shows), "run {i} of {}\n{}", program.display(), run.text());
    }
}

#[test]
fn loopvar_captures_the_loop_variable() {
    shows_natively(LOOPVAR, &[], 20);
    always_passes(&go_twin(LOOPVAR.name), &[], LOOPVAR.twin_prints);
}

#[test]
fn prodcons_twin_passes() {
    // The close racing the end-of-stream marker's send needs the closer to run between the last
    // producer's Done and its send: 0.6-5.5% of native runs, too rare to assert here; searched
    // under dara instead. The buggy build must still build and, when it fails, fail as described.
    let run = native(&go_fixture(PRODCONS.name), &[], &[]);
    match run.code {
        Some(0) => assert!(run.stdout.contains(PRODCONS.twin_prints), "{}", run.text()),
        _ => assert!(shows(PRODCONS, &run), "{}", run.text()),
    }
    always_passes(&go_twin(PRODCONS.name), &[], PRODCONS.twin_prints);
}

#[test]
fn philosophers_deadlock() {
    shows_natively(PHILOSOPHERS, &[], 50);
    always_passes(&go_twin(PHILOSOPHERS.name), &[], PHILOSOPHERS.twin_prints);
}

#[test]
fn mapwrites_race_kills_the_program() {
    let four = [("GOMAXPROCS", "4")];
    shows_natively(MAPWRITES, &four, 200);
    always_passes(&go_twin(MAPWRITES.name), &four, MAPWRITES.twin_prints);
}

/// The value printed after `label: ` on its own line.
fn line<'a>(out: &'a str, label: &str) -> &'a str {
    let prefix = format!("{label}: ");
    out.lines().find_map(|l| l.strip_prefix(prefix.as_str())).unwrap_or_else(|| panic!("no \"{label}:\" line in\n{out}"))
}

#[test]
fn determinism_fixture_sees_nondeterminism_natively() {
    let program = go_fixture("determinism");
    let runs: Vec<Native> = (0..2).map(|_| native(&program, &[], &[])).collect();
    for run in &runs {
        assert_eq!(run.code, Some(0), "{}", run.text());
        let out = &run.stdout;
        assert!(line(out, "time").parse::<i64>().unwrap() > 1_600_000_000_000_000_000, "{out}");
        // Go 1.19 seeds math/rand's global source with 1.
        assert_eq!(line(out, "math/rand"), "5577006791947779410", "{out}");
        line(out, "seeded").parse::<i64>().unwrap();
        let hex = line(out, "crypto/rand");
        assert!(hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_hexdigit()), "{out}");
        let mut keys: Vec<&str> = line(out, "map").split(' ').collect();
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(keys.len(), 20, "{out}");
        let picks = line(out, "select");
        assert!(picks.len() == 16 && picks.bytes().all(|b| b == b'a' || b == b'b'), "{out}");
    }
    let (a, b) = (&runs[0].stdout, &runs[1].stdout);
    for label in ["time", "crypto/rand"] {
        assert_ne!(line(a, label), line(b, label), "two native runs printed the same {label}");
    }
}

#[test]
fn pingpong_hands_the_token_over() {
    let program = go_fixture("pingpong");
    let run = native(&program, &["1000"], &[]);
    assert_eq!(run.code, Some(0), "{}", run.text());
    assert_eq!(run.stdout.trim(), "pingpong: 1000 handoffs", "{}", run.text());
    let wrong = native(&program, &["many"], &[]);
    assert_eq!(wrong.code, Some(2), "{}", wrong.text());
    assert!(wrong.stderr.contains("is not a count"), "{}", wrong.text());
}

#[test]
fn kv_script_runs_the_go_pair() {
    let script = repo_root().join("tests/fixtures/scripts/go_kv_test.sh");
    let run_script = |kv: &Path| {
        let base = free_ports(2);
        let (primary, backup) = (base.to_string(), (base + 1).to_string());
        let run = native(&script, &[kv.to_str().unwrap(), &primary, &backup], &[]);
        assert_no_survivors(kv);
        run
    };
    let twin = private_copy(&go_twin(KV.name), "go-kv-twin");
    for i in 0..3 {
        let run = run_script(&twin);
        assert_eq!(run.code, Some(0), "run {i} of the correct pair\n{}", run.text());
        assert!(run.stdout.contains(KV.twin_prints), "{}", run.text());
    }
    // The stale read needs the backup to serve the client's GET before the forward that was
    // written before the client even connected: 0-6.5% of native runs, not asserted here. The
    // buggy pair must still come up and reach a verdict (0, or 1 for a stale read).
    let bug = private_copy(&go_fixture(KV.name), "go-kv-bug");
    let run = run_script(&bug);
    assert!(run.code == Some(0) && run.stdout.contains(KV.twin_prints) || shows(KV, &run), "{}", run.text());
}

#[test]
fn go_builds_are_linked_for_the_ptrace_path() {
    // CGO_ENABLED=0: static, no interpreter (dara's preload cannot enter it).
    assert!(!has_interpreter(&go_fixture("pingpong")));
    assert!(!has_interpreter(&go_fixture("kv")), "the pure-Go net package keeps kv static");
    // CGO_ENABLED=1: runtime/cgo linked, started by ld.so.
    let cgo = go_fixture_linked("pingpong", Cgo::On, &[]);
    assert!(has_interpreter(&cgo), "{} has no PT_INTERP", cgo.display());
    let run = native(&cgo, &["100"], &[]);
    assert_eq!(run.code, Some(0), "{}", run.text());
    assert_eq!(run.stdout.trim(), "pingpong: 100 handoffs", "{}", run.text());
}

#[test]
fn race_detector_reports_the_loop_variable() {
    let bug = go_fixture_with(LOOPVAR.name, &["-race"]);
    assert!(has_interpreter(&bug), "-race links runtime/cgo in Go 1.19");
    // The detector reports a race only when the run's own interleaving shows it: natively, on a
    // loaded machine, a run may miss it (seen once in a full suite). One report in 20 runs.
    let run = (0..20).map(|_| native(&bug, &[], &[])).find(|run| run.stderr.contains("WARNING: DATA RACE"));
    let run = run.expect("no run of 20 reported the race");
    assert!(run.stderr.contains("loopvar/main.go:"), "the report names the access sites\n{}", run.text());
    let twin = go_fixture_with(LOOPVAR.name, &["-race", "-tags=ok"]);
    let run = native(&twin, &[], &[]);
    assert_eq!(run.code, Some(0), "{}", run.text());
    assert!(!run.stderr.contains("DATA RACE"), "{}", run.text());
}

#[test]
fn static_c_fixtures_build_with_glibc_and_musl() {
    let helper_script = repo_root().join("tests/fixtures/scripts/static_helper_test.sh");
    let glibc: fn(&str) -> PathBuf = |name| fixture_with(name, &["-static"]);
    for (libc, build) in [("glibc", glibc), ("musl", musl_fixture)] {
        for name in ["lost_update", "lost_update_ok", "static_helper"] {
            assert!(!has_interpreter(&build(name)), "{name} ({libc}) has a PT_INTERP");
        }
        // lost_update's lost increment needs a preemption between its two critical sections:
        // 0 in 500 native runs with either libc, not asserted here.
        let bug = native(&build("lost_update"), &[], &[]);
        assert!(bug.code == Some(0) || bug.stderr.contains("Assertion"), "lost_update ({libc})\n{}", bug.text());
        always_passes(&build("lost_update_ok"), &[], "");
        let helper = build("static_helper");
        let run = native(&helper_script, &[helper.to_str().unwrap()], &[]);
        assert_eq!(run.code, Some(0), "static_helper_test.sh with the {libc} helper\n{}", run.text());
        assert!(run.stdout.contains("both sums right"), "{}", run.text());
    }
    // The script checks what the helper printed: a helper printing something else fails it.
    let run = native(&helper_script, &["/bin/echo"], &[]);
    assert_eq!(run.code, Some(1), "{}", run.text());
    assert!(run.stdout.contains("expected \"sum 1..100 = 5050\""), "{}", run.text());
}
