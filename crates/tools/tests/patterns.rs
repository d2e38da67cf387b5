//! Process patterns of real programs (issue 14): a thread whose destructors take a lock after its
//! start routine returned, a fault handler that blocks every signal and makes system calls (the
//! JVM's), a parent told of its children's ends only inside a masked wait (GNU make's
//! jobserver: pselect, ppoll, epoll_pwait), a semaphore several processes share (Python's
//! multiprocessing), a mutex, condition variables, a barrier, a rwlock and a raw futex several
//! processes share, a target killed from outside, and a parent that reads its children's
//! pipe through stdio (`openssl speed -multi`), descriptor numbers that change what they name
//! (dup2, F_DUPFD, close_range), a non-blocking stdout that waits in `poll` for room (xz), and
//! threads that use a pipe after the main thread ended with `pthread_exit`. The buggy fixtures and their twins are also in
//! fixtures.rs (found, replayed 20/20, same seed same decisions, twins clean over 300 runs).
mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use dara_scheduler::trace;

const FROM_OUTSIDE: &str = "killed from outside (SIGKILL not sent by the program or dara): not a bug of the program; the run is not saved as a bug";

/// Operation names of `thread`'s steps in the trace at `path`, in order.
fn ops_of(path: &Path, thread: u32) -> Vec<String> {
    let t = trace::read_file(path).unwrap();
    t.steps.iter().filter(|s| s.choice.thread == thread).map(|s| s.choice.op.name().to_string()).collect()
}

/// The clean last execution at `out` replays with `--verify`.
fn verifies_clean(out: &Path) {
    let last = out.join("trace.bin");
    let verify = dara_replay(&["-q", "--verify", last.to_str().unwrap()], Duration::from_secs(120));
    assert_eq!(verify.code, 0, "{}", verify.text());
    assert!(verify.stdout.contains("verify: 2 more executions identical"), "{}", verify.text());
}

#[test]
fn a_threads_destructors_run_under_control_and_never_hang() {
    let program = private_copy(&fixture("tsd_destructor_lock_ok"), "tsd-destructors");
    let out = out_dir("tsd-destructors");
    // Before, a destructor blocked on the real futex of the lock main held while parked.
    let run = search(&out, "random", 5, 50, &program);
    assert_eq!(run.code, 0, "{}", run.text());
    assert!(run.stderr.contains("no bug found in 50 executions"), "{}", run.text());
    assert_eq!(run.stdout.matches("log holds 4 records").count(), 50, "{}", run.text());
    // Each worker's two destructors (pthread_key, thread_local) lock the log and sleep under
    // control before the worker's exit is posted: the teardown is part of the schedule.
    for worker in [1, 2] {
        let ops = ops_of(&out.join("trace.bin"), worker);
        assert_eq!(ops.last().map(String::as_str), Some("thread-exit"), "{ops:?}");
        assert_eq!(ops.iter().filter(|o| *o == "sleep").count(), 2, "worker {worker}: {ops:?}");
    }
    verifies_clean(&out);
    let again = out_dir("tsd-destructors-again");
    assert_eq!(search(&again, "random", 5, 50, &program).code, 0);
    same_decisions(&out.join("trace.bin"), &again.join("trace.bin"));
    assert_no_survivors(&program);
}

/// Searches `program args` twice with 20 random executions of `seed`: each prints `answer`, none
/// is a bug, the last one replays with `--verify`, and both searches decide alike. Returns the
/// first search's last trace.
fn searches_clean_and_alike(test: &str, program: &Path, args: &[&str], seed: u64, answer: &str) -> std::path::PathBuf {
    const RUNS: usize = 20;
    let search_once = |out: &Path| {
        let (seed, runs) = (seed.to_string(), RUNS.to_string());
        let mut options = vec!["-q", "-o", out.to_str().unwrap(), "--strategy", "random", "--seed", &seed, "--runs", &runs, "--", program.to_str().unwrap()];
        options.extend_from_slice(args);
        dara_trace(&options, Duration::from_secs(300))
    };
    let out = out_dir(test);
    let run = search_once(&out);
    assert_eq!(run.code, 0, "{test}: {}", run.text());
    assert!(run.stderr.contains(&format!("no bug found in {RUNS} executions")), "{test}: {}", run.text());
    assert_eq!(run.stdout.matches(answer).count(), RUNS, "{test}: {}", run.text());
    verifies_clean(&out);
    let again = out_dir(&format!("{test}-again"));
    assert_eq!(search_once(&again).code, 0, "{test}");
    same_decisions(&out.join("trace.bin"), &again.join("trace.bin"));
    out.join("trace.bin")
}

#[test]
fn a_fault_handler_that_blocks_every_signal_runs_its_system_calls_under_control() {
    // HotSpot's pattern: a SIGSEGV handler whose mask is every signal makes system calls.
    let program = private_copy(&fixture("fault_handler_mask"), "fault-handler-mask");
    searches_clean_and_alike("fault-handler-mask", &program, &[], 2, "recovered 6 faults");
    assert_no_survivors(&program);
}

#[test]
fn a_wait_under_its_own_signal_mask_is_ended_by_the_signals_it_lets_through() {
    // GNU make's jobserver pattern: SIGCHLD blocked but in pselect's (ppoll's, epoll_pwait's) mask.
    let program = private_copy(&fixture("masked_wait_sigchld"), "masked-wait");
    for call in ["pselect", "ppoll", "epoll_pwait"] {
        searches_clean_and_alike(&format!("masked-wait-{call}"), &program, &[call], 3, "reaped 3 children after");
    }
    assert_no_survivors(&program);
}

#[test]
fn a_write_larger_than_a_pipes_room_waits_for_the_reader() {
    // git clone --no-local's pattern: upload-pack writes its pack into the pipe its parent reads,
    // 64 KiB at a time; the hooked write, writev and libc's own write (stdio on descriptor 1), and
    // libc's own 4 KiB writes into a pipe that is already full (`head -c 1M /dev/zero | wc -c`),
    // and the same with the reader waiting on the empty pipe first.
    let program = private_copy(&fixture("pipe_big_write"), "pipe-big-write");
    for how in ["write", "writev", "stdio", "stdio-full", "stdio-chunks"] {
        searches_clean_and_alike(&format!("pipe-big-write-{how}"), &program, &[how], 4, &format!("{how}: 262144 bytes through the pipe"));
    }
    assert_no_survivors(&program);
}

#[test]
fn a_non_blocking_stdout_that_waits_in_poll_for_room_is_always_writable() {
    // xz -T4 -c's pattern: stdout made O_NONBLOCK, a write that gets EAGAIN polls for POLLOUT.
    // Before, a search stopped with a false deadlock (the poll seen not ready while dara's
    // forwarder had not drained the pipe yet) and one seed scheduled differently run to run.
    // Dynamic (the preload), the same through stderr, and static (the ptrace agent).
    let dynamic = private_copy(&fixture("nonblocking_stdout"), "nonblocking-stdout");
    let stat = private_copy(&fixture_with("nonblocking_stdout", &["-static"]), "nonblocking-stdout-static");
    for (test, program, args, answer) in [
        ("nonblocking-stdout", &dynamic, &[][..], "nonblocking stdout: wrote 1200000 bytes"),
        ("nonblocking-stderr", &dynamic, &["stderr"][..], "nonblocking stderr: wrote 1200000 bytes"),
        ("nonblocking-stdout-static", &stat, &[][..], "nonblocking stdout: wrote 1200000 bytes"),
    ] {
        searches_clean_and_alike(test, program, args, 4, answer);
    }
    assert_no_survivors(&dynamic);
    assert_no_survivors(&stat);
}

#[test]
fn an_exec_that_closes_a_pipes_last_writer_ends_the_readers_wait() {
    // git's start_command: end-of-file on a close-on-exec pipe says the child's exec succeeded.
    let program = private_copy(&fixture("exec_notify_pipe"), "exec-notify");
    searches_clean_and_alike("exec-notify", &program, &[], 5, "exec seen, child answered: through cat");
    assert_no_survivors(&program);
}

#[test]
fn listeners_of_both_families_on_one_port_each_get_their_own_connections() {
    // mosquitto's pattern: 127.0.0.1:P and [::1]:P (IPV6_V6ONLY) in one epoll set.
    let program = private_copy(&fixture("dual_family_listeners"), "dual-family");
    searches_clean_and_alike("dual-family", &program, &[], 6, "served 4 clients over both families");
    assert_no_survivors(&program);
}

#[test]
fn a_semaphore_shared_between_processes_is_one_semaphore() {
    // Named (sem_open, inherited over fork and opened again after an exec) and unnamed in a
    // shared mapping: the children's posts are the parent's semaphore's.
    let program = private_copy(&fixture("shared_sem_fork"), "shared-sem");
    searches_clean_and_alike("shared-sem", &program, &[], 1, "parent saw 3 named and 2 unnamed posts");
    assert_no_survivors(&program);
}

#[test]
fn threads_go_on_through_a_pipe_after_the_main_thread_ended() {
    // The main thread's `pthread_exit` takes the descriptor table and the address space out of
    // the process's pid (pidfd_getfd, /proc/<pid>/fd, process_vm_readv) while the other threads
    // still use them. Before, through the preload, the pipe was taken for closed: the recording
    // stopped with the reader "uncontrolled" in read(3, ...) (3 of 3 runs) and a replay that got
    // further diverged at `send ?<->?`; through the ptrace agent (static), the run hung for good
    // (the main thread's end is reported to waitpid only when the last thread ends) and, past
    // that, a send's bytes read as zeros.
    let dynamic = private_copy(&fixture("leader_gone_pipes"), "leader-gone");
    let stat = private_copy(&fixture_with("leader_gone_pipes", &["-static"]), "leader-gone-static");
    for (linked, program) in [("dynamic", &dynamic), ("static", &stat)] {
        for (how, args) in [("epoll", &[][..]), ("read", &["read"][..])] {
            records_and_replays(&format!("leader-gone-record-{linked}-{how}"), program, args, "reader got 40 bytes");
            searches_clean_and_alike(&format!("leader-gone-{linked}-{how}"), program, args, 7, "reader got 40 bytes");
        }
    }
    assert_no_survivors(&dynamic);
    assert_no_survivors(&stat);
}

/// The last execution's trace of the search `searches_clean_and_alike` ran as `test`.
/// Records `program args` as a user would (one run, coarse steps): it prints `answer`, and the trace
/// replays with `--verify`.
fn records_and_replays(test: &str, program: &Path, args: &[&str], answer: &str) {
    let out = out_dir(test);
    let mut options = vec!["-q", "-o", out.to_str().unwrap(), "--", program.to_str().unwrap()];
    options.extend_from_slice(args);
    let run = dara_trace(&options, Duration::from_secs(120));
    assert_eq!(run.code, 0, "{test}: {}", run.text());
    assert!(run.stdout.contains(answer), "{test}: {}", run.text());
    verifies_clean(&out);
}

#[test]
fn a_queue_of_processes_on_a_shared_mutex_and_condvars_is_one_queue() {
    // Before, keyed per process: a consumer took "its own" free mutex while the producer held
    // the real one and blocked in the kernel ("uncontrolled"). The buggy twin is in fixtures.rs.
    let program = private_copy(&fixture("pshared_queue_ok"), "pshared-queue");
    const ANSWER: &str = "pshared_queue: consumed 6 items, sum 21";
    let last = searches_clean_and_alike("pshared-queue", &program, &[], 4, ANSWER);
    records_and_replays("pshared-queue-record", &program, &[], ANSWER);
    // Each process has one thread: the producer and both consumers locked the one mutex.
    let t = trace::read_file(&last).unwrap();
    let lockers: std::collections::BTreeSet<u32> =
        t.steps.iter().filter(|s| s.choice.op == dara_abi::Op::MutexLock).map(|s| s.choice.thread).collect();
    assert_eq!(lockers.len(), 3, "{lockers:?}");
    assert_no_survivors(&program);
}

#[test]
fn a_raw_futex_barrier_and_rwlock_shared_across_fork_are_one_each() {
    // Before: the barrier never gathered (each process had its own) and, past it, the children's
    // FUTEX_WAKEs woke nobody: a false deadlock.
    let program = private_copy(&fixture("pshared_futex"), "pshared-futex");
    const ANSWER: &str = "pshared_futex: parent saw 3 children";
    let last = searches_clean_and_alike("pshared-futex", &program, &[], 5, ANSWER);
    records_and_replays("pshared-futex-record", &program, &[], ANSWER);
    let t = trace::read_file(&last).unwrap();
    assert!(t.steps.iter().any(|s| s.choice.op == dara_abi::Op::FutexWake), "the children woke the futex under control");
    assert_no_survivors(&program);
}

/// Waits (at most a minute) until a process runs `program` (its first argument; dara-trace and
/// the shell mention it too) with at least `threads` threads; its pid.
fn wait_for_process(program: &Path, threads: usize) -> u32 {
    let argv0 = program.as_os_str().as_encoded_bytes();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let found = std::fs::read_dir("/proc").unwrap().flatten().filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok()).find(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |d| d.count());
            cmdline.split(|&b| b == 0).next() == Some(argv0) && tasks >= threads
        });
        if let Some(pid) = found {
            return pid;
        }
        assert!(Instant::now() < deadline, "{} never started", program.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_target_killed_from_outside_is_not_saved_as_a_bug() {
    // A child of the launched shell computes (well within --busy-limit) until the harness kills it.
    let program = private_copy(&fixture("busy_loop"), "killed-from-outside");
    let line = format!("{}; echo after", program.display());
    let out = out_dir("killed-from-outside");
    let mut dara = Command::new(env!("CARGO_BIN_EXE_dara-trace"))
        .args(["-q", "-o", out.to_str().unwrap(), "--runs", "5", "--busy-limit", "600", "--", "/bin/sh", "-c", &line])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Its worker thread exists once main's pthread_create was granted: it runs under control.
    let victim = wait_for_process(&program, 2);
    // SAFETY: a signal to the fixture process this test's dara-trace started.
    assert_eq!(unsafe { libc::kill(victim as i32, libc::SIGKILL) }, 0);
    assert!(wait_at_most(&mut dara, Duration::from_secs(60)).is_some(), "dara-trace did not stop after its target was killed");
    let output = dara.wait_with_output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert_eq!(output.status.code(), Some(2), "{stdout}\n{stderr}");
    assert!(stderr.contains(FROM_OUTSIDE), "{stdout}\n{stderr}");
    assert!(!stderr.contains("BUG"), "{stdout}\n{stderr}");
    assert!(!out.join("bug-0001").exists(), "a kill from outside was saved as a bug");
    let t = trace::read_file(&out.join("trace.bin")).unwrap();
    assert_eq!(t.outcome.signature(), "killed-from-outside", "{:?}", t.outcome);
    assert!(!t.outcome.is_bug());
    assert_no_survivors(&program);
}

#[test]
fn a_sigkill_the_program_sends_is_its_own() {
    // The launched shell kills itself: the program's bug, found and replayed.
    let out = out_dir("sigkill-self");
    let run = dara_trace(&["-q", "-o", out.to_str().unwrap(), "--runs", "3", "--", "/bin/sh", "-c", "kill -9 $$"], Duration::from_secs(120));
    assert_eq!(run.code, 1, "{}", run.text());
    assert!(run.stderr.contains("BUG: process 0 killed by SIGKILL"), "{}", run.text());
    assert!(!run.text().contains("killed from outside"), "{}", run.text());
    replays(&out.join("bug-0001/trace.bin"), "killed by SIGKILL");

    // A script that kills its own children (kill, and killpg from Python): no bug at all.
    for (tag, command) in [
        ("sigkill-child", vec!["/bin/sh", "-c", "/bin/sleep 5 & kill -9 $!; wait; echo waited"]),
        ("sigkill-group", vec!["/usr/bin/python3", "-c", "import os, subprocess; p = subprocess.Popen(['/bin/sleep', '5'], start_new_session=True); os.killpg(p.pid, 9); print('status', p.wait())"]),
    ] {
        let out = out_dir(tag);
        let mut args = vec!["-q", "-o", out.to_str().unwrap(), "--runs", "3", "--"];
        args.extend(command);
        let run = dara_trace(&args, Duration::from_secs(120));
        assert_eq!(run.code, 0, "{tag}: {}", run.text());
        assert!(run.stderr.contains("no bug found in 3 executions"), "{tag}: {}", run.text());
        verifies_clean(&out);
    }
}

#[test]
fn a_descriptor_number_is_what_it_names_now() {
    // The preload's descriptor table (issue 15): dup2 of a socket over a file and of /dev/null
    // over a socket, fcntl(F_DUPFD, F_DUPFD_CLOEXEC) onto the number of a file closed by a raw
    // close, close_range over sockets whose numbers pipes and /dev/null take next. Before, the
    // last three failed: ENOTSOCK on /dev/null, recv blocked in the kernel on the copy.
    let program = private_copy(&fixture("fd_renumbered"), "fd-renumbered");
    for (how, answer) in [
        ("dup2-over-file", "dup2-over-file: read hello through the file's number"),
        ("file-over-socket", "file-over-socket: /dev/null took both writes"),
        ("dupfd", "dupfd: the copies received first and second"),
        ("close-range", "close-range: pipes and /dev/null on the sockets' numbers"),
    ] {
        searches_clean_and_alike(&format!("fd-renumbered-{how}"), &program, &[how], 7, answer);
        // A recording takes coarse steps: TCP sends and receives without a post.
        records_and_replays(&format!("fd-renumbered-{how}-record"), &program, &[how], answer);
    }
    assert_no_survivors(&program);
}

#[test]
fn openssl_speed_multi_reads_its_children_through_stdio_under_control() {
    // The parent reads each child's results with fdopen + fgets: before, it slept in the kernel
    // in read(3, ...) holding the run token.
    let out = out_dir("openssl-speed-multi");
    let run = dara_trace(&["-o", out.to_str().unwrap(), "--", "openssl", "speed", "-multi", "2", "-seconds", "1", "sha256"], Duration::from_secs(300));
    assert_eq!(run.code, 0, "{}", run.text());
    assert!(!run.text().contains("blocked in the kernel"), "{}", run.text());
    for child in 0..2 {
        let from_child = format!(" from {child}");
        assert!(run.stdout.lines().any(|l| l.starts_with("Got: +F:6:sha256:") && l.ends_with(&from_child)), "child {child}: {}", run.text());
    }
    verifies_clean(&out);
}

#[test]
fn a_blocking_file_lock_waits_under_control_and_an_abba_of_flocks_is_a_deadlock() {
    // flock, fcntl(F_SETLKW), lockf(F_LOCK) between two processes and F_OFD_SETLKW between two
    // threads, each with a nap in its critical section. Before, the waiter slept in the kernel
    // holding the run token: "uncontrolled: ... blocked in the kernel in flock".
    let program = private_copy(&fixture("file_lock"), "file-lock");
    for mode in ["flock", "posix", "lockf", "ofd"] {
        let dir = out_dir(&format!("file-lock-{mode}-files"));
        let answer = format!("file_lock {mode}: counter 10");
        let last = searches_clean_and_alike(&format!("file-lock-{mode}"), &program, &[mode, dir.to_str().unwrap()], 8, &answer);
        let t = trace::read_file(&last).unwrap();
        assert!(t.steps.iter().any(|s| s.choice.op == dara_abi::Op::FileLock), "{mode}: a worker waited for the lock under control");
        records_and_replays(&format!("file-lock-{mode}-record"), &program, &[mode, dir.to_str().unwrap()], &answer);
    }
    // Two processes taking two flock locks in opposite orders: a deadlock that names the locks.
    let dir = out_dir("file-lock-abba-files");
    let out = out_dir("file-lock-abba");
    let run = dara_trace(&["-q", "-o", out.to_str().unwrap(), "--runs", "20", "--seed", "1", "--", program.to_str().unwrap(), "abba", dir.to_str().unwrap()], Duration::from_secs(120));
    assert_eq!(run.code, 1, "{}", run.text());
    assert!(run.stderr.contains("BUG: deadlock") && run.stderr.contains("waits in flock on descriptor"), "{}", run.text());
    replays(&out.join("bug-0001").join("trace.bin"), "waits in flock on descriptor");
    assert_no_survivors(&program);
}

#[test]
fn a_robust_mutex_left_inconsistent_is_not_recoverable_and_a_cond_wait_reports_the_death() {
    // Before, the model freed a robust mutex unlocked without pthread_mutex_consistent as usual
    // (a waiter was granted it and glibc's real lock then failed under the model) and gave a
    // condition wait its mutex back with 0 after the owner died.
    let program = private_copy(&fixture("robust_recovery"), "robust-recovery");
    let answer = "robust: EOWNERDEAD, then ENOTRECOVERABLE for a waiter, a lock and a try-lock; cond_wait: EOWNERDEAD, consistent, 0";
    searches_clean_and_alike("robust-recovery", &program, &[], 3, answer);
    records_and_replays("robust-recovery-record", &program, &[], answer);
    assert_no_survivors(&program);
}

#[test]
fn error_checking_and_recursive_mutexes_answer_misuse_as_glibc() {
    // An error-checking mutex relocked by its owner is EDEADLK, not a deadlock; unlocks by a
    // thread that does not hold a checking mutex are EPERM.
    let program = private_copy(&fixture("errorcheck_misuse"), "errorcheck-misuse");
    let answer = "errorcheck: EDEADLK, EBUSY, EPERM, EPERM; recursive: EPERM, EPERM";
    searches_clean_and_alike("errorcheck-misuse", &program, &[], 5, answer);
    records_and_replays("errorcheck-misuse-record", &program, &[], answer);
    assert_no_survivors(&program);
}

#[test]
fn a_robust_mutex_whose_owner_died_is_taken_with_eownerdead() {
    // A child process (shared mutex) or a thread (private one) ends holding a robust mutex; the
    // next locker gets EOWNERDEAD. Before, the model kept the dead owner holding it: a false
    // deadlock.
    let program = private_copy(&fixture("robust_owner_dies"), "robust-owner-dies");
    for mode in ["process", "thread"] {
        let answer = format!("robust {mode}: EOWNERDEAD, consistent, locked again");
        searches_clean_and_alike(&format!("robust-{mode}"), &program, &[mode], 9, &answer);
        records_and_replays(&format!("robust-{mode}-record"), &program, &[mode], &answer);
    }
    assert_no_survivors(&program);
}

#[test]
fn blocking_waits_through_glibcs_fortified_entry_points_are_hooked() {
    // Debian builds with -D_FORTIFY_SOURCE=2: privoxy waits for clients in __poll_chk, which calls
    // glibc's internal poll past the `poll` hook. Before, each of these waits slept in the kernel
    // with the run token ("uncontrolled: ... blocked in the kernel in poll").
    let program = private_copy(&fixture_with("fortify_waits", &["-O2", "-D_FORTIFY_SOURCE=2"]), "fortify-waits");
    for how in ["poll", "ppoll", "read", "recv", "recvfrom"] {
        searches_clean_and_alike(&format!("fortify-waits-{how}"), &program, &[how], 5, &format!("{how}: woke with the byte"));
    }
    assert_no_survivors(&program);
}

/// Threads started past dara's `pthread_create` hook are traced like any other: one through a
/// `pthread_create` looked up with `dlsym` (jemalloc starts its background thread through
/// `dlsym(RTLD_NEXT, ...)`; the fixture through libc's own handle), one with C11's
/// `thrd_create`. The search finds the lost update the three threads make, the trace holds all
/// three, the replay verifies and the same seed finds it with the same decisions. Before, both
/// threads ran outside dara and the first execution ended as a false "deadlock" (the main
/// thread's join waited on a futex only the untraced thread could wake).
#[test]
fn threads_started_past_the_pthread_create_hook_are_traced() {
    let program = private_copy(&fixture_with("dlsym_thread", &["-ldl"]), "dlsym_thread");
    let mut found = Vec::new();
    for round in 0..2 {
        let out = out_dir(&format!("dlsym-thread-{round}"));
        let run = dara_trace(&["--runs", "50", "--seed", "1", "-o", out.to_str().unwrap(), "--", program.to_str().unwrap()], Duration::from_secs(300));
        assert_eq!(run.code, 1, "{}", run.text());
        assert!(run.stderr.contains("BUG: process 0 killed by SIGABRT") && run.stderr.contains("counter "), "{}", run.text());
        found.push(out.join("bug-0001/trace.bin"));
    }
    let bug = trace::read_file(&found[0]).unwrap();
    let threads: std::collections::BTreeSet<u32> = bug.steps.iter().map(|s| s.choice.thread).collect();
    assert_eq!(threads.len(), 3, "every thread is in the trace: {threads:?}");
    same_decisions(&found[0], &found[1]);
    let verify = dara_replay(&["-q", "--verify", found[0].to_str().unwrap()], Duration::from_secs(120));
    assert_eq!(verify.code, 1, "{}", verify.text());
    assert!(verify.stdout.contains("verify: 2 more executions identical"), "{}", verify.text());
    assert_no_survivors(&program);
}
