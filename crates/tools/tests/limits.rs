//! Limits that mean what they say: the busy limit counts the token holder's own CPU time (a
//! loaded machine cannot trigger it), the process limit is an option that names itself when
//! reached, and the time budget and a stop signal end a search promptly.
mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;

/// The CPU the executions under test and the hog share.
const SHARED_CPU: &str = "0";

/// Starts a process that computes forever on `SHARED_CPU` for `test` (its own copy: two tests'
/// hogs run at once, and a running program's file cannot be copied over), killed when dropped.
fn start_hog(test: &str) -> KilledOnDrop {
    let spinner = private_copy(&fixture("busy_loop"), &format!("hog-{test}"));
    KilledOnDrop(Command::new("taskset").args(["-c", SHARED_CPU]).arg(&spinner).stdout(Stdio::null()).spawn().expect("taskset runs the hog"))
}

#[test]
fn a_loaded_cpu_does_not_turn_a_long_computation_into_a_hang_but_a_busy_loop_still_is_one() {
    let hog = start_hog("loaded-cpu");
    // 700 ms of its own CPU time, with a 1 s limit, on a CPU it shares with a process that
    // computes forever: it takes well over a second of wall time, and is no hang.
    let out = out_dir("loaded-cpu");
    let program = private_copy(&fixture("cpu_work"), "loaded-cpu");
    let run = dara_trace(&["-o", out.to_str().unwrap(), "--pin-cpu", SHARED_CPU, "--busy-limit", "1", "--", program.to_str().unwrap(), "700"], Duration::from_secs(240));
    assert_eq!(run.code, 0, "{}", run.text());
    assert!(run.stdout.contains("computed for 700 ms of CPU") && run.stderr.contains("exited normally"), "{}", run.text());

    // Its twin computes forever: still a hang on the same loaded CPU, named with the option.
    let busy_out = out_dir("loaded-cpu-busy");
    let spinner = private_copy(&fixture("busy_loop"), "loaded-cpu-busy");
    let run = dara_trace(&["-o", busy_out.to_str().unwrap(), "--pin-cpu", SHARED_CPU, "--busy-limit", "1", "--", spinner.to_str().unwrap()], Duration::from_secs(240));
    assert_eq!(run.code, 1, "{}", run.text());
    assert!(run.stderr.contains("thread 1 computed for 1 s of CPU time") && run.stderr.contains("--busy-limit"), "{}", run.text());
    // The recording replays on the same loaded CPU.
    let verify = dara_replay(&["-q", "--verify", "--pin-cpu", SHARED_CPU, "--busy-limit", "1", out.join("trace.bin").to_str().unwrap()], Duration::from_secs(240));
    assert_eq!(verify.code, 0, "{}", verify.text());
    drop(hog);
    assert_no_survivors(&program);
    assert_no_survivors(&spinner);
}

#[test]
fn the_process_limit_is_an_option_and_reaching_it_says_so() {
    let script = "for i in 1 2 3 4 5 6; do /bin/true; done";
    let out = out_dir("max-processes-low");
    let run = dara_trace(&["-o", out.to_str().unwrap(), "--closed", "--max-processes", "3", "--", "/bin/sh", "-c", script], Duration::from_secs(60));
    assert_eq!(run.code, 2, "a run stopped by dara's limit is not the program's bug\n{}", run.text());
    let said = run.stderr.lines().chain(run.stderr.lines()).find(|l| l.contains("more than 3 processes")).unwrap_or_else(|| panic!("no line names the limit\n{}", run.text()));
    assert!(said.contains("--max-processes"), "the line names the option: {said}");

    let out = out_dir("max-processes-enough");
    let run = dara_trace(&["-o", out.to_str().unwrap(), "--closed", "--max-processes", "8", "--", "/bin/sh", "-c", script], Duration::from_secs(60));
    assert_eq!(run.code, 0, "{}", run.text());
    let verify = dara_replay(&["-q", "--verify", "--max-processes", "8", out.join("trace.bin").to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(verify.code, 0, "{}", verify.text());

    let over = dara_trace(&["-o", out.to_str().unwrap(), "--max-processes", "100000", "--", "/bin/true"], Duration::from_secs(60));
    assert_eq!(over.code, 2, "a limit above the compiled maximum is a usage error\n{}", over.text());
    assert!(over.stderr.contains("--max-processes"), "{}", over.text());
}

/// cpu_work for this many ms of its own CPU time: far longer than any test waits.
const LONG_WORK_MS: &str = "600000";

#[test]
fn the_time_budget_stops_a_long_execution_and_the_search() {
    for strategy in ["random", "dpor"] {
        let out = out_dir(&format!("budget-{strategy}"));
        let program = private_copy(&fixture("cpu_work"), &format!("budget-{strategy}"));
        let run = dara_trace(
            &["-o", out.to_str().unwrap(), "--strategy", strategy, "--runs", "50", "--time-budget", "2", "--busy-limit", "3600", "--", program.to_str().unwrap(), LONG_WORK_MS],
            Duration::from_secs(120),
        );
        assert_eq!(run.code, 0, "{strategy}: a spent budget is no bug\n{}", run.text());
        assert!(run.stderr.contains("time budget spent after 1 executions"), "{strategy}: the first execution was cut\n{}", run.text());
        assert!(!run.stdout.contains("computed for"), "{strategy}: the program cannot have finished\n{}", run.text());
        assert!(out.join("trace.bin").is_file(), "the cut execution's trace is kept");
        assert_no_survivors(&program);
    }
}

#[test]
fn every_strategy_stops_promptly_on_sigterm() {
    for strategy in ["random", "pct:3", "dfs", "dpor"] {
        let out = out_dir(&format!("sigterm-{}", strategy.replace(':', "-")));
        let program = private_copy(&fixture("cpu_work"), &format!("sigterm-{}", strategy.replace(':', "-")));
        let mut child = Command::new(env!("CARGO_BIN_EXE_dara-trace"))
            .args(["-q", "-o", out.to_str().unwrap(), "--strategy", strategy, "--runs", "50", "--busy-limit", "3600", "--", program.to_str().unwrap(), LONG_WORK_MS])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(500));
        // SAFETY: sending a signal to our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let status = wait_at_most(&mut child, Duration::from_secs(30)).unwrap_or_else(|| {
            let _ = child.kill();
            panic!("{strategy}: dara-trace did not stop within 30 s of SIGTERM")
        });
        assert_eq!(status.code(), Some(130), "{strategy}: interrupted");
        assert_no_survivors(&program);
    }
}

/// Executions of the /proc-sampling fixture in the loaded search below.
const PROC_LOOP_RUNS: u64 = 30;

#[test]
fn processes_that_open_their_own_proc_files_in_a_loop_end_cleanly_next_to_a_cpu_hog() {
    // Every thread of the target opens /proc/thread-self/stat and /proc/self/status 150 times
    // and exits, on the CPU a hog computes on: the kernel's reap of those threads and processes
    // (which invalidates their /proc entries) once spun for minutes while dara looked the same
    // entries up. Every execution must end as the program ends (exit 0), none as a hang or an
    // unkillable process, and the limit below is a safety net, not a speed assertion.
    let hog = start_hog("proc-self-loop");
    let program = private_copy(&fixture("proc_self_loop"), "proc-self-loop");
    let search = |out: &std::path::Path, runs: u64| {
        let runs = runs.to_string();
        dara_trace(&["-o", out.to_str().unwrap(), "--pin-cpu", SHARED_CPU, "--seed", "3", "--runs", &runs, "--", program.to_str().unwrap()], Duration::from_secs(900))
    };
    let out = out_dir("proc-self-loop");
    let run = search(&out, PROC_LOOP_RUNS);
    assert_eq!(run.code, 0, "{}", run.text());
    assert!(run.stderr.contains(&format!("no bug found in {PROC_LOOP_RUNS} executions")), "{}", run.text());
    assert_eq!(run.stdout.matches("sampled 900 times").count() as u64, PROC_LOOP_RUNS, "every execution sampled all its files\n{}", run.text());
    assert!(!run.text().contains("could not all be killed") && !run.text().contains("BUG"), "{}", run.text());
    // The last execution replays on the same loaded CPU, and the same seed makes the same one.
    let verify = dara_replay(&["-q", "--verify", "--pin-cpu", SHARED_CPU, out.join("trace.bin").to_str().unwrap()], Duration::from_secs(300));
    assert_eq!(verify.code, 0, "{}", verify.text());
    let again = out_dir("proc-self-loop-again");
    let rerun = search(&again, PROC_LOOP_RUNS);
    assert_eq!(rerun.code, 0, "{}", rerun.text());
    same_decisions(&out.join("trace.bin"), &again.join("trace.bin"));
    drop(hog);
    assert_no_survivors(&program);
    assert!(dara_shm_files().is_empty(), "shared memory left in /dev/shm: {:?}", dara_shm_files());
}

/// The thread-start library and a program linked against it (`twin`: the correct one).
fn start_wrapper_program(twin: bool) -> std::path::PathBuf {
    let library = private_copy(&fixture_with("start_wrapper_block", &["-shared", "-fPIC", "-DSTART_LIBRARY"]), "start-wrapper-library");
    let rpath = format!("-Wl,-rpath,{}", library.parent().unwrap().display());
    let name = if twin { "start_wrapper_block_ok" } else { "start_wrapper_block" };
    private_copy(&fixture_with(name, &[library.to_str().unwrap(), &rpath]), "start-wrapper")
}

#[test]
fn a_thread_blocked_before_dara_s_start_wrapper_is_named_instead_of_a_silent_stall() {
    // A library's pthread_create runs a prologue in the new thread that takes a flock main
    // holds while main waits in a modelled join: the scheduler waits for the newborn, which
    // sleeps in the kernel. Before, nothing watched a thread being born and the run stalled.
    let program = start_wrapper_program(false);
    let out = out_dir("start-wrapper-block");
    let run = dara_trace(&["-o", out.to_str().unwrap(), "--", program.to_str().unwrap()], Duration::from_secs(120));
    assert_eq!(run.code, 2, "dara's limit, not the program's bug\n{}", run.text());
    let said = run.stderr.lines().find(|l| l.contains("uncontrolled")).unwrap_or_else(|| panic!("no uncontrolled verdict\n{}", run.text()));
    assert!(said.contains("thread 1") && said.contains("is being born") && said.contains("flock("), "the newborn and its system call are named: {said}");
    assert!(!run.stderr.contains("BUG"), "{}", run.text());
    assert_no_survivors(&program);

    // The twin (the lock is free when the thread is born) runs, searches clean and replays.
    let twin = start_wrapper_program(true);
    let out = out_dir("start-wrapper-block-ok");
    let run = dara_trace(&["-o", out.to_str().unwrap(), "--seed", "2", "--runs", "10", "--", twin.to_str().unwrap()], Duration::from_secs(300));
    assert_eq!(run.code, 0, "{}", run.text());
    assert_eq!(run.stdout.matches("joined").count(), 10, "{}", run.text());
    let verify = dara_replay(&["-q", "--verify", out.join("trace.bin").to_str().unwrap()], Duration::from_secs(120));
    assert_eq!(verify.code, 0, "{}", verify.text());
    let again = out_dir("start-wrapper-block-ok-again");
    let rerun = dara_trace(&["-o", again.to_str().unwrap(), "--seed", "2", "--runs", "10", "--", twin.to_str().unwrap()], Duration::from_secs(300));
    assert_eq!(rerun.code, 0, "{}", rerun.text());
    same_decisions(&out.join("trace.bin"), &again.join("trace.bin"));
    assert_no_survivors(&twin);
    assert!(dara_shm_files().is_empty(), "shared memory left in /dev/shm: {:?}", dara_shm_files());
}
