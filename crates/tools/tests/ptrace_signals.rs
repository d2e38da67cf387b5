//! Signals on the ptrace path (docs/ptrace.md, "Signals"): the preload's signal fixtures built
//! statically (glibc and musl), so the agent runs them: a parent waiting in `sigsuspend` for its
//! children's SIGCHLD (coalesced exits: a deadlock the search finds; its twin clean), a signal
//! thread taking signals with `sigwait` (coalesced reloads found), `pause` with a handler,
//! `sigtimedwait` with a timeout that fires and one that receives, and a Go program whose
//! runtime preempts a goroutine with SIGURG sent by `tgkill`: a kill step of the schedule. Each
//! bug is found, replayed, and found again identically with the same seed; each clean program
//! ends its wait with dara's `Interrupt` choice, replays with `--verify`, and the same seed gives
//! the same decisions.
mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::real::{record, replays_identically, steps_with};
use common::*;
use dara_abi::Op;
use dara_scheduler::{trace, ChoiceKind};

/// How many of the trace's steps are `Interrupt` choices of `op`.
fn interrupts(trace_path: &Path, op: Op) -> usize {
    let t = trace::read_file(trace_path).unwrap();
    t.steps.iter().filter(|s| s.choice.kind == ChoiceKind::Interrupt && s.choice.op == op).count()
}

/// The C fixture `name` linked statically against glibc and against musl, each under a private
/// name for test `test`.
fn static_builds(name: &str, test: &str) -> Vec<(&'static str, PathBuf)> {
    let glibc = fixture_with(name, &["-static", "-pthread"]);
    let musl = musl_fixture(name);
    vec![("glibc", private_copy(&glibc, &format!("{test}-glibc"))), ("musl", private_copy(&musl, &format!("{test}-musl")))]
}

/// The bug of static `program` is found by `random` seed 1 within `runs` executions, shows
/// `shows`, replays, and the same seed finds it again with the same decisions.
fn bug_found(test: &str, program: &Path, runs: u64, shows: &str) {
    let out = out_dir(test);
    let run = search(&out, "random", 1, runs, program);
    assert_eq!(run.code, 1, "{test}: {}", run.text());
    assert!(run.stderr.contains(shows), "{test}: {}", run.text());
    let bug = out.join("bug-0001/trace.bin");
    replays(&bug, shows);
    let again = out_dir(&format!("{test}-again"));
    assert_eq!(search(&again, "random", 1, runs, program).code, 1);
    same_decisions(&bug, &again.join("bug-0001/trace.bin"));
    assert_no_survivors(program);
}

/// Static `program` is clean in `runs` random executions (seed 1); the last one ended a wait of
/// `op` with a signal, printed `prints`, and replays with `--verify`; the same seed gives the
/// same decisions.
fn clean(test: &str, program: &Path, runs: u64, prints: &str, op: Op) {
    let out = out_dir(test);
    let run = search(&out, "random", 1, runs, program);
    assert_eq!(run.code, 0, "{test}: {}", run.text());
    assert!(run.stderr.contains(&format!("no bug found in {runs} executions")), "{test}: {}", run.text());
    let last = out.join("trace.bin");
    assert!(interrupts(&last, op) >= 1, "{test}: the last execution's {} was not ended by a signal", op.name());
    let verify = dara_replay(&["--verify", last.to_str().unwrap()], Duration::from_secs(180));
    assert_eq!(verify.code, 0, "{test}: {}", verify.text());
    assert!(verify.stdout.contains("verify: 2 more executions identical") && verify.stdout.contains(prints), "{test}: {}", verify.text());
    let again = out_dir(&format!("{test}-again"));
    assert_eq!(search(&again, "random", 1, runs, program).code, 0);
    same_decisions(&last, &again.join("trace.bin"));
    assert_no_survivors(program);
}

#[test]
fn sigchld_ends_a_static_parent_s_sigsuspend_and_coalesced_exits_are_a_deadlock() {
    for (build, program) in static_builds("sig_suspend_count", "ptrace-sigsuspend") {
        bug_found(&format!("ptrace-sigsuspend-{build}"), &program, 50, "BUG: deadlock: thread 0 waits in sigsuspend");
    }
    for (build, program) in static_builds("sig_suspend_count_ok", "ptrace-sigsuspend-ok") {
        clean(&format!("ptrace-sigsuspend-ok-{build}"), &program, 20, "both workers done", Op::SigSuspend);
    }
    assert!(dara_shm_files().is_empty(), "{:?}", dara_shm_files());
}

#[test]
fn a_static_signal_thread_takes_signals_with_sigwait_and_coalesced_reloads_are_found() {
    for (build, program) in static_builds("sig_wait_reload", "ptrace-sigwait") {
        // glibc's assert message is read from its output; musl's abort is named by its signal.
        let shows = if build == "glibc" { "Assertion `reloads == 2' failed" } else { "BUG: process 0 killed by SIGABRT" };
        bug_found(&format!("ptrace-sigwait-{build}"), &program, 50, shows);
    }
    for (build, program) in static_builds("sig_wait_reload_ok", "ptrace-sigwait-ok") {
        clean(&format!("ptrace-sigwait-ok-{build}"), &program, 20, "reloaded twice", Op::SigWait);
    }
}

#[test]
fn a_static_pause_returns_once_a_signal_ran_its_handler() {
    for (build, program) in static_builds("sig_pause", "ptrace-pause") {
        clean(&format!("ptrace-pause-{build}"), &program, 20, "pause returned after the handler", Op::SigSuspend);
    }
}

/// A timeout that fires on the virtual clock (no `Interrupt`: the timer), and a signal that a
/// child's `kill` sends (a kill step, then the `Interrupt` that ends the wait).
#[test]
fn a_static_sigtimedwait_times_out_on_the_virtual_clock_and_takes_a_child_s_signal() {
    for (build, program) in static_builds("sig_timedwait", "ptrace-sigtimedwait") {
        let test = format!("ptrace-sigtimedwait-{build}");
        let (trace_path, text) = record(&test, &[program.to_str().unwrap()]);
        assert!(text.contains("timed out: EAGAIN after 50 ms") && text.contains("received SIGUSR1 from the child"), "{test}: {text}");
        assert_eq!(steps_with(&trace_path, Op::ProcessKill), 1, "{test}: the child's kill is a step");
        replays_identically(&trace_path);
        clean(&format!("{test}-search"), &program, 10, "received SIGUSR1 from the child", Op::SigWait);
    }
}

/// Go's runtime preempts a goroutine by sending its thread SIGURG with `tgkill` (the garbage
/// collector stopping the world, sysmon): each is a kill step of the schedule, posted as the
/// preload posts a `pthread_kill`, and the run replays exactly. (Before, the signals went
/// unseen, and the background sweeper, waiting in a loop for SIGURG to preempt it, span for 60 s
/// of CPU time and was stopped as uncontrolled: `runtime.freeSomeWbufs` is a probe now.)
#[test]
fn go_s_preemption_signals_are_kill_steps_and_replay() {
    let program = common::go::go_fixture("preempt");
    let program = program.to_str().unwrap();
    let prints = "preempt: sum 314616 after >= 1 collections";
    let (trace_path, text) = record("ptrace-go-preempt", &[program]);
    let (again, _) = record("ptrace-go-preempt-again", &[program]);
    same_decisions(&trace_path, &again);
    assert!(text.contains(prints), "{text}");
    assert!(steps_with(&trace_path, Op::ProcessKill) >= 1, "no SIGURG was a kill step: {text}");
    replays_identically(&trace_path);
    let (last, run) = common::real::search_clean("ptrace-go-preempt-search", 4, &[], &[program]);
    assert!(run.stdout.contains(prints), "{}", run.text());
    assert!(steps_with(&last, Op::ProcessKill) >= 1, "{}", run.text());
    replays_identically(&last);
}

/// A static shell (Debian's busybox-static) kills its sleeping child with SIGTERM and with
/// SIGKILL: the kill is a step, the child, parked by the agent, takes the signal and dies before
/// the shell goes on, and the shell's `wait` collects it: clean, replayed with `--verify`. A
/// static program that kills itself with SIGKILL (`raise`, or a thread's `tgkill`) is the
/// program's own death, not a kill from outside: a bug, replayed.
#[test]
fn a_static_program_s_kills_are_steps_and_the_killed_child_is_gone_before_the_sender_goes_on() {
    let busybox = installed("busybox", "busybox-static");
    let busybox = busybox.to_str().unwrap();
    for (tag, signal) in [("term", ""), ("kill", "-9 ")] {
        let script = format!("{busybox} sleep 5 & kill {signal}$!; wait; echo waited");
        let out = out_dir(&format!("ptrace-kill-child-{tag}"));
        let run = dara_trace(&["-q", "-o", out.to_str().unwrap(), "--runs", "5", "--", busybox, "sh", "-c", &script], Duration::from_secs(180));
        assert_eq!(run.code, 0, "{tag}: {}", run.text());
        assert!(run.stderr.contains("no bug found in 5 executions") && run.stdout.contains("waited"), "{tag}: {}", run.text());
        let last = out.join("trace.bin");
        assert_eq!(steps_with(&last, Op::ProcessKill), 1, "{tag}: the kill is a step");
        replays_identically(&last);
    }
    for (build, program) in static_builds("sig_raise_kill", "ptrace-raise-kill") {
        for mode in ["raise", "thread"] {
            let out = out_dir(&format!("ptrace-raise-kill-{build}-{mode}"));
            let run = dara_trace(&["-q", "-o", out.to_str().unwrap(), "--runs", "3", "--", program.to_str().unwrap(), mode], Duration::from_secs(120));
            assert_eq!(run.code, 1, "{build} {mode}: {}", run.text());
            assert!(run.stderr.contains("BUG: process 0 killed by SIGKILL") && !run.text().contains("killed from outside"), "{build} {mode}: {}", run.text());
            replays(&out.join("bug-0001/trace.bin"), "killed by SIGKILL");
        }
        assert_no_survivors(&program);
    }
}

/// GNU make's jobserver pattern linked statically: SIGCHLD blocked everywhere but in the mask of
/// the wait (`pselect`, `ppoll`, `epoll_pwait`), so each child's end interrupts it and runs the
/// handler. The agent counts the call's own mask, and an interrupted `epoll_pwait` runs as a
/// `ppoll` under that mask (a zero-timeout `epoll_pwait` returns before it looks for signals).
/// Before, the agent judged `epoll_pwait` on the thread's mask and then returned EINTR with the
/// signal still pending: "(0 SIGCHLD handled)", exit 4, a false bug.
#[test]
fn a_static_wait_under_its_own_signal_mask_runs_the_handler_it_lets_through() {
    for (build, program) in static_builds("masked_wait_sigchld", "ptrace-masked-wait") {
        for call in ["pselect", "ppoll", "epoll_pwait"] {
            let out = out_dir(&format!("ptrace-masked-wait-{build}-{call}"));
            let run = dara_trace(&["-q", "-o", out.to_str().unwrap(), "--seed", "1", "--runs", "3", "--", program.to_str().unwrap(), call], Duration::from_secs(180));
            assert_eq!(run.code, 0, "{build} {call}: {}", run.text());
            // Each execution exits 0 only if a wait was interrupted and the handler ran.
            assert_eq!(run.stdout.matches("reaped 3 children after").count(), 3, "{build} {call}: {}", run.text());
            assert!(!run.stdout.contains("(0 SIGCHLD handled)"), "{build} {call}: {}", run.text());
            replays_identically(&out.join("trace.bin"));
        }
        assert_no_survivors(&program);
    }
}
