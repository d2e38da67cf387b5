//! Programs of several processes, as users run them: a program that forks and execs, a bug that
//! crashes a child process, and a bash test script that starts workers in the background, waits
//! for them and checks their result. Each: found (or clean) within a stated number of runs,
//! replayed exactly (20 times, `--verify`), the same seed twice gives the same decisions, and no
//! process survives.
mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use dara_scheduler::trace;

fn script(name: &str) -> PathBuf {
    repo_root().join("tests/fixtures/scripts").join(name)
}

/// The last execution of the search in `out` replays with `--verify`, and the same search
/// (`strategy`, seed, runs) run again into `again` makes the same decisions.
fn verifies_and_repeats(out: &Path, again: &str, (strategy, seed, runs): (&str, u64, u64), command: &[&str]) {
    let last = out.join("trace.bin");
    let verify = dara_replay(&["-q", "--verify", last.to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(verify.code, 0, "{}", verify.text());
    let again = out_dir(again);
    assert_eq!(trace_search(&again, strategy, seed, runs, command).code, 0);
    same_decisions(&last, &again.join("trace.bin"));
}

/// `dara-trace` over `command`, returning the run.
fn trace_search(out: &Path, strategy: &str, seed: u64, runs: u64, command: &[&str]) -> common::Run {
    let (seed, runs) = (seed.to_string(), runs.to_string());
    let mut args = vec!["-q", "-o", out.to_str().unwrap(), "--strategy", strategy, "--seed", &seed, "--runs", &runs, "--epoch", SEARCH_EPOCH, "--"];
    args.extend_from_slice(command);
    dara_trace(&args, Duration::from_secs(300))
}

/// An exec the kernel runs as a secure exec (squid's `pinger`, a program with file capabilities,
/// started after squid dropped to its own user): the dynamic loader ignores `LD_PRELOAD`, so dara's
/// ptrace agent runs the image. Searched clean with its output, the last execution replays, the
/// same seed gives the same decisions. Before, the image died of SIGSYS at its first trapped call.
#[test]
fn an_exec_the_kernel_makes_secure_runs_under_the_agent() {
    let program = private_copy(&fixture("exec_secure"), "exec_secure");
    let marked = out_dir("exec-secure-image").join("exec_secure_capable");
    std::fs::copy(&program, &marked).unwrap();
    // Readable and runnable by nobody, like the directories above it.
    std::fs::set_permissions(&marked, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let setcap = ["/usr/sbin/setcap", "/sbin/setcap"].into_iter().find(|p| Path::new(p).exists()).expect("setcap (run ./scripts/install-deps.sh)");
    let marking = std::process::Command::new(setcap).args(["cap_net_raw=ep", marked.to_str().unwrap()]).output().unwrap();
    assert!(marking.status.success(), "setcap: {}", String::from_utf8_lossy(&marking.stderr));
    let (p, m) = (program.to_str().unwrap(), marked.to_str().unwrap());
    let out = out_dir("exec-secure");
    let run = trace_search(&out, "random", 1, 5, &[p, m]);
    assert_eq!(run.code, 0, "{}", run.text());
    assert_eq!(run.stdout.matches("child: uid 65534\nparent: child exited 0").count(), 5, "{}", run.text());
    let last = out.join("trace.bin");
    let verify = dara_replay(&["--verify", last.to_str().unwrap()], Duration::from_secs(60));
    assert!(verify.code == 0 && verify.stdout.contains("verify: 2 more executions identical"), "{}", verify.text());
    let again = out_dir("exec-secure-again");
    assert_eq!(trace_search(&again, "random", 1, 5, &[p, m]).code, 0);
    same_decisions(&last, &again.join("trace.bin"));
    assert_no_survivors(&program);
    assert_no_survivors(&marked);
}

/// Processes made past the `fork` symbol stay under control: `daemon(3)` (glibc's fork called
/// inside libc) and a raw `syscall(SYS_fork)` are trapped and made as a hooked fork's are; each
/// searched clean with its output, the last execution replays, and the same seed gives the same
/// decisions. Before, "a raw clone/fork system call that bypasses libc's fork() is not
/// supported" (tmux stopped so).
#[test]
fn a_fork_inside_libc_or_a_raw_one_stays_controlled_and_replays() {
    let program = private_copy(&fixture("libc_internal_fork"), "libc_internal_fork");
    let p = program.to_str().unwrap();
    for (mode, prints) in [("daemon", "daemon child ok"), ("raw", "raw fork reaped")] {
        let out = out_dir(&format!("libc-internal-fork-{mode}"));
        let run = trace_search(&out, "random", 1, 10, &[p, mode]);
        assert_eq!(run.code, 0, "{mode}: {}", run.text());
        assert_eq!(run.stdout.matches(prints).count(), 10, "{mode}: {}", run.text());
        let last = out.join("trace.bin");
        let t = trace::read_file(&last).unwrap();
        assert_eq!(t.steps.iter().filter(|s| s.choice.op.name() == "fork").count(), 1, "{mode}: the fork was a step");
        let verify = dara_replay(&["--verify", last.to_str().unwrap()], Duration::from_secs(60));
        assert_eq!(verify.code, 0, "{mode}: {}", verify.text());
        let again = out_dir(&format!("libc-internal-fork-{mode}-again"));
        assert_eq!(trace_search(&again, "random", 1, 10, &[p, mode]).code, 0, "{mode}");
        same_decisions(&last, &again.join("trace.bin"));
    }
    assert_no_survivors(&program);
}

#[test]
fn fork_exec_and_wait_stay_controlled_and_replay() {
    let program = private_copy(&fixture("proc_fork_exec"), "proc_fork_exec");
    let p = program.to_str().unwrap();
    for (strategy, seed) in [("random", 1u64), ("pct:3", 2)] {
        let out = out_dir(&format!("proc-fork-exec-{}", strategy.replace(':', "")));
        let run = trace_search(&out, strategy, seed, 40, &[p]);
        assert_eq!(run.code, 0, "{}", run.text());
        assert!(run.stderr.contains("no bug found in 40 executions"), "{}", run.text());
        let last = out.join("trace.bin");
        let t = trace::read_file(&last).unwrap();
        let ops: Vec<&str> = t.steps.iter().map(|s| s.choice.op.name()).collect();
        assert_eq!(ops.iter().filter(|o| **o == "fork").count(), 2, "two forks in {ops:?}");
        assert_eq!(ops.iter().filter(|o| **o == "exec").count(), 1, "one exec in {ops:?}");
        assert!(ops.iter().filter(|o| **o == "process-start").count() >= 4, "parent, two children and the exec'd image start: {ops:?}");
        assert!(ops.contains(&"wait"), "{ops:?}");
        let verify = dara_replay(&["--verify", last.to_str().unwrap()], Duration::from_secs(60));
        assert_eq!(verify.code, 0, "{}", verify.text());
        assert!(verify.stdout.contains("verify: 2 more executions identical"), "{}", verify.text());
        assert!(verify.stdout.contains("parent collected both children"), "{}", verify.text());
        let again = out_dir(&format!("proc-fork-exec-{}-again", strategy.replace(':', "")));
        assert_eq!(trace_search(&again, strategy, seed, 40, &[p]).code, 0);
        same_decisions(&last, &again.join("trace.bin"));
    }
    assert_no_survivors(&program);
}

#[test]
fn a_crash_in_a_child_process_is_a_bug_and_its_twin_is_clean() {
    let program = private_copy(&fixture("proc_child_crash"), "proc_child_crash");
    let out = out_dir("proc-child-crash");
    let run = trace_search(&out, "pct:3", 1, 100, &[program.to_str().unwrap()]);
    assert_eq!(run.code, 1, "{}", run.text());
    let shows = "BUG: process 1 killed by SIGSEGV: in use_config";
    assert!(run.stderr.contains(shows), "{}", run.text());
    replays(&out.join("bug-0001/trace.bin"), shows);
    let again = out_dir("proc-child-crash-again");
    assert_eq!(trace_search(&again, "pct:3", 1, 100, &[program.to_str().unwrap()]).code, 1);
    same_decisions(&out.join("bug-0001/trace.bin"), &again.join("bug-0001/trace.bin"));
    assert_no_survivors(&program);

    let twin = private_copy(&fixture("proc_child_crash_ok"), "proc_child_crash_ok");
    let out = out_dir("proc-child-crash-ok");
    let run = trace_search(&out, "pct:3", 1, 100, &[twin.to_str().unwrap()]);
    assert_eq!(run.code, 0, "{}", run.text());
    assert_no_survivors(&twin);
}

/// A bash test script starting two workers in the background: the lost update between the
/// processes is found, replays, and the locked twin stays clean.
#[test]
fn a_test_script_with_background_workers_finds_the_lost_update() {
    let incr = private_copy(&fixture("counter_incr"), "counter_incr");
    let work = out_dir("counter-work");
    let (incr_s, work_s) = (incr.to_str().unwrap(), work.to_str().unwrap());
    let test = script("counter_test.sh");
    let out = out_dir("counter-test");
    let run = trace_search(&out, "random", 1, 100, &[test.to_str().unwrap(), incr_s, work_s]);
    assert_eq!(run.code, 1, "expected the lost update within 100 random runs\n{}", run.text());
    let shows = "BUG: exited with status 1";
    assert!(run.stderr.contains(shows), "{}", run.text());
    let bug = out.join("bug-0001/trace.bin");
    let t = trace::read_file(&bug).unwrap();
    assert!(t.steps.iter().filter(|s| s.choice.op.name() == "process-start").count() >= 3, "the script and both workers are traced");
    replays(&bug, shows);
    let again = out_dir("counter-test-again");
    assert_eq!(trace_search(&again, "random", 1, 100, &[test.to_str().unwrap(), incr_s, work_s]).code, 1);
    same_decisions(&bug, &again.join("bug-0001/trace.bin"));

    let ok = script("counter_test_ok.sh");
    let out = out_dir("counter-test-ok");
    let run = trace_search(&out, "random", 2, 100, &[ok.to_str().unwrap(), incr_s, work_s]);
    assert_eq!(run.code, 0, "the locked twin reported a bug\n{}", run.text());
    let verify = dara_replay(&["-q", "--verify", out.join("trace.bin").to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(verify.code, 0, "{}", verify.text());
    assert_no_survivors(&incr);
}

/// A program that execs a statically linked binary (bash's `exec`, the image replaced in the
/// same process) goes on under dara's ptrace agent and replays exactly; without the agent the run
/// stops, says why, and leaves nothing behind.
#[test]
fn exec_of_a_static_binary_goes_to_the_agent_or_is_refused_clearly() {
    let static_bin = private_copy(&fixture_with("demo_ok", &["-static"]), "exec-static-target");
    let bash_line = format!("exec {}", static_bin.display());
    let out = out_dir("exec-static");
    let run = dara_trace(&["-o", out.to_str().unwrap(), "--", "/bin/bash", "-c", &bash_line], Duration::from_secs(60));
    assert_eq!(run.code, 0, "{}", run.text());
    let verify = dara_replay(&["-q", "--verify", out.join("trace.bin").to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(verify.code, 0, "{}", verify.text());

    let refused = out_dir("exec-static-refused");
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_dara-trace"));
    cmd.env("DARA_AGENT", "/nonexistent/dara-agent").args(["-o", refused.to_str().unwrap(), "--", "/bin/bash", "-c", &bash_line]);
    let run = run_with_limit(cmd, Duration::from_secs(60));
    assert_eq!(run.code, 2, "{}", run.text());
    assert!(run.text().contains("statically linked") && run.text().contains("DARA_AGENT"), "{}", run.text());
    assert_no_survivors(&static_bin);
}

/// posix_spawn (with a file action), posix_spawnp, system and a missing program, under dara.
#[test]
fn posix_spawn_and_system_run_traced_children() {
    let program = private_copy(&fixture("proc_spawn"), "proc_spawn");
    let work = out_dir("proc-spawn-work");
    let redirected = work.join("redirected.txt");
    let out = out_dir("proc-spawn");
    let run = trace_search(&out, "random", 3, 20, &[program.to_str().unwrap(), redirected.to_str().unwrap()]);
    assert_eq!(run.code, 0, "{}", run.text());
    assert!(run.stdout.contains("spawn checks passed"), "{}", run.text());
    assert_eq!(std::fs::read_to_string(&redirected).unwrap(), "redirected\n");
    let t = trace::read_file(&out.join("trace.bin")).unwrap();
    assert!(t.steps.iter().filter(|s| s.choice.op.name() == "process-start").count() >= 5, "every spawned program is traced");
    let verify = dara_replay(&["-q", "--verify", out.join("trace.bin").to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(verify.code, 0, "{}", verify.text());
    assert_no_survivors(&program);
}

/// What a program leaves in /dev/shm stays in its execution's own /dev/shm (a tmpfs of the
/// execution's mount namespace): every execution starts with it empty, and nothing reaches the
/// machine's.
#[test]
fn what_a_program_leaves_in_dev_shm_goes_with_its_execution() {
    let test = script("shm_leftover.sh");
    let out = out_dir("shm-leftover");
    let run = trace_search(&out, "random", 1, 3, &[test.to_str().unwrap()]);
    assert_eq!(run.code, 0, "{}", run.text());
    assert_eq!(run.stdout.matches("shm entries before: 0").count(), 3, "{}", run.text());
    verifies_and_repeats(&out, "shm-leftover-again", ("random", 1, 3), &[test.to_str().unwrap()]);
    assert!(dara_shm_files().is_empty(), "{:?}", dara_shm_files());
}

/// A pipeline through `mkfifo` (`cat f & echo hi > f`, and the other way round): each blocking
/// open of the FIFO waits in the model for the other side instead of in the kernel, the script's
/// checks hold in every schedule, and runs replay exactly.
#[test]
fn a_script_through_a_named_pipe_runs_clean_and_replays() {
    // A private copy: the survivor check below must not see another test process running it.
    let test = private_copy(&script("fifo_pipeline.sh"), "fifo-pipeline");
    for (strategy, seed) in [("random", 6u64), ("pct:3", 7)] {
        let tag = format!("fifo-pipeline-{}", strategy.replace(':', ""));
        let out = out_dir(&tag);
        let run = trace_search(&out, strategy, seed, 20, &[test.to_str().unwrap()]);
        assert_eq!(run.code, 0, "{}", run.text());
        assert!(run.stderr.contains("no bug found in 20 executions"), "{}", run.text());
        let last = out.join("trace.bin");
        let t = trace::read_file(&last).unwrap();
        let fifo_opens = t.steps.iter().filter(|s| s.choice.op == dara_abi::Op::FifoOpen).count();
        assert!(fifo_opens >= 4, "both sides of both opens wait in the model: {fifo_opens}");
        let verify = dara_replay(&["--verify", last.to_str().unwrap()], Duration::from_secs(60));
        assert_eq!(verify.code, 0, "{}", verify.text());
        assert!(verify.stdout.contains("through the fifo: hi back"), "{}", verify.text());
        let again = out_dir(&format!("{tag}-again"));
        assert_eq!(trace_search(&again, strategy, seed, 20, &[test.to_str().unwrap()]).code, 0);
        same_decisions(&last, &again.join("trace.bin"));
    }
    assert!(processes_mentioning(test.to_str().unwrap()).is_empty(), "nothing of the script survives");
}

/// Command substitution, pipelines, a background process stopped with kill, and wait: the
/// script's own checks hold in every schedule, and runs replay exactly.
#[test]
fn a_script_with_pipes_and_kill_runs_clean_and_replays() {
    let test = script("pipeline_kill.sh");
    // The server's nap, this test process's own: the survivor check finds its server by it.
    let nap = (100_000 + std::process::id() % 100_000).to_string();
    for (strategy, seed) in [("random", 4u64), ("pct:3", 5)] {
        let tag = format!("pipeline-kill-{}", strategy.replace(':', ""));
        let out = out_dir(&tag);
        let run = trace_search(&out, strategy, seed, 30, &[test.to_str().unwrap(), &nap]);
        assert_eq!(run.code, 0, "{}", run.text());
        assert!(run.stdout.contains("shout=HELLO lines=5 top=a"), "{}", run.text());
        let last = out.join("trace.bin");
        let verify = dara_replay(&["-q", "--verify", last.to_str().unwrap()], Duration::from_secs(60));
        assert_eq!(verify.code, 0, "{}", verify.text());
        let again = out_dir(&format!("{tag}-again"));
        assert_eq!(trace_search(&again, strategy, seed, 30, &[test.to_str().unwrap(), &nap]).code, 0);
        same_decisions(&last, &again.join("trace.bin"));
    }
    assert!(processes_mentioning(&format!("sleep {nap}")).is_empty(), "the killed server is gone");
}

/// A test script whose background jobs serialise on util-linux's `flock(1)`: the job that finds
/// the lock taken waits under control (before: "uncontrolled ... blocked in the kernel in flock").
#[test]
fn background_jobs_under_flock_lose_no_update_and_replay() {
    let test = script("flock_counter.sh");
    let out = out_dir("flock-counter");
    let run = trace_search(&out, "random", 2, 20, &[test.to_str().unwrap()]);
    assert_eq!(run.code, 0, "{}", run.text());
    assert_eq!(run.stdout.matches("flock_counter: counter 6").count(), 20, "{}", run.text());
    let last = out.join("trace.bin");
    let t = dara_scheduler::trace::read_file(&last).unwrap();
    assert!(t.steps.iter().any(|s| s.choice.op == dara_abi::Op::FileLock), "a job waited for the lock under control");
    verifies_and_repeats(&out, "flock-counter-again", ("random", 2, 20), &[test.to_str().unwrap()]);
}
