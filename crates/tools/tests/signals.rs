//! Signals that end a parked wait (issue 14): a server thread in `epoll_wait(-1)` stopped by a
//! SIGINT its own process sends, a parent waiting for its children's SIGCHLD in `sigsuspend`,
//! a blocking `read` or `connect` (to a full backlog) that a signal restarts (`SA_RESTART`) or
//! interrupts, a signal thread taking
//! signals with `sigwait`, `pause`, a daemon's `nanosleep`, a handler that runs inside a
//! condition wait, semaphore and raw futex waits (EINTR or restarted, as Linux does), and a
//! recorded sleeping daemon stopped by one Ctrl-C. Each bug is found by a search, replays (20
//! times, `--verify`), and the same seed gives the same decisions; each twin (and each semantics
//! check) is clean under two strategies, its last execution ends its wait with dara's
//! `Interrupt` choice, replays with `--verify`, and the same seed gives the same decisions; no
//! process survives.
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

/// A recording `dara-trace ARGS` with its stdout and stderr piped and `stdin` as given, once the
/// program printed its first line: the recording, a reader of the rest of its stdout, and that
/// line.
fn recording_that_said(args: &[&str], stdin: std::process::Stdio) -> (std::process::Child, std::io::BufReader<std::process::ChildStdout>, String) {
    use std::io::BufRead;
    let mut run = std::process::Command::new(env!("CARGO_BIN_EXE_dara-trace"))
        .args(args)
        .stdin(stdin)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut said = std::io::BufReader::new(run.stdout.take().unwrap());
    let mut line = String::new();
    said.read_line(&mut line).unwrap();
    (run, said, line)
}

/// The bug of `name` is found by `random` seed 1 within `runs` executions, shows `shows`, replays,
/// and the same seed finds it again with the same decisions.
fn bug_found(name: &str, runs: u64, shows: &str) {
    let program = private_copy(&fixture(name), name);
    let out = out_dir(name);
    let run = search(&out, "random", 1, runs, &program);
    assert_eq!(run.code, 1, "{}", run.text());
    assert!(run.stderr.contains(shows), "{}", run.text());
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
    let mut first = None;
    for (strategy, seed) in [("random", 1u64), ("pct:3", 2)] {
        let out = out_dir(&format!("{name}-{}", strategy.replace(':', "")));
        let run = search(&out, strategy, seed, runs, &program);
        assert_eq!(run.code, 0, "{}", run.text());
        assert!(run.stderr.contains(&format!("no bug found in {runs} executions")), "{}", run.text());
        let last = out.join("trace.bin");
        if strategy == "random" {
            assert!(interrupts(&last, op) >= 1, "the last execution's {} was ended by a signal", op.name());
            first = Some(last.clone());
        }
        let verify = dara_replay(&["--verify", last.to_str().unwrap()], Duration::from_secs(180));
        assert_eq!(verify.code, 0, "{}", verify.text());
        assert!(verify.stdout.contains("verify: 2 more executions identical"), "{}", verify.text());
        assert!(verify.stdout.contains(prints), "{}", verify.text());
    }
    let again = out_dir(&format!("{name}-random-again"));
    assert_eq!(search(&again, "random", 1, runs, &program).code, 0);
    same_decisions(&first.unwrap(), &again.join("trace.bin"));
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

/// A blocking connect to a TCP or Unix listener whose backlog is full waits in the model (not in
/// the kernel holding the run token); SA_RESTART goes on waiting, a handler without it ends the
/// connect with EINTR; an interrupted TCP connect goes on in the background, as in Linux.
#[test]
fn a_connect_waits_for_room_in_the_backlog_and_a_signal_restarts_or_interrupts_it() {
    let prints = "tcp and unix: restarted after SIGUSR1, interrupted by SIGUSR2";
    // Few executions: the interrupted TCP connect completes with its retransmitted SYN (a second
    // of real time each, docs/networking.md).
    twin_clean("sig_connect", 5, prints, Op::NetConnect);
    // A recording: the program's listener is split (docs/outside.md), so its own connects reach
    // dara's public socket; they wait for room in the program's backlog all the same.
    let program = private_copy(&fixture("sig_connect"), "sig_connect-recorded");
    let out = out_dir("sig_connect-recorded");
    let run = dara_trace(&["-o", out.to_str().unwrap(), "--", program.to_str().unwrap()], Duration::from_secs(120));
    assert_eq!(run.code, 0, "{}", run.text());
    assert!(run.stdout.contains(prints) && run.stderr.contains("no bug found"), "{}", run.text());
    let trace_path = out.join("trace.bin");
    assert!(interrupts(&trace_path, Op::NetConnect) >= 1, "the recording's second connect was ended by a signal");
    // Three executions, each waiting a second of real time for a retransmitted SYN: bounded
    // generously, as a loaded machine stretches them.
    let verify = dara_replay(&["--verify", trace_path.to_str().unwrap()], Duration::from_secs(180));
    assert_eq!(verify.code, 0, "{}", verify.text());
    assert!(verify.stdout.contains("verify: 2 more executions identical") && verify.stdout.contains(prints), "{}", verify.text());
    assert_no_survivors(&program);
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

/// A signal thread in `sigwait` for a signal nobody catches, stopped by `pthread_kill` from the
/// main thread (pbzip2's pattern): before, a false deadlock.
#[test]
fn a_pthread_kill_ends_a_signal_thread_s_sigwait() {
    twin_clean("sig_wait_thread_kill", 20, "signal thread stopped by pthread_kill", Op::SigWait);
    assert!(dara_shm_files().is_empty(), "{:?}", dara_shm_files());
}

#[test]
fn pause_returns_once_a_signal_ran_its_handler() {
    twin_clean("sig_pause", 30, "pause returned after the handler", Op::SigSuspend);
    assert!(dara_shm_files().is_empty(), "{:?}", dara_shm_files());
}

#[test]
fn a_signal_ends_a_sleeping_daemon_s_nanosleep_with_the_time_left() {
    twin_clean("sig_sleep_daemon", 20, "daemon stopped by SIGTERM after 1 nap, nanosleep: EINTR with 58 s left", Op::Sleep);
    assert!(dara_shm_files().is_empty(), "{:?}", dara_shm_files());
}

#[test]
fn a_handler_runs_inside_a_condition_wait_and_one_that_only_sets_a_flag_is_a_deadlock() {
    bug_found("sig_cond_flag", 20, "BUG: deadlock: thread 0 waits on condition variable cond");
    twin_clean("sig_cond_flag_ok", 20, "stopped by SIGINT in pthread_cond_wait", Op::CondWait);
    assert!(dara_shm_files().is_empty(), "{:?}", dara_shm_files());
}

#[test]
fn a_signal_ends_a_semaphore_wait_with_eintr_unless_sa_restart_restarts_it() {
    twin_clean("sig_sem_wait", 20, "sem_wait: EINTR without SA_RESTART, restarted with it; sem_timedwait: EINTR", Op::SemWait);
    assert!(dara_shm_files().is_empty(), "{:?}", dara_shm_files());
}

/// A caught signal ends a `waitpid` that has no exited child to collect (EINTR without
/// SA_RESTART, waits on with it), and a `pthread_kill` to a thread parked in a sleep ends that
/// sleep at the sender's next scheduling point.
#[test]
fn a_signal_ends_waitpid_and_pthread_kill_ends_a_parked_sleep() {
    twin_clean("sig_waitpid", 20, "waitpid: EINTR without SA_RESTART, restarted with it; pthread_kill ended the sleep", Op::ProcessWait);
    assert!(dara_shm_files().is_empty(), "{:?}", dara_shm_files());
}

/// A blocking FIFO open waits in the model for the other side (reader for a writer, writer for a
/// reader, a writer that only opens and closes still ends a reader's wait) and a signal ends it
/// as Linux's: EINTR without SA_RESTART, restarted with it.
#[test]
fn a_fifo_open_waits_for_the_other_side_and_a_signal_ends_it() {
    twin_clean("fifo_open", 20, "fifo: opens waited for the other side; EINTR without SA_RESTART, restarted with it", Op::FifoOpen);
    assert!(dara_shm_files().is_empty(), "{:?}", dara_shm_files());
}

#[test]
fn a_signal_ends_a_raw_futex_wait_with_eintr_unless_sa_restart_restarts_it() {
    twin_clean("sig_futex_wait", 20, "futex wait: restarted with SA_RESTART, EINTR without it, EINTR when timed", Op::FutexWait);
    assert!(dara_shm_files().is_empty(), "{:?}", dara_shm_files());
}

/// A recording of the daemon listening for control connections and sleeping in 60 s naps (a
/// recording of a server keeps pace with real time while it idles: the first nap lasts 60 real
/// seconds) ends at one Ctrl-C during its first nap: dara passes it on, the nap fails with EINTR
/// (the daemon exits 1 if it ended any other way), and the recording replays.
#[test]
fn one_ctrl_c_ends_a_recorded_sleeping_daemon() {
    let program = private_copy(&fixture("sig_sleep_daemon"), "sig_sleep_daemon-recorded");
    let out = out_dir("sig_sleep_daemon-recorded");
    let port = free_ports(1).to_string();
    let (mut daemon, mut said, line) = recording_that_said(&["-q", "-o", out.to_str().unwrap(), "--", program.to_str().unwrap(), "forever", &port], std::process::Stdio::null());
    assert_eq!(line, "daemon: sleeping\n", "the daemon reached its first nap");
    let (status, stderr) = common::real::ctrl_c(&mut daemon, Duration::from_secs(50));
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut said, &mut rest).unwrap();
    assert_eq!(status.code(), Some(0), "one Ctrl-C ends the nap and the daemon: {status:?} {rest} {stderr}");
    assert!(rest.contains("daemon stopped by SIGINT after 1 nap, nanosleep: EINTR"), "{rest}");
    let trace = out.join("trace.bin");
    assert_eq!(interrupts(&trace, Op::Sleep), 1, "the Ctrl-C ended the nap");
    let verify = dara_replay(&["--verify", trace.to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(verify.code, 0, "{}", verify.text());
    assert!(verify.stdout.contains("daemon stopped by SIGINT after 1 nap"), "{}", verify.text());
    assert_no_survivors(&program);
    assert!(dara_shm_files().is_empty(), "{:?}", dara_shm_files());
}

/// A SIGKILL the program sends itself through `tgkill` (glibc's `raise`, or a thread's raw
/// system call to the main thread) is the program's own death, not a kill from outside: a bug
/// found, replayed, and found again with the same decisions by the same seed.
#[test]
fn a_program_that_raises_sigkill_is_killed_by_its_own_sigkill() {
    let program = private_copy(&fixture("sig_raise_kill"), "sig_raise_kill");
    for mode in ["raise", "thread"] {
        let mut traces = Vec::new();
        for attempt in ["", "-again"] {
            let out = out_dir(&format!("sig_raise_kill-{mode}{attempt}"));
            let run = dara_trace(&["-q", "-o", out.to_str().unwrap(), "--runs", "3", "--", program.to_str().unwrap(), mode], Duration::from_secs(120));
            assert_eq!(run.code, 1, "{mode}: {}", run.text());
            assert!(run.stderr.contains("BUG: process 0 killed by SIGKILL"), "{mode}: {}", run.text());
            assert!(!run.text().contains("killed from outside"), "{mode}: {}", run.text());
            traces.push(out.join("bug-0001/trace.bin"));
        }
        replays(&traces[0], "killed by SIGKILL");
        same_decisions(&traces[0], &traces[1]);
    }
    assert_no_survivors(&program);
    assert!(dara_shm_files().is_empty(), "{:?}", dara_shm_files());
}

#[test]
fn a_signal_ends_a_blocking_send_with_eintr() {
    twin_clean("sig_send_block", 20, "send: EINTR after the handler ran", Op::NetSend);
    assert!(dara_shm_files().is_empty(), "{:?}", dara_shm_files());
}

/// A recording of a program that does not catch SIGINT (coreutils' `cat`), stopped by one
/// Ctrl-C: dara passes it on and the program dies of it, as at a terminal. The user stopped it;
/// that is no bug: dara exits 0 and says so, the trace's outcome says so, and the replay ends
/// the same way (it sends the recorded signal at the same step).
#[test]
fn a_ctrl_c_that_ends_a_recorded_program_is_no_bug() {
    let out = out_dir("cat-recorded");
    // The line says the program runs; cat then waits for dara-trace's stdin (input from
    // outside, which this test keeps open and never writes).
    let (mut run, mut said, line) = recording_that_said(&["-o", out.to_str().unwrap(), "--", "sh", "-c", "echo waiting; exec cat"], std::process::Stdio::piped());
    assert_eq!(line, "waiting\n");
    let stdin = run.stdin.take();
    let (status, stderr) = common::real::ctrl_c(&mut run, Duration::from_secs(60));
    drop(stdin);
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut said, &mut rest).unwrap();
    assert_eq!(status.code(), Some(0), "{status:?} {rest} {stderr}");
    assert!(stderr.contains("stopped by SIGINT, passed on from dara-trace") && stderr.contains("no bug found"), "{rest} {stderr}");
    let trace_path = out.join("trace.bin");
    let recorded = trace::read_file(&trace_path).unwrap();
    assert!(matches!(recorded.outcome, dara_scheduler::Outcome::StoppedBySignal { process: 0, signal: libc::SIGINT, .. }), "{:?}", recorded.outcome);
    assert!(!out.join("bug-0001").exists(), "nothing saved as a bug");
    let verify = dara_replay(&["--verify", trace_path.to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(verify.code, 0, "{}", verify.text());
    assert!(verify.stdout.contains("stopped by SIGINT") && verify.stdout.contains("(same as recorded)"), "{}", verify.text());
    assert!(dara_shm_files().is_empty(), "{:?}", dara_shm_files());
}

/// A recorded program that catches the stop signal and exits with a status of its own (as rsync
/// exits 20 and varnishd 64), stopped once by a Ctrl-C to dara-trace and once by a SIGTERM sent
/// straight to it: its answer to being stopped, no bug (before, "BUG: exited with status 20" and
/// dara-trace's exit 1). The replay ends the same way.
#[test]
fn a_program_that_answers_a_stop_with_its_own_exit_status_is_no_bug() {
    let script = "trap 'echo stopping; exit 20' INT TERM; echo waiting; read line";
    for (how, sig) in [("ctrl-c", libc::SIGINT), ("sigterm-straight", libc::SIGTERM)] {
        let out = out_dir(&format!("stop-exit-{how}"));
        let (mut run, mut said, line) = recording_that_said(&["-o", out.to_str().unwrap(), "--", "bash", "-c", script], std::process::Stdio::piped());
        assert_eq!(line, "waiting\n", "{how}");
        let stdin = run.stdin.take();
        let (status, stderr) = if sig == libc::SIGINT {
            common::real::ctrl_c(&mut run, Duration::from_secs(60))
        } else {
            let bash = processes_with(&["bash", "-c", script]).into_iter().filter(|p| std::fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default().trim() == "bash").collect::<Vec<_>>();
            assert_eq!(bash.len(), 1, "{how}: {bash:?}");
            // SAFETY: signalling the bash this test started (through dara-trace).
            unsafe { libc::kill(bash[0] as i32, libc::SIGTERM) };
            let status = wait_at_most(&mut run, Duration::from_secs(60)).expect("dara-trace ends with the program");
            let mut stderr = String::new();
            std::io::Read::read_to_string(run.stderr.as_mut().unwrap(), &mut stderr).unwrap();
            (status, stderr)
        };
        drop(stdin);
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut said, &mut rest).unwrap();
        assert_eq!(status.code(), Some(0), "{how}: {status:?} {rest} {stderr}");
        assert!(rest.contains("stopping") && stderr.contains("exited with status 20 after the") && stderr.contains("no bug found"), "{how}: {rest} {stderr}");
        let trace_path = out.join("trace.bin");
        let recorded = trace::read_file(&trace_path).unwrap();
        assert!(matches!(recorded.outcome, dara_scheduler::Outcome::ExitedAfterStop { code: 20, signal, .. } if signal == sig), "{how}: {:?}", recorded.outcome);
        assert!(!out.join("bug-0001").exists(), "{how}: nothing saved as a bug");
        let verify = dara_replay(&["--verify", trace_path.to_str().unwrap()], Duration::from_secs(60));
        assert_eq!(verify.code, 0, "{how}: {}", verify.text());
        assert!(verify.stdout.contains("exited with status 20 after the") && verify.stdout.contains("(same as recorded)"), "{how}: {}", verify.text());
    }
    assert!(dara_shm_files().is_empty(), "{:?}", dara_shm_files());
}

/// A SIGTERM sent from outside to a recorded program while it computes, not parked in dara, is
/// held back to its next scheduling point and recorded there: the program's exit with its own
/// status is its answer to the stop, no bug, and the replay, which sends the signal at that step,
/// verifies. Sent three times at different moments of the computation. Before, the handler ran
/// unseen: "BUG: exited with status 20", and a replay without the signal never stopped.
#[test]
fn a_signal_from_outside_to_a_computing_program_is_recorded_at_its_next_step() {
    let program = private_copy(&fixture("sig_busy_stop"), "sig_busy_stop");
    for (round, wait_ms) in [(0, 150u64), (1, 400), (2, 900)] {
        let out = out_dir(&format!("busy-stop-{round}"));
        let (mut run, mut said, line) = recording_that_said(&["-o", out.to_str().unwrap(), "--", program.to_str().unwrap()], std::process::Stdio::null());
        assert_eq!(line, "computing\n", "{round}");
        std::thread::sleep(Duration::from_millis(wait_ms));
        let pids = processes_with(&[program.to_str().unwrap()]).into_iter().filter(|p| std::fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default().trim() == "sig_busy_stop").collect::<Vec<_>>();
        assert_eq!(pids.len(), 1, "{round}: {pids:?}");
        // SAFETY: signalling the program this test started (through dara-trace).
        unsafe { libc::kill(pids[0] as i32, libc::SIGTERM) };
        let status = wait_at_most(&mut run, Duration::from_secs(60)).expect("dara-trace ends with the program");
        let mut stderr = String::new();
        std::io::Read::read_to_string(run.stderr.as_mut().unwrap(), &mut stderr).unwrap();
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut said, &mut rest).unwrap();
        assert_eq!(status.code(), Some(0), "{round}: {rest} {stderr}");
        assert!(rest.contains("stopping") && stderr.contains("exited with status 20 after the SIGTERM from outside"), "{round}: {rest} {stderr}");
        let trace_path = out.join("trace.bin");
        let verify = dara_replay(&["-q", "--verify", trace_path.to_str().unwrap()], Duration::from_secs(120));
        assert_eq!(verify.code, 0, "{round}: {}", verify.text());
        assert!(verify.stdout.contains("verify: 2 more executions identical"), "{round}: {}", verify.text());
    }
    assert_no_survivors(&program);
    assert!(dara_shm_files().is_empty(), "{:?}", dara_shm_files());
}

/// A recorded program that sleeps a microsecond at a time gets SIGUSR1 from outside every
/// millisecond until it has counted 60. A signal that reaches it parked in its sleep after dara
/// last looked is let through after the sleep's timeout is granted; one dara saw pending ends the
/// sleep. The recording tells the two apart and the replay sends each where it came, so
/// `--verify` holds. Before, every such signal was sent before its step's decision, which then
/// offered an interrupt where the recording had granted the timeout: "DIVERGED at step 4170".
#[test]
fn signals_from_outside_reaching_a_thread_in_its_timed_waits_replay_where_they_came() {
    let program = private_copy(&fixture("sig_timed_waits"), "sig_timed_waits");
    let out = out_dir("sig-timed-waits");
    let (mut run, mut said, line) = recording_that_said(&["-o", out.to_str().unwrap(), "--", program.to_str().unwrap()], std::process::Stdio::null());
    assert_eq!(line, "sleeping\n");
    let pids = processes_with(&[program.to_str().unwrap()]).into_iter().filter(|p| std::fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default().trim() == "sig_timed_waits").collect::<Vec<_>>();
    assert_eq!(pids.len(), 1, "{pids:?}");
    let started = std::time::Instant::now();
    // SAFETY: signalling the program this test started (through dara-trace), while it lives.
    while unsafe { libc::kill(pids[0] as i32, libc::SIGUSR1) } == 0 && started.elapsed() < Duration::from_secs(120) {
        std::thread::sleep(Duration::from_millis(1));
    }
    let status = wait_at_most(&mut run, Duration::from_secs(60)).expect("dara-trace ends with the program");
    let mut stderr = String::new();
    std::io::Read::read_to_string(run.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut said, &mut rest).unwrap();
    assert_eq!(status.code(), Some(0), "{rest} {stderr}");
    assert!(rest.contains("counted 60 signals in"), "{rest} {stderr}");
    let trace_path = out.join("trace.bin");
    let recorded = trace::read_file(&trace_path).unwrap();
    let to_thread = recorded.outside.iter().filter(|e| e.stream != 0 && e.what.signal() == Some(libc::SIGUSR1)).count();
    assert!(to_thread >= 60, "every SIGUSR1 the program counted is recorded with a grant: {to_thread}");
    let verify = dara_replay(&["--verify", trace_path.to_str().unwrap()], Duration::from_secs(180));
    assert_eq!(verify.code, 0, "{}", verify.text());
    assert!(verify.stdout.contains(rest.lines().last().unwrap()) && verify.stdout.contains("verify: 2 more executions identical"), "{rest}\n{}", verify.text());
    assert_no_survivors(&program);
    assert!(dara_shm_files().is_empty(), "{:?}", dara_shm_files());
}

/// A program that catches SIGINT and SIGCHLD and blocks SIGUSR1 execs another (itself, and a
/// static build of itself that dara's ptrace agent runs): the new image starts with SIGUSR1
/// blocked and nothing else, as with the kernel alone, in every execution; replay verifies.
#[test]
fn an_exec_keeps_the_program_s_signal_mask_and_no_more() {
    let program = private_copy(&fixture("sig_exec_mask"), "sig_exec_mask");
    let static_build = private_copy(&fixture_with("sig_exec_mask", &["-static"]), "sig_exec_mask-static");
    for (name, image) in [("dynamic", &program), ("static", &static_build)] {
        let out = out_dir(&format!("sig_exec_mask-{name}"));
        let run = dara_trace(&["-q", "-o", out.to_str().unwrap(), "--runs", "3", "--epoch", SEARCH_EPOCH, "--", program.to_str().unwrap(), image.to_str().unwrap()], Duration::from_secs(120));
        assert_eq!(run.code, 0, "{name}: {}", run.text());
        assert_eq!(run.stdout.matches("the exec kept the mask (SIGUSR1 blocked)").count(), 3, "{name}: {}", run.text());
        let verify = dara_replay(&["--verify", out.join("trace.bin").to_str().unwrap()], Duration::from_secs(60));
        assert_eq!(verify.code, 0, "{name}: {}", verify.text());
    }
    assert_no_survivors(&program);
    assert!(dara_shm_files().is_empty(), "{:?}", dara_shm_files());
}

/// A recorded daemon that ignores SIGINT and waits in `sigwait` for SIGTERM: the recording waits
/// for someone outside to send it (before: "deadlock: ... sigwait for a signal ... that nothing
/// left can send" at once), a Ctrl-C to dara-trace says the program ignores it and names its pid,
/// and a SIGTERM sent to that pid ends it, recorded and replayed at the same step.
#[test]
fn a_recorded_daemon_that_ignores_ctrl_c_waits_for_its_sigterm_from_outside() {
    let program = private_copy(&fixture("sig_ignores_int"), "sig_ignores_int");
    let out = out_dir("sig-ignores-int");
    let (mut run, mut said, line) = recording_that_said(&["-o", out.to_str().unwrap(), "--", program.to_str().unwrap()], std::process::Stdio::null());
    assert_eq!(line, "ready\n");
    // SAFETY: kill with the pid of the dara-trace this test started.
    assert_eq!(unsafe { libc::kill(run.id() as i32, libc::SIGINT) }, 0);
    let mut stderr = std::io::BufReader::new(run.stderr.take().unwrap());
    let mut told = String::new();
    while !told.contains("ignores it") {
        told.clear();
        assert!(std::io::BufRead::read_line(&mut stderr, &mut told).unwrap() > 0, "dara-trace ended without saying the program ignores SIGINT");
    }
    let pid: i32 = told.split("(kill ").nth(1).and_then(|t| t.split(')').next()).and_then(|p| p.parse().ok()).unwrap_or_else(|| panic!("no pid named: {told}"));
    // SAFETY: kill with the pid dara named, the program's.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0, "{told}");
    let status = wait_at_most(&mut run, Duration::from_secs(60)).expect("dara-trace did not end after the SIGTERM");
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut said, &mut rest).unwrap();
    assert_eq!(status.code(), Some(0), "{rest}");
    assert_eq!(rest, "terminated\n");
    let trace_path = out.join("trace.bin");
    let verify = dara_replay(&["--verify", trace_path.to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(verify.code, 0, "{}", verify.text());
    assert!(verify.stdout.contains("terminated") && verify.stdout.contains("(same as recorded)"), "{}", verify.text());
    assert_no_survivors(&program);
}

/// The four lines `signalfd_wait` prints when every round got its SIGUSR1 and its child's SIGCHLD.
const SIGNALFD_ROUNDS: &str = "poll: SIGUSR1 from the child, SIGCHLD status 3\nepoll: SIGUSR1 from this process, SIGCHLD status 4\nread: SIGUSR1 from this process, SIGCHLD status 5\nall rounds done\n";

/// A signalfd (systemd's sd-event, qemu, libvirt) waited on in `poll`, in `epoll_wait` next to a
/// quiet pipe, and in a blocking `read`, for a child's SIGCHLD and a SIGUSR1 from a child's
/// `kill`, a thread's `kill` and `raise`: readable exactly when a signal of its mask is pending
/// for the reader. A 20-execution search is clean (before: the poll timed out, "BUG: exited with
/// status 1"), no wait ended by its 5 s timeout, the last execution replays with `--verify`, and
/// the same seed gives the same decisions.
#[test]
fn a_signalfd_wakes_poll_epoll_and_a_blocking_read_when_its_signals_are_pending() {
    let program = private_copy(&fixture("signalfd_wait"), "signalfd_wait");
    let out = out_dir("signalfd_wait");
    let run = search(&out, "random", 1, 20, &program);
    assert_eq!(run.code, 0, "{}", run.text());
    assert!(run.stderr.contains("no bug found in 20 executions"), "{}", run.text());
    let last = out.join("trace.bin");
    let t = trace::read_file(&last).unwrap();
    let waits = |op: Op| t.steps.iter().filter(|s| s.choice.op == op).count();
    assert!(waits(Op::NetPoll) >= 1 && waits(Op::NetEpollWait) >= 1, "the program waited in poll and epoll_wait");
    assert!(waits(Op::SigWait) >= 6, "every read of the signalfd is a sigwait-like scheduling point");
    assert!(t.steps.iter().all(|s| s.choice.kind != ChoiceKind::Timeout || !matches!(s.choice.op, Op::NetPoll | Op::NetEpollWait)), "no poll or epoll_wait timed out");
    let verify = dara_replay(&["--verify", last.to_str().unwrap()], Duration::from_secs(120));
    assert_eq!(verify.code, 0, "{}", verify.text());
    assert!(verify.stdout.contains("verify: 2 more executions identical"), "{}", verify.text());
    assert!(verify.stdout.contains(SIGNALFD_ROUNDS), "{}", verify.text());
    let again = out_dir("signalfd_wait-again");
    let run = search(&again, "random", 1, 20, &program);
    assert_eq!(run.code, 0, "{}", run.text());
    same_decisions(&last, &again.join("trace.bin"));
    assert_no_survivors(&program);
    assert!(dara_shm_files().is_empty(), "{:?}", dara_shm_files());
}

/// A recorded daemon waiting in `epoll_wait` (no timeout) on a signalfd for SIGINT/SIGTERM is
/// stopped by one Ctrl-C to dara-trace, passed on: the signalfd becomes readable, the daemon
/// reads the signal and exits 0; the recording replays with `--verify` (the signal is sent again
/// at the same step). Before, the recording never saw the signalfd readable (dara looked at its own
/// signals).
#[test]
fn a_ctrl_c_reaches_a_recorded_daemon_through_its_signalfd() {
    let program = private_copy(&fixture("signalfd_wait"), "signalfd_wait-recorded");
    let out = out_dir("signalfd_wait-recorded");
    let (mut daemon, mut said, line) = recording_that_said(&["-q", "-o", out.to_str().unwrap(), "--", program.to_str().unwrap(), "daemon"], std::process::Stdio::null());
    assert!(line.starts_with("poll: "), "{line}");
    let mut rest = line;
    loop {
        let mut l = String::new();
        assert!(std::io::BufRead::read_line(&mut said, &mut l).unwrap() > 0, "the daemon ended early: {rest}");
        rest.push_str(&l);
        if l.starts_with("daemon: waiting") {
            break;
        }
    }
    let (status, stderr) = common::real::ctrl_c(&mut daemon, Duration::from_secs(50));
    std::io::Read::read_to_string(&mut said, &mut rest).unwrap();
    assert_eq!(status.code(), Some(0), "one Ctrl-C ends the daemon: {status:?} {rest} {stderr}");
    assert!(rest.contains("daemon stopped by SIGINT"), "{rest}");
    let trace_path = out.join("trace.bin");
    let verify = dara_replay(&["--verify", trace_path.to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(verify.code, 0, "{}", verify.text());
    assert!(verify.stdout.contains("daemon stopped by SIGINT"), "{}", verify.text());
    assert_no_survivors(&program);
    assert!(dara_shm_files().is_empty(), "{:?}", dara_shm_files());
}
