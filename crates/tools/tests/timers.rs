//! Virtual time (docs/time.md): timers fire at their deadlines, so a timed wait that cannot time
//! out in real time is never reported; an early timeout is a `pause` fault, found, replayed 20/20
//! and reproduced by the same seed; `--timers any` keeps the older model; `--run-for` ends an
//! endless program's executions without calling them hangs.
mod common;

use std::time::Duration;

use common::*;

/// Both timed-wait fixtures wait 100 ms for a worker that needs microseconds.
const TIMED_WAITS: [&str; 2] = ["timeout_race", "timeout_race_cond"];
const SHOWS: &str = " == 42' failed";

#[test]
fn a_timed_wait_that_cannot_time_out_in_real_time_is_never_reported() {
    for name in TIMED_WAITS {
        let program = private_copy(&fixture(name), &format!("{name}-deadline"));
        for (strategy, seed) in [("random", 3u64), ("pct:3", 4)] {
            let out = out_dir(&format!("{name}-deadline-{}", strategy.replace(':', "")));
            let run = search(&out, strategy, seed, 300, &program);
            assert_eq!(run.code, 0, "{name} was reported under {strategy} with timers at their deadlines\n{}", run.text());
            assert!(run.stdout.contains("no bug found in 300 executions"), "{}", run.text());
            let verify = dara_replay(&["-q", "--verify", out.join("trace.bin").to_str().unwrap()], Duration::from_secs(60));
            assert_eq!(verify.code, 0, "{}", verify.text());
        }
        assert_no_survivors(&program);
    }
}

#[test]
fn an_early_timeout_is_a_pause_fault_found_and_replayed() {
    for name in TIMED_WAITS {
        for (strategy, seed, runs) in [("random", 1u64, 100u64), ("pct:3", 1, 300)] {
            let tag = format!("{name}-pause-{}", strategy.replace(':', ""));
            let program = private_copy(&fixture(name), &tag);
            let out = out_dir(&tag);
            let run = search_with(&out, strategy, seed, runs, &program, &["--faults", "pause"]);
            assert_eq!(run.code, 1, "{name}: no bug within {runs} {strategy} executions with pauses\n{}", run.text());
            assert!(run.stdout.contains(SHOWS), "{}", run.text());
            let bug = out.join("bug-0001/trace.bin");
            replays(&bug, SHOWS);
            let listing = dara_replay(&[bug.to_str().unwrap()], Duration::from_secs(60));
            assert!(listing.stdout.contains("FAULT pause"), "the listing shows the pause\n{}", listing.stdout);
            let again = out_dir(&format!("{tag}-again"));
            let run2 = search_with(&again, strategy, seed, runs, &program, &["--faults", "pause"]);
            assert_eq!(run2.code, 1, "{}", run2.text());
            same_decisions(&bug, &again.join("bug-0001/trace.bin"));
            assert_no_survivors(&program);
        }
    }
}

#[test]
fn timers_that_fire_at_any_step_are_still_an_option() {
    let program = private_copy(&fixture("timeout_race"), "timeout_race-any");
    let out = out_dir("timeout_race-any");
    let run = search_with(&out, "random", 1, 100, &program, &["--timers", "any"]);
    assert_eq!(run.code, 1, "{}", run.text());
    assert!(run.stdout.contains(SHOWS), "{}", run.text());
    replays(&out.join("bug-0001/trace.bin"), SHOWS);
    let bad = dara_trace(&["--timers", "soon", "--", program.to_str().unwrap()], Duration::from_secs(30));
    assert_eq!(bad.code, 2, "{}", bad.text());
    assert!(bad.stderr.contains("unknown timer policy `soon`"), "{}", bad.text());
}

#[test]
fn run_for_ends_an_endless_program_without_a_verdict() {
    let program = private_copy(&fixture("endless_ticker"), "endless");
    let exe = program.to_str().unwrap();
    let out = out_dir("endless-run-for");
    let o = out.to_str().unwrap();
    let run = dara_trace(&["-q", "-o", o, "--runs", "3", "--run-for", "5", "--", exe], Duration::from_secs(120));
    assert_eq!(run.code, 0, "an endless program stopped at its time limit is no bug\n{}", run.text());
    assert!(run.stdout.contains("no bug found in 3 executions"), "{}", run.text());
    let replay = dara_replay(&["--verify", out.join("trace.bin").to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(replay.code, 0, "{}", replay.text());
    assert!(replay.stdout.contains("ran for 5.000s of virtual time with no bug"), "{}", replay.text());

    // Without --run-for the same program is a hang at the virtual-time bound.
    let hang = dara_trace(&["-q", "-o", out_dir("endless-hang").to_str().unwrap(), "--runs", "1", "--closed", "--max-vtime", "5", "--no-minimize", "--", exe], Duration::from_secs(120));
    assert_eq!(hang.code, 1, "{}", hang.text());
    assert!(hang.stdout.contains("virtual-time bound exceeded"), "{}", hang.text());

    // A failure before the limit is still found (tick 30 comes at 3 virtual seconds)...
    let found = dara_trace(&["-q", "-o", out_dir("endless-fails").to_str().unwrap(), "--runs", "2", "--run-for", "5", "--no-minimize", "--", exe, "30"], Duration::from_secs(120));
    assert_eq!(found.code, 1, "{}", found.text());
    assert!(found.stdout.contains("Assertion `ticks != fail_at' failed"), "{}", found.text());
    // ...and one after it is not reached.
    let early = dara_trace(&["-q", "-o", out_dir("endless-early").to_str().unwrap(), "--runs", "2", "--run-for", "2", "--", exe, "30"], Duration::from_secs(120));
    assert_eq!(early.code, 0, "{}", early.text());
    assert_no_survivors(&program);
}
