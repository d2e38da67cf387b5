//! How dara behaves at the edges: virtual time, spinning, blocking it cannot control, being
//! interrupted, damaged traces, programs it must refuse, and the built-in demo. None of these may
//! hang, panic, or leave a process or shared-memory file behind.
mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

#[test]
fn ten_minutes_of_sleep_take_well_under_a_second() {
    let program = fixture("long_sleep");
    let out = out_dir("long_sleep");
    let run = dara_trace(&["-o", out.to_str().unwrap(), "--", program.to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(run.code, 0, "{}", run.text());
    // The execution line reports the execution's own wall time in ms.
    let ms: f64 = run
        .stderr
        .lines()
        .find_map(|l| l.strip_prefix("execution 0: exited normally (status 0) (")?.split(", ").nth(1)?.strip_suffix(" ms)")?.parse().ok())
        .unwrap_or_else(|| panic!("no timing line\n{}", run.text()));
    assert!(ms < 1000.0, "ten virtual minutes took {ms} ms of wall time\n{}", run.text());
    let trace = dara_scheduler::trace::read_file(&out.join("trace.bin")).unwrap();
    let vtime = trace.steps.last().unwrap().now_ns;
    assert!(vtime >= 600_000_000_000, "virtual time only reached {vtime} ns");
    let verify = dara_replay(&["-q", "--verify", out.join("trace.bin").to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(verify.code, 0, "{}", verify.text());
}

#[test]
fn sched_yield_spin_loop_terminates_under_every_strategy() {
    let program = fixture("spin_yield");
    for (strategy, seed) in [("pct:3", 5u64), ("random", 6), ("pct:1", 7)] {
        let out = out_dir(&format!("spin_yield-{}", strategy.replace(':', "")));
        let run = search(&out, strategy, seed, 50, &program);
        assert_eq!(run.code, 0, "{strategy}\n{}", run.text());
        let verify = dara_replay(&["-q", "--verify", out.join("trace.bin").to_str().unwrap()], Duration::from_secs(60));
        assert_eq!(verify.code, 0, "{strategy}\n{}", verify.text());
    }
}

#[test]
fn blocking_syscall_outside_control_ends_with_a_diagnostic() {
    let program = private_copy(&fixture("raw_blocking"), "raw_blocking");
    let out = out_dir("raw_blocking");
    let started = Instant::now();
    let run = dara_trace(&["-o", out.to_str().unwrap(), "--", program.to_str().unwrap()], Duration::from_secs(30));
    assert_eq!(run.code, 2, "{}", run.text());
    assert!(run.stderr.contains("uncontrolled"), "{}", run.text());
    assert!(run.stderr.contains("read("), "the diagnostic names the syscall\n{}", run.text());
    assert!(started.elapsed() < Duration::from_secs(10), "took {:?}", started.elapsed());
    assert!(processes_mentioning(program.to_str().unwrap()).is_empty(), "target left running");
}

#[test]
fn sigint_stops_cleanly_and_leaves_nothing_behind() {
    let program = private_copy(&fixture("lock_pingpong"), "sigint");
    let out = out_dir("sigint");
    let mut child = Command::new(env!("CARGO_BIN_EXE_dara-trace"))
        .args(["-q", "-o", out.to_str().unwrap(), "--runs", "100000", "--", program.to_str().unwrap(), "100000000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = interrupt_after(&mut child, Duration::from_millis(700));
    assert_eq!(status.code(), Some(130));
    assert!(processes_mentioning(program.to_str().unwrap()).is_empty(), "a target process survived SIGINT");
    assert!(dara_shm_files().is_empty(), "shared memory left in /dev/shm");
    let trace = dara_scheduler::trace::read_file(&out.join("trace.bin")).expect("the interrupted run's trace is readable");
    assert_eq!(trace.outcome, dara_scheduler::Outcome::Interrupted);
}

#[test]
fn damaged_traces_are_rejected_with_a_clear_error() {
    let program = fixture("lost_update_ok");
    let out = out_dir("damaged");
    let run = dara_trace(&["-q", "-o", out.to_str().unwrap(), "--", program.to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(run.code, 0, "{}", run.text());
    let good = std::fs::read(out.join("trace.bin")).unwrap();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("truncated", good[..good.len() / 2].to_vec()),
        ("empty", Vec::new()),
        ("foreign", b"#!/bin/sh\necho this is not a trace\n".to_vec()),
        ("bitflip", {
            let mut b = good.clone();
            let i = b.len() / 3;
            b[i] ^= 0x10;
            b
        }),
    ];
    for (what, bytes) in cases {
        let path = out.join(format!("{what}.bin"));
        std::fs::write(&path, bytes).unwrap();
        let replay = dara_replay(&[path.to_str().unwrap()], Duration::from_secs(10));
        assert_eq!(replay.code, 2, "{what}\n{}", replay.text());
        assert!(replay.stderr.starts_with("dara-replay: error: "), "{what}\n{}", replay.text());
        assert_eq!(replay.stderr.lines().count(), 1, "one line\n{}", replay.text());
        assert!(!replay.stderr.contains("panicked"), "{}", replay.text());
    }
}

/// A static binary runs through the ptrace agent (tests/ptrace.rs); without the agent it is
/// refused in one line that says how to get it.
#[test]
fn static_binaries_are_refused_without_the_ptrace_agent() {
    let program = fixture_with("lost_update_ok", &["-static"]);
    let out = out_dir("static");
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_dara-trace"));
    cmd.env("DARA_AGENT", "/nonexistent/dara-agent").args(["-o", out.to_str().unwrap(), "--", program.to_str().unwrap()]);
    let run = run_with_limit(cmd, Duration::from_secs(10));
    assert_eq!(run.code, 2, "{}", run.text());
    assert!(run.stderr.contains("statically linked") && run.stderr.contains("DARA_AGENT"), "{}", run.text());
    assert_eq!(run.stderr.lines().count(), 1, "{}", run.text());
}

#[test]
fn missing_program_is_a_usage_error() {
    let run = dara_trace(&["--", "/nonexistent/program"], Duration::from_secs(10));
    assert_eq!(run.code, 2, "{}", run.text());
    assert!(run.stderr.contains("cannot find program"), "{}", run.text());
}

#[test]
fn builtin_demo_finds_its_bug_and_names_the_replay_command() {
    let out = out_dir("demo-default");
    // As on a fresh clone: dara's tools on no PATH. The printed line must still run as pasted.
    let mut trace_cmd = Command::new(env!("CARGO_BIN_EXE_dara-trace"));
    trace_cmd.args(["-o", out.to_str().unwrap()]).env("PATH", "/usr/bin:/bin");
    let run = run_with_limit(trace_cmd, Duration::from_secs(120));
    assert_eq!(run.code, 1, "{}", run.text());
    let last = run.stderr.lines().last().unwrap_or_default();
    let command = last.strip_prefix("replay: ").unwrap_or_else(|| panic!("the last line names the replay command\n{}", run.text()));
    let built = Path::new(env!("CARGO_BIN_EXE_dara-replay"));
    assert!(command.starts_with(&format!("{} ", built.display())), "not on PATH: the replay command has its path\n{}", run.text());
    let mut pasted = Command::new("sh");
    pasted.args(["-c", command]).env("PATH", "/usr/bin:/bin");
    let replay = run_with_limit(pasted, Duration::from_secs(30));
    assert_eq!(replay.code, 1, "the printed command, run as pasted, replays the bug\n{}", replay.text());
    assert!(replay.stdout.contains("mutex-lock"), "the listing shows the interleaving\n{}", replay.text());
    let trace = command.rsplit(' ').next().unwrap();
    assert!(trace.ends_with("minimal.bin"), "the replay line names the minimized schedule: {trace}");
    assert!(replay.stdout.contains("1 preemption(s), marked >>"), "the demo bug needs exactly one preemption\n{}", replay.text());
}

/// scripts/install.sh links the tools into a directory; run from there, as on PATH, dara-trace
/// names the replay command bare, and that command replays the bug.
#[test]
fn installed_tools_name_the_replay_command_as_the_path_finds_it() {
    let out = out_dir("installed");
    let bindir = out.join("bin");
    let install = Command::new(repo_root().join("scripts/install.sh")).args(["--no-build", bindir.to_str().unwrap()]).output().unwrap();
    assert!(install.status.success(), "{install:?}");
    let path = format!("{}:/usr/bin:/bin", bindir.display());
    let mut trace_cmd = Command::new("dara-trace");
    trace_cmd.args(["-qq", "-o", out.join("demo").to_str().unwrap()]).env("PATH", &path);
    let run = run_with_limit(trace_cmd, Duration::from_secs(120));
    assert_eq!(run.code, 1, "{}", run.text());
    let command = run.stderr.lines().last().unwrap_or_default().strip_prefix("replay: dara-replay ").map(|t| format!("dara-replay {t}"));
    let command = command.unwrap_or_else(|| panic!("on PATH, the replay command is named bare\n{}", run.text()));
    // -qq: the final result only; the demo's executions printed nothing of their own.
    assert!(!run.text().contains("alice=") && !run.stderr.contains("Searching up to"), "{}", run.text());
    let mut pasted = Command::new("sh");
    pasted.args(["-c", &command]).env("PATH", &path);
    let replay = run_with_limit(pasted, Duration::from_secs(30));
    assert_eq!(replay.code, 1, "the printed command replays the bug\n{}", replay.text());
}

#[test]
fn replay_detects_an_edited_decision() {
    let program = fixture("lost_update");
    let out = out_dir("edited");
    let run = search(&out, "pct:3", 1, 300, &program);
    assert_eq!(run.code, 1, "{}", run.text());
    let mut t = dara_scheduler::trace::read_file(&out.join("bug-0001/trace.bin")).unwrap();
    // Swap in a thread that is not the recorded one at the first step with more than one thread.
    let step = t.steps.iter().position(|s| s.choice.thread != t.steps[0].choice.thread).expect("a second thread ran");
    t.steps[step].choice.thread = 99;
    let edited = out.join("edited.bin");
    dara_scheduler::trace::write_file(&edited, &t).unwrap();
    let replay = dara_replay(&["-q", edited.to_str().unwrap()], Duration::from_secs(30));
    assert_eq!(replay.code, 3, "{}", replay.text());
    assert!(replay.stdout.contains(&format!("DIVERGED at step {step}")), "{}", replay.text());
    // Where the offered posts were made: the place to start looking.
    assert!(replay.stdout.contains("(posted by thread "), "{}", replay.text());
    assert!(!replay.stdout.contains("dynamic loader's cache"), "the machine's loader cache did not change\n{}", replay.text());

    // The trace recorded the loader's cache; a replay that diverges on a machine whose cache is
    // another (a package installed since: every library may move) says so.
    let recorded = t.header.library_cache.expect("the search recorded the loader's cache");
    assert_eq!(Some(recorded), dara_model::library_cache::LibraryCache::now());
    t.header.library_cache = Some(dara_model::library_cache::LibraryCache { bytes: recorded.bytes - 420, digest: recorded.digest ^ 1 });
    dara_scheduler::trace::write_file(&edited, &t).unwrap();
    let replay = dara_replay(&["-q", edited.to_str().unwrap()], Duration::from_secs(30));
    assert_eq!(replay.code, 3, "{}", replay.text());
    let said = format!("the dynamic loader's cache (/etc/ld.so.cache) changed since the recording ({} bytes then, {} now", recorded.bytes - 420, recorded.bytes);
    assert!(replay.stdout.contains(&said), "{}", replay.text());
}

#[test]
fn step_and_virtual_time_bounds_end_runs_as_hangs() {
    let out = out_dir("bound-steps");
    let program = fixture("lost_update_ok");
    let run = dara_trace(&["-o", out.to_str().unwrap(), "--max-steps", "10", "--", program.to_str().unwrap()], Duration::from_secs(30));
    assert_eq!(run.code, 1, "{}", run.text());
    assert!(run.stderr.contains("hang: step bound reached (10 scheduling decisions)"), "{}", run.text());

    let out = out_dir("bound-vtime");
    let program = fixture("long_sleep");
    let run = dara_trace(&["-o", out.to_str().unwrap(), "--max-vtime", "60", "--", program.to_str().unwrap()], Duration::from_secs(30));
    assert_eq!(run.code, 1, "{}", run.text());
    assert!(run.stderr.contains("hang: virtual-time bound exceeded (60 s)"), "{}", run.text());
    let replay = dara_replay(&["-q", out.join("bug-0001/trace.bin").to_str().unwrap()], Duration::from_secs(30));
    assert_eq!(replay.code, 1, "{}", replay.text());
}

#[test]
fn a_thread_that_never_yields_is_reported_as_a_hang() {
    let out = out_dir("busy");
    let program = private_copy(&fixture("busy_loop"), "busy");
    let run = dara_trace(&["-o", out.to_str().unwrap(), "--busy-limit", "1", "--", program.to_str().unwrap()], Duration::from_secs(30));
    assert_eq!(run.code, 1, "{}", run.text());
    assert!(run.stderr.contains("thread 1 computed for 1 s of CPU time without reaching a scheduling point"), "{}", run.text());
    assert!(run.stderr.contains("--busy-limit"), "the message names the option\n{}", run.text());
    assert_no_survivors(&program);
}

#[test]
fn deadlock_reports_name_the_locks() {
    let out = out_dir("abba-names");
    let program = fixture("abba_deadlock");
    let run = search(&out, "random", 1, 100, &program);
    assert_eq!(run.code, 1, "{}", run.text());
    assert!(run.stderr.contains("waits for mutex lock_a (0x") && run.stderr.contains("waits for mutex lock_b (0x"), "{}", run.text());
    let summary = std::fs::read_to_string(out.join("bug-0001/summary.txt")).unwrap();
    assert!(summary.contains("deadlock") && summary.contains("replay:"), "{summary}");
}

#[test]
fn dara_info_summarises_a_trace_for_people_and_machines() {
    let out = out_dir("info");
    let program = fixture("lost_update");
    let run = search(&out, "pct:3", 1, 300, &program);
    assert_eq!(run.code, 1, "{}", run.text());
    let bug = out.join("bug-0001/trace.bin");
    let recorded = dara_scheduler::trace::read_file(&bug).unwrap();
    let info = |args: &[&str]| {
        let output = Command::new(env!("CARGO_BIN_EXE_dara")).args(args).output().unwrap();
        (output.status.code(), String::from_utf8_lossy(&output.stdout).into_owned(), String::from_utf8_lossy(&output.stderr).into_owned())
    };
    let (code, text, _) = info(&["info", bug.to_str().unwrap()]);
    assert_eq!(code, Some(0));
    assert!(text.contains(&format!("steps:        {} ", recorded.steps.len())), "{text}");
    assert!(text.contains("mutex-lock") && text.contains("outcome:      BUG: process 0 killed by SIGABRT"), "{text}");
    let (code, json, _) = info(&["info", "--json", bug.to_str().unwrap()]);
    assert_eq!(code, Some(0));
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["steps"].as_u64(), Some(recorded.steps.len() as u64));
    assert_eq!(v["bug"].as_bool(), Some(true));
    assert_eq!(v["outcome"]["kind"].as_str(), Some("crashed"));
    let (code, _, err) = info(&["info", "/etc/hostname"]);
    assert_eq!(code, Some(2));
    assert!(err.starts_with("dara: error: ") && err.contains("not a dara trace"), "{err}");
}

#[test]
fn thread_churn_works_and_the_thread_limit_is_reported_as_dara_s() {
    let program = fixture("many_threads");
    let out = out_dir("churn");
    let run = dara_trace(&["-o", out.to_str().unwrap(), "--", program.to_str().unwrap(), "600"], Duration::from_secs(60));
    assert_eq!(run.code, 0, "{}", run.text());
    assert!(run.stdout.contains("600\n"), "{}", run.text());
    let verify = dara_replay(&["-q", "--verify", out.join("trace.bin").to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(verify.code, 0, "{}", verify.text());

    let out = out_dir("thread-limit");
    let run = dara_trace(&["-o", out.to_str().unwrap(), "--", program.to_str().unwrap(), "5000"], Duration::from_secs(60));
    assert_eq!(run.code, 2, "{}", run.text());
    assert!(run.stderr.contains("more than 4096 threads in one execution"), "{}", run.text());
}

#[test]
fn coverage_of_an_instrumented_build_reaches_dara() {
    let lib = cov_lib_dir();
    let (l, rpath) = (format!("-L{}", lib.display()), format!("-Wl,-rpath,{}", lib.display()));
    let program = fixture_with("cov_branches", &["-fsanitize-coverage=trace-pc", &l, "-ldara_cov", &rpath]);
    // Outside dara the link-time library's callbacks are no-ops: the program just runs.
    let native = Command::new(&program).output().unwrap();
    assert!(native.status.success(), "{native:?}");

    let out = out_dir("coverage-one");
    let run = dara_trace(&["-o", out.to_str().unwrap(), "--", program.to_str().unwrap()], Duration::from_secs(30));
    assert_eq!(run.code, 0, "{}", run.text());
    let one: usize = run
        .stderr
        .lines()
        .find_map(|l| l.split(", coverage ").nth(1)?.strip_suffix(" edges)")?.parse().ok())
        .unwrap_or_else(|| panic!("no coverage on the execution line\n{}", run.text()));
    assert!(one > 0);

    let out = out_dir("coverage-search");
    let run = dara_trace(&["-o", out.to_str().unwrap(), "--runs", "40", "--", program.to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(run.code, 0, "{}", run.text());
    let union: usize = run
        .stderr
        .lines()
        .find_map(|l| l.strip_prefix("coverage")?.trim().strip_suffix(" edges")?.parse().ok())
        .unwrap_or_else(|| panic!("no coverage in the summary\n{}", run.text()));
    assert!(union > one, "different random draws reach different handlers: one run {one}, union {union}");
}

/// A thread that spins on a flag its main thread sets after a sleep is correct on real CPUs;
/// dara cannot preempt the spin, but it must not call that a hang of the program: the run stops
/// uncontrolled (exit 2, nothing saved as a bug), naming the spinning thread and the one that
/// could still move. (busy_loop above, where nobody else could move, stays a hang.)
#[test]
fn a_thread_that_spins_while_another_could_move_is_no_hang() {
    let out = out_dir("spin-on-sleeper");
    let program = private_copy(&fixture("spin_on_sleeper"), "spin-on-sleeper");
    let run = dara_trace(&["-o", out.to_str().unwrap(), "--busy-limit", "1", "--", program.to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(run.code, 2, "{}", run.text());
    assert!(run.stderr.contains("uncontrolled: thread 1 computes without a scheduling point") && run.stderr.contains("while thread 0 could still move"), "{}", run.text());
    assert!(!run.stderr.contains("BUG") && !out.join("bug-0001").exists(), "{}", run.text());
    assert_no_survivors(&program);
}

/// dara-trace writes its own lines on stderr: stdout is the program's, byte for byte.
/// `dara-trace -- gzip -c -n input > out.gz` writes the file `gzip -c -n input > out.gz` writes
/// (its status lines once made a compressed file 141 bytes longer).
#[test]
fn a_recording_s_stdout_is_the_program_s_byte_for_byte() {
    let out = out_dir("stdout-is-the-program-s");
    let input = out.join("input.txt");
    std::fs::write(&input, (0..20_000).map(|i| format!("line {i}\n")).collect::<String>()).unwrap();
    let native = Command::new("gzip").args(["-c", "-n"]).arg(&input).output().unwrap();
    assert!(native.status.success(), "{native:?}");
    let (compressed, said) = (out.join("out.gz"), out.join("stderr.txt"));
    let mut dara = Command::new(env!("CARGO_BIN_EXE_dara-trace"))
        .args(["-o", out.to_str().unwrap(), "--", "gzip", "-c", "-n", input.to_str().unwrap()])
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&compressed).unwrap())
        .stderr(std::fs::File::create(&said).unwrap())
        .spawn()
        .unwrap();
    let status = wait_at_most(&mut dara, Duration::from_secs(120)).unwrap_or_else(|| {
        let _ = dara.kill();
        panic!("dara-trace -- gzip did not finish within 120 s")
    });
    let said = std::fs::read_to_string(&said).unwrap();
    assert_eq!(status.code(), Some(0), "{said}");
    let written = std::fs::read(&compressed).unwrap();
    assert!(written == native.stdout, "the recorded gzip's stdout is {} bytes, the native one {}\n{said}", written.len(), native.stdout.len());
    assert!(said.contains("no bug found in 1 executions"), "dara's verdict is on stderr\n{said}");
    let verify = dara_replay(&["-q", "--verify", out.join("trace.bin").to_str().unwrap()], Duration::from_secs(60));
    assert!(verify.code == 0 && verify.stdout.contains("verify: 2 more executions identical"), "{}", verify.text());
}
