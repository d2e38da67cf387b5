//! Signals that end a parked wait (issue 14): a server thread in `epoll_wait(-1)` stopped by a
//! SIGINT its own process sends, a parent waiting for its children's SIGCHLD in `sigsuspend`,
//! a blocking `read` that a signal restarts (`SA_RESTART`) or interrupts, a signal thread taking
//! signals with `sigwait`, and `pause`. Each bug is found by a search, replays (20 times,
//! `--verify`), and the same seed gives the same decisions; each twin (and each semantics check)
//! is clean under two strategies, its last execution ends its wait with dara's `Interrupt`
//! choice and replays with `--verify`; no process survives.
mod common;

use std::path::Path;
use std::time::Duration;

use common::*;
use dara_abi::Op;
use dara_scheduler::{trace, ChoiceKind};

/// How many of the trace's steps are `Interrupt` choices of `op`.
fn interrupts(trace_path: &Path, op: Op) -> usize {
    let t = trace::read_file(trace_path).unwrap();
    t.steps.iter().filter(|s| s.choice.kind == ChoiceKind::Interrupt && s.choice.op == op).count()
}

/// The bug of `name` is found by `random` seed 1 within `runs` executions, shows `shows`, replays,
/// and the same seed finds it again with the same decisions.
fn bug_found(name: &str, runs: u64, shows: &str) {
    let program = private_copy(&fixture(name), name);
    let out = out_dir(name);
    let run = search(&out, "random", 1, runs, &program);
    assert_eq!(run.code, 1, "{}", run.text());
    assert!(run.stdout.contains(shows), "{}", run.text());
    let bug = out.join("bug-0001/trace.bin");
    replays(&bug, shows);
    let again = out_dir(&format!("{name}-again"));
    assert_eq!(search(&again, "random", 1, runs, &program).code, 1);
    same_decisions(&bug, &again.join("bug-0001/trace.bin"));
    assert_no_survivors(&program);
}

/// The twin `name` is clean under `random` and `pct:3`; the last execution of the random search
/// ended a wait of `op` with a signal, and replays with `--verify`. Returns nothing: asserts.
fn twin_clean(name: &str, runs: u64, prints: &str, op: Op) {
    let program = private_copy(&fixture(name), name);
    for (strategy, seed) in [("random", 1u64), ("pct:3", 2)] {
        let out = out_dir(&format!("{name}-{}", strategy.replace(':', "")));
        let run = search(&out, strategy, seed, runs, &program);
        assert_eq!(run.code, 0, "{}", run.text());
        assert!(run.stdout.contains(&format!("no bug found in {runs} executions")), "{}", run.text());
        let last = out.join("trace.bin");
        if strategy == "random" {
            assert!(interrupts(&last, op) >= 1, "the last execution's {} was ended by a signal", op.name());
        }
        let verify = dara_replay(&["--verify", last.to_str().unwrap()], Duration::from_secs(60));
        assert_eq!(verify.code, 0, "{}", verify.text());
        assert!(verify.stdout.contains("verify: 2 more executions identical"), "{}", verify.text());
        assert!(verify.stdout.contains(prints), "{}", verify.text());
    }
    assert_no_survivors(&program);
}

#[test]
fn a_sigint_ends_a_parked_epoll_wait_and_the_lost_one_is_a_deadlock() {
    bug_found("sig_epoll_flag", 50, "BUG: deadlock: thread 0 waits to join thread 1; thread 1 waits for a ready descriptor");
    twin_clean("sig_epoll_flag_ok", 40, "server stopped", Op::NetEpollWait);
    assert!(dara_shm_files().is_empty(), "{:?}", dara_shm_files());
}

#[test]
fn sigchld_ends_sigsuspend_and_coalesced_exits_are_a_deadlock() {
    bug_found("sig_suspend_count", 50, "BUG: deadlock: thread 0 waits in sigsuspend");
    twin_clean("sig_suspend_count_ok", 40, "both workers done", Op::SigSuspend);
    assert!(dara_shm_files().is_empty(), "{:?}", dara_shm_files());
}

#[test]
fn a_signal_restarts_a_blocking_read_with_sa_restart_and_interrupts_it_without() {
    twin_clean("sig_read_restart", 30, "restarted after SIGUSR1, interrupted by SIGUSR2", Op::NetRecv);
    assert!(dara_shm_files().is_empty(), "{:?}", dara_shm_files());
}

#[test]
fn sigwait_takes_signals_and_coalesced_reloads_are_found() {
    bug_found("sig_wait_reload", 50, "Assertion `reloads == 2' failed");
    twin_clean("sig_wait_reload_ok", 40, "reloaded twice", Op::SigWait);
    assert!(dara_shm_files().is_empty(), "{:?}", dara_shm_files());
}

#[test]
fn pause_returns_once_a_signal_ran_its_handler() {
    twin_clean("sig_pause", 30, "pause returned after the handler", Op::SigSuspend);
    assert!(dara_shm_files().is_empty(), "{:?}", dara_shm_files());
}
