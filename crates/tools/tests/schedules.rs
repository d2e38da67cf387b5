//! Schedules written by a person (`dara-replay --schedule FILE TRACE`, docs/schedules.md): the
//! demo's bug as a hand-written interleaving runs to its assertion and, saved, replays exactly;
//! the same schedule on the correct twin stops at the first line the program cannot follow and
//! says what it offered; a line that is no step is refused with its line number.
mod common;

use std::time::Duration;

use common::*;

/// Customer 1 checks, customer 2 runs its whole transfer, then customer 1 withdraws. Forced steps
/// (the process start) are left out; after the last line the run goes on without preemption.
const CHECK_THEN_ACT: &str = "# the demo's check-then-act, by hand
t0 thread-create
t0 thread-create
t1 thread-start
t1 mutex-lock alice
t1 mutex-unlock alice
t2 thread-start
t2 mutex-lock alice
t2 mutex-unlock alice
t2 mutex-lock alice
t2 mutex-unlock alice
t2 mutex-lock bob
t2 mutex-unlock bob
t2 thread-exit
";

/// A trace of one run of `program`: what `--schedule` takes the program and its settings from.
fn a_trace_of(program: &str, out: &std::path::Path) -> std::path::PathBuf {
    let run = search_with(out, "random", 0, 1, &fixture(program), &["--closed", "--no-minimize"]);
    assert!(run.code == 0 || run.code == 1, "{}", run.text());
    out.join("trace.bin")
}

#[test]
fn a_written_schedule_reaches_the_bug_and_saved_replays_exactly() {
    let out = out_dir("schedule-demo");
    let trace = a_trace_of("demo", &out);
    let schedule = out.join("check-then-act.txt");
    std::fs::write(&schedule, CHECK_THEN_ACT).unwrap();
    let saved = out.join("mine.bin");
    let run = dara_replay(&["--schedule", schedule.to_str().unwrap(), "--save", saved.to_str().unwrap(), trace.to_str().unwrap()], Duration::from_secs(120));
    assert_eq!(run.code, 1, "{}", run.text());
    assert!(run.stdout.contains("schedule followed: 13 of 13 lines"), "{}", run.text());
    assert!(run.stdout.contains("outcome: BUG: process 0 killed by SIGABRT") && run.stdout.contains("alice.balance >= 0"), "{}", run.text());
    assert!(!run.stdout.contains("note: line"), "every object named matched:\n{}", run.text());
    // Each step shows where the program called: the withdrawal's lock is demo.c's line in
    // transfer() (found in the source, so the test follows edits of the fixture).
    let source = std::fs::read_to_string(repo_root().join("tests/fixtures/demo.c")).unwrap();
    let line = source.lines().position(|l| l.trim() == "pthread_mutex_lock(&from->lock);").expect("the withdrawal's lock in demo.c") + 1;
    let withdrawal = format!("demo.c:{line} transfer");
    assert_eq!(run.stdout.matches(&withdrawal).count(), 2, "both withdrawals located at {withdrawal}:\n{}", run.text());
    assert!(run.stdout.contains(" has_funds"), "{}", run.text());
    let again = dara_replay(&["--verify", saved.to_str().unwrap()], Duration::from_secs(120));
    assert_eq!(again.code, 1, "{}", again.text());
    assert!(again.stdout.contains("verify: 2 more executions identical"), "{}", again.text());
}

#[test]
fn the_twin_cannot_follow_it_and_says_what_it_offered_instead() {
    let out = out_dir("schedule-twin");
    let trace = a_trace_of("demo_ok", &out);
    let schedule = out.join("check-then-act.txt");
    std::fs::write(&schedule, CHECK_THEN_ACT).unwrap();
    let run = dara_replay(&["-q", "--schedule", schedule.to_str().unwrap(), trace.to_str().unwrap()], Duration::from_secs(120));
    assert_eq!(run.code, 3, "{}", run.text());
    // The twin withdraws under the lock it checked with: customer 2 takes alice's lock once, so
    // the schedule's second `t2 mutex-lock alice` finds customer 2 done.
    assert!(run.stdout.contains("SCHEDULE NOT FOLLOWED at step 9: line 10 of the schedule (`t2 mutex-lock alice`) could not be followed; the program offered: t1 mutex-lock, t2 thread-exit"), "{}", run.text());

    let bad = out.join("bad.txt");
    std::fs::write(&bad, "t0 thread-create\nt1 lock-the-mutex alice\n").unwrap();
    let run = dara_replay(&["--schedule", bad.to_str().unwrap(), trace.to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(run.code, 2, "{}", run.text());
    assert!(run.stderr.contains("line 2: `lock-the-mutex` is not an operation dara lists"), "{}", run.text());
}
