//! Launch chains and process patterns of real programs: a library constructor in an image a
//! shell exec'd, launchers that close inherited descriptors (C and Python's subprocess), threads
//! created with PTHREAD_EXPLICIT_SCHED on a loaded machine, a raw clone3, and a process that ends
//! up with SIGSYS blocked. Each runs under control (clean, replayed with `--verify`, the same seed
//! giving the same decisions) or stops with exit 2 and a sentence naming what happened; never a
//! false bug, and no process survives.
mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::*;
use dara_scheduler::trace;

fn search_command(out: &Path, seed: u64, runs: u64, command: &[&str]) -> Run {
    let (seed, runs) = (seed.to_string(), runs.to_string());
    let mut args = vec!["-q", "-o", out.to_str().unwrap(), "--strategy", "random", "--seed", &seed, "--runs", &runs, "--"];
    args.extend_from_slice(command);
    dara_trace(&args, Duration::from_secs(300))
}

/// The last trace of `out` replays with `--verify`, and a second search with the same seed makes
/// the same decisions.
fn replays_and_repeats(out: &Path, seed: u64, runs: u64, command: &[&str]) {
    let last = out.join("trace.bin");
    let verify = dara_replay(&["-q", "--verify", last.to_str().unwrap()], Duration::from_secs(120));
    assert_eq!(verify.code, 0, "{}", verify.text());
    assert!(verify.stdout.contains("verify: 2 more executions identical"), "{}", verify.text());
    let again = out.with_extension("again");
    let _ = std::fs::remove_dir_all(&again);
    assert_eq!(search_command(&again, seed, runs, command).code, 0);
    same_decisions(&last, &again.join("trace.bin"));
}

fn process_starts(out: &Path) -> usize {
    let t = trace::read_file(&out.join("trace.bin")).unwrap();
    t.steps.iter().filter(|s| s.choice.op.name() == "process-start").count()
}

#[test]
fn a_library_constructor_in_an_image_a_shell_started_runs_under_control() {
    let library = private_copy(&fixture_with("launch_ctor_random", &["-shared", "-fPIC", "-DCTOR_LIBRARY"]), "ctor-library");
    let program = private_copy(&fixture_with("launch_ctor_random", &[library.to_str().unwrap()]), "ctor-program");
    let line = format!("{}; true", program.display());
    let command = ["/bin/sh", "-c", line.as_str()];
    let out = out_dir("launch-ctor-random");
    let run = search_command(&out, 4, 10, &command);
    assert_eq!(run.code, 0, "{}", run.text());
    assert!(run.stderr.contains("no bug found in 10 executions"), "{}", run.text());
    assert_eq!(run.stdout.matches("constructor drew ").count(), 10, "{}", run.text());
    assert!(process_starts(&out) >= 3, "the shell, its child and the exec'd program start");
    replays_and_repeats(&out, 4, 10, &command);
    assert_no_survivors(&program);
}

#[test]
fn a_trapped_call_with_sigsys_blocked_names_the_program_and_is_not_a_bug() {
    let program = private_copy(&fixture("trap_blocked"), "trap_blocked");
    let line = format!("{}; true", program.display());
    let out = out_dir("trap-blocked");
    let run = dara_trace(&["-o", out.to_str().unwrap(), "--", "/bin/sh", "-c", &line], Duration::from_secs(60));
    assert_eq!(run.code, 2, "{}", run.text());
    assert!(run.stderr.contains("process 1 (trap_blocked) was killed by the kernel"), "{}", run.text());
    assert!(run.stderr.contains("with SIGSYS blocked"), "{}", run.text());
    assert!(!run.stderr.contains("BUG"), "{}", run.text());
    assert_no_survivors(&program);
}

#[test]
fn launchers_that_close_inherited_descriptors_stay_under_control() {
    let program = private_copy(&fixture("launch_closefrom"), "launch_closefrom");
    let p = program.to_str().unwrap();
    let out = out_dir("launch-closefrom");
    let run = search_command(&out, 2, 10, &[p]);
    assert_eq!(run.code, 0, "{}", run.text());
    assert_eq!(run.stdout.matches("launcher: 3 children ran").count(), 10, "{}", run.text());
    assert!(!run.stderr.contains("cannot map the shared region"), "{}", run.text());
    assert!(process_starts(&out) >= 7, "the launcher, three children and their exec'd images start");
    replays_and_repeats(&out, 2, 10, &[p]);

    let script = format!("import subprocess; r = subprocess.run([{p:?}, 'child', 'python']); print('status', r.returncode)");
    let command = ["/usr/bin/python3", "-c", script.as_str()];
    let out = out_dir("launch-python-subprocess");
    let run = search_command(&out, 1, 2, &command);
    assert_eq!(run.code, 0, "{}", run.text());
    assert_eq!(run.stdout.matches("child python ran").count(), 2, "{}", run.text());
    assert_eq!(run.stdout.matches("status 0").count(), 2, "{}", run.text());
    replays_and_repeats(&out, 1, 2, &command);
    assert_no_survivors(&program);
}

/// A program that sandboxes itself with a seccomp filter (as sshd's pre-authentication child
/// does), by `prctl` and by the `seccomp` system call: refused with EINVAL as on a kernel without
/// seccomp filters, so it goes on without its sandbox under control, clean, and replays. Before,
/// the kernel killed it at its first trapped call and dara blamed a blocked SIGSYS.
#[test]
fn a_program_s_own_seccomp_sandbox_is_refused_and_it_goes_on_under_control() {
    let program = private_copy(&fixture("own_seccomp"), "own_seccomp");
    for how in ["prctl", "syscall"] {
        let out = out_dir(&format!("own-seccomp-{how}"));
        let run = search_command(&out, 1, 3, &[program.to_str().unwrap(), how]);
        assert_eq!(run.code, 0, "{how}: {}", run.text());
        assert_eq!(run.stdout.matches("sandbox refused: Invalid argument").count(), 3, "{how}: {}", run.text());
        let verify = dara_replay(&["--verify", out.join("trace.bin").to_str().unwrap()], Duration::from_secs(60));
        assert_eq!(verify.code, 0, "{how}: {}", verify.text());
    }
    assert_no_survivors(&program);
}

#[test]
fn a_raw_clone3_stops_the_run_with_a_clear_message() {
    let program = private_copy(&fixture("raw_clone3"), "raw_clone3");
    let out = out_dir("raw-clone3");
    let run = dara_trace(&["-o", out.to_str().unwrap(), "--", program.to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(run.code, 2, "{}", run.text());
    assert!(run.stderr.contains("a raw clone3 system call (flags 0x0) would start a process"), "{}", run.text());
    assert!(!run.stderr.contains("BUG"), "{}", run.text());
    assert!(!run.stdout.contains("Function not implemented"), "{}", run.text());
    assert_no_survivors(&program);
}

/// A thread cloned without thread-local storage of its own is refused by name: dara makes every
/// new thread's clone itself and starts it gated, which needs the thread's own TLS.
#[test]
fn a_raw_clone_of_a_thread_without_its_own_tls_stops_the_run_with_a_clear_message() {
    let program = private_copy(&fixture("raw_clone_thread"), "raw_clone_thread");
    let out = out_dir("raw-clone-thread");
    let run = dara_trace(&["-o", out.to_str().unwrap(), "--", program.to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(run.code, 2, "{}", run.text());
    assert!(run.stderr.contains("a raw clone system call (flags 0x50f00) starts a thread without thread-local storage of its own (no CLONE_SETTLS)"), "{}", run.text());
    assert!(!run.stderr.contains("BUG") && !run.stdout.contains("child ran"), "{}", run.text());
    assert_no_survivors(&program);
}

/// A POSIX timer that notifies through glibc's helper thread: the thread is dara's (every thread
/// is), and its wait in `rt_sigtimedwait`, which dara does not model, stops the run as
/// uncontrolled rather than letting the thread and the kernel's timer run unseen.
#[test]
fn a_timer_thread_of_glibc_stops_the_run_as_uncontrolled() {
    let program = private_copy(&fixture_with("timer_thread", &["-lrt"]), "timer_thread");
    let out = out_dir("timer-thread");
    let run = dara_trace(&["-o", out.to_str().unwrap(), "--", program.to_str().unwrap()], Duration::from_secs(120));
    assert_eq!(run.code, 2, "{}", run.text());
    assert!(run.stderr.contains("uncontrolled: thread 1 rt_sigtimedwait"), "{}", run.text());
    assert!(!run.stderr.contains("BUG"), "{}", run.text());
    assert_no_survivors(&program);
}

/// Two busy loops, one per core of the test machine, until dropped.
struct Load(Vec<Child>);

impl Load {
    fn start() -> Load {
        Load((0..2).map(|_| Command::new("/bin/sh").args(["-c", "while :; do :; done"]).stdout(Stdio::null()).spawn().expect("starting a busy loop")).collect())
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[test]
fn threads_created_with_explicit_sched_run_under_load() {
    let program = private_copy(&fixture("thread_explicit_sched"), "thread_explicit_sched");
    let p = program.to_str().unwrap();
    let out = out_dir("thread-explicit-sched");
    let load = Load::start();
    // Before the fix, 8 of 10 executions under this load stopped with the SIGSYS-blocked message.
    let run = search_command(&out, 3, 10, &[p]);
    drop(load);
    assert_eq!(run.code, 0, "{}", run.text());
    assert_eq!(run.stdout.matches("8 workers counted 8000").count(), 10, "{}", run.text());
    replays_and_repeats(&out, 3, 10, &[p]);
    assert_no_survivors(&program);
}
