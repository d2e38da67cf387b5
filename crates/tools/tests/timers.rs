//! Virtual time (docs/time.md): timers fire at their deadlines, so a timed wait that cannot time
//! out in real time is never reported; an early timeout is a `pause` fault, found, replayed 20/20
//! and reproduced by the same seed; `--timers any` keeps the older model; `--run-for` ends an
//! endless program's executions without calling them hangs; timerfds expire on the virtual clock
//! (read, epoll, blocking read, gettime, settime's old value; shared by dup and fork, freed by the
//! last close), replay, and an hour of them takes a moment; a watchdog timerfd due at the instant
//! its work ends is a tie, found and replayed, and its twin with a margin is clean (unless a pause
//! fault makes the worker slow).
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
            assert!(run.stderr.contains("no bug found in 300 executions"), "{}", run.text());
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
            assert!(run.stderr.contains(SHOWS), "{}", run.text());
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
    assert!(run.stderr.contains(SHOWS), "{}", run.text());
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
    assert!(run.stderr.contains("no bug found in 3 executions"), "{}", run.text());
    let replay = dara_replay(&["--verify", out.join("trace.bin").to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(replay.code, 0, "{}", replay.text());
    assert!(replay.stdout.contains("ran for 5.000s of virtual time with no bug"), "{}", replay.text());

    // Without --run-for the same program is a hang at the virtual-time bound.
    let hang = dara_trace(&["-q", "-o", out_dir("endless-hang").to_str().unwrap(), "--runs", "1", "--closed", "--max-vtime", "5", "--no-minimize", "--", exe], Duration::from_secs(120));
    assert_eq!(hang.code, 1, "{}", hang.text());
    assert!(hang.stderr.contains("virtual-time bound exceeded"), "{}", hang.text());

    // A failure before the limit is still found (tick 30 comes at 3 virtual seconds)...
    let found = dara_trace(&["-q", "-o", out_dir("endless-fails").to_str().unwrap(), "--runs", "2", "--run-for", "5", "--no-minimize", "--", exe, "30"], Duration::from_secs(120));
    assert_eq!(found.code, 1, "{}", found.text());
    assert!(found.stderr.contains("Assertion `ticks != fail_at' failed"), "{}", found.text());
    // ...and one after it is not reached.
    let early = dara_trace(&["-q", "-o", out_dir("endless-early").to_str().unwrap(), "--runs", "2", "--run-for", "2", "--", exe, "30"], Duration::from_secs(120));
    assert_eq!(early.code, 0, "{}", early.text());
    assert_no_survivors(&program);
}

/// The lines a `timerfd_*` fixture prints (dara's own lines left out).
fn program_lines(out: &str) -> Vec<&str> {
    out.lines().filter(|l| ["tick:", "worker:", "one-shot:", "done:", "child:", "main:"].iter().any(|p| l.starts_with(p))).collect()
}

#[test]
fn timerfds_expire_on_the_virtual_clock_and_replay() {
    let program = private_copy(&fixture("timerfd_ticks"), "timerfd-ticks");
    let exe = program.to_str().unwrap();
    let out = out_dir("timerfd-ticks");
    let run = dara_trace(&["-o", out.to_str().unwrap(), "--runs", "1", "--epoch", SEARCH_EPOCH, "--", exe], Duration::from_secs(120));
    assert_eq!(run.code, 0, "{}", run.text());
    let lines = program_lines(&run.stdout);
    assert!(lines.contains(&"one-shot: 35 ms left"), "timerfd_gettime answers from virtual time\n{}", run.text());
    // Every tick at its period (plus the steps since the clock reached it), the one-shot once.
    for k in 1..=10 {
        assert!(lines.iter().any(|l| l.starts_with(&format!("tick: 1 (total {k}) at {k}0.00"))), "tick {k}\n{}", run.text());
    }
    assert!(lines.iter().any(|l| l.starts_with("worker: one-shot fired 1 at 35.00")), "{}", run.text());
    assert!(lines.iter().any(|l| l.starts_with("done: 10 ticks")), "{}", run.text());

    let replay = dara_replay(&[out.join("trace.bin").to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(replay.code, 0, "{}", replay.text());
    assert_eq!(program_lines(&replay.stdout), lines, "the replay prints what the recording printed");
    assert!(replay.stdout.lines().any(|l| l.contains("recv") && l.contains("timerfd e") && (l.ends_with("-> 8") || l.contains("-> 8 "))), "the listing names the timer and its 8-byte read\n{}", replay.stdout);
    let verify = dara_replay(&["-q", "--verify", out.join("trace.bin").to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(verify.code, 0, "{}", verify.text());
    assert!(verify.stdout.contains("verify: 2 more executions identical"), "{}", verify.text());

    // A search stays clean, and the same seed searches the same executions.
    for (strategy, seed) in [("random", 3u64), ("pct:3", 4)] {
        let tag = format!("timerfd-ticks-{}", strategy.replace(':', ""));
        let (a, b) = (out_dir(&tag), out_dir(&format!("{tag}-again")));
        for dir in [&a, &b] {
            let run = search(dir, strategy, seed, 20, &program);
            assert_eq!(run.code, 0, "{}", run.text());
            assert!(run.stderr.contains("no bug found in 20 executions"), "{}", run.text());
        }
        same_decisions(&a.join("trace.bin"), &b.join("trace.bin"));
    }
    assert_no_survivors(&program);
}

#[test]
fn an_hour_of_timerfd_ticks_takes_a_moment() {
    let program = private_copy(&fixture("timerfd_ticks"), "timerfd-hour");
    let out = out_dir("timerfd-hour");
    // A one-second period for an hour: 3600 expirations, read in an epoll/poll/select loop.
    let run = dara_trace(&["-q", "-o", out.to_str().unwrap(), "--runs", "1", "--max-vtime", "4000", "--", program.to_str().unwrap(), "1000", "3600000"], Duration::from_secs(600));
    assert_eq!(run.code, 0, "{}", run.text());
    assert!(run.stdout.contains("tick: 1 (total 3600) at 3600000.0"), "{}", run.text());
    assert!(run.stdout.contains("done: 3600 ticks at 36000"), "{}", run.text());
    assert!(run.wall < Duration::from_secs(600), "an hour of virtual ticks took {:?}", run.wall);
    let verify = dara_replay(&["-q", "--verify", out.join("trace.bin").to_str().unwrap()], Duration::from_secs(600));
    assert_eq!(verify.code, 0, "{}", verify.text());
    assert_no_survivors(&program);
}

#[test]
fn a_timerfd_is_shared_by_dup_and_fork_and_freed_by_the_last_close() {
    let program = private_copy(&fixture("timerfd_shared"), "timerfd-shared");
    let exe = program.to_str().unwrap();
    let out = out_dir("timerfd-shared");
    let run = search(&out, "random", 2, 10, &program);
    assert_eq!(run.code, 0, "{}", run.text());
    assert!(run.stdout.contains("child: tick 3 at 15.00"), "the child reads the ticks through its copy\n{}", run.text());
    let verify = dara_replay(&["-q", "--verify", out.join("trace.bin").to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(verify.code, 0, "{}", verify.text());

    // Once every copy is closed the timer is gone: main, left waiting for a pipe, is deadlocked
    // at once instead of riding a dead timer's periods up to the virtual-time bound.
    let hang = out_dir("timerfd-shared-hang");
    let run = dara_trace(&["-q", "-o", hang.to_str().unwrap(), "--runs", "1", "--no-minimize", "--", exe, "hang"], Duration::from_secs(120));
    assert_eq!(run.code, 1, "{}", run.text());
    assert!(run.stderr.contains("BUG: deadlock: thread 0 waits for data"), "{}", run.text());
    let listing = dara_replay(&[hang.join("bug-0001/trace.bin").to_str().unwrap()], Duration::from_secs(60));
    assert!(listing.stdout.lines().all(|l| !l.contains(" 0.020s ")), "no step after the last tick the child read\n{}", listing.stdout);
    assert_no_survivors(&program);
}

#[test]
fn a_watchdog_timerfd_due_with_its_work_is_found_and_replayed() {
    const SHOWS: &str = "Assertion `done' failed";
    let program = private_copy(&fixture("timerfd_watchdog"), "timerfd-watchdog");
    let out = out_dir("timerfd-watchdog");
    let run = search(&out, "random", 1, 100, &program);
    assert_eq!(run.code, 1, "the watchdog's tie with the work was not found\n{}", run.text());
    assert!(run.stderr.contains(SHOWS), "{}", run.text());
    let bug = out.join("bug-0001/trace.bin");
    replays(&bug, SHOWS);
    let again = out_dir("timerfd-watchdog-again");
    let run2 = search(&again, "random", 1, 100, &program);
    assert_eq!(run2.code, 1, "{}", run2.text());
    same_decisions(&bug, &again.join("bug-0001/trace.bin"));
    assert_no_survivors(&program);

    let twin = private_copy(&fixture("timerfd_watchdog_ok"), "timerfd-watchdog-ok");
    for (strategy, seed) in [("random", 1u64), ("pct:3", 2)] {
        let out = out_dir(&format!("timerfd-watchdog-ok-{}", strategy.replace(':', "")));
        let run = search(&out, strategy, seed, 200, &twin);
        assert_eq!(run.code, 0, "the twin with a margin was reported under {strategy}\n{}", run.text());
        assert!(run.stderr.contains("no bug found in 200 executions"), "{}", run.text());
    }
    // A slow worker is a pause fault: it stands still while the clock passes the watchdog's
    // deadline (a timerfd's deadline counts as the others' next one), and the margin is gone.
    let out = out_dir("timerfd-watchdog-ok-pause");
    let run = search_with(&out, "random", 1, 100, &twin, &["--faults", "pause"]);
    assert_eq!(run.code, 1, "{}", run.text());
    assert!(run.stderr.contains(SHOWS), "{}", run.text());
    let listing = dara_replay(&[out.join("bug-0001/trace.bin").to_str().unwrap()], Duration::from_secs(60));
    assert!(listing.stdout.contains("FAULT pause      pause thread 1 until 0.060s"), "the worker stands still until the watchdog's deadline\n{}", listing.stdout);
    assert_no_survivors(&twin);
}
