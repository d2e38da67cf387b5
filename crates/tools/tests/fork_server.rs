//! The fork server (issue 17, item 5): a search copies its program, parked before `main`, for
//! each execution instead of a fork + exec. The copy must be invisible: the program sees what a
//! launched one sees, a seed gives the same executions and bugs with and without the server, a
//! bug found through it replays through a plain launch, and nothing of it outlives dara-trace.
mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// `launch_view`'s lines, with the one thing that differs between two executions however they
/// are started (the region memfd's inode in the memory map) left out. On a CPU that cannot fault
/// on `cpuid` dara cannot answer it, and the real answer names the CPU the execution ran on (its
/// APIC id), which may differ between executions on a loaded machine: its lines are left out
/// there (seen with two suites at once on an AMD EPYC VM).
fn view(stdout: &str) -> Vec<String> {
    let probe = ["pid ", "stack ", "fd ", "signals ", "cpuid ", "libgcc ", "rseq ", "map "];
    let cpuid_answered = cpu_has("cpuid_fault");
    stdout
        .lines()
        .filter(|l| probe.iter().any(|p| l.starts_with(p)))
        .filter(|l| cpuid_answered || !l.starts_with("cpuid "))
        .map(|l| if l.starts_with("map ") && l.contains("/memfd:dara-region") { l.split_whitespace().filter(|w| !w.chars().all(|c| c.is_ascii_digit())).collect::<Vec<_>>().join(" ") } else { l.to_string() })
        .collect()
}

#[test]
fn a_program_copied_from_the_fork_server_sees_what_a_launched_one_sees() {
    let program = private_copy(&fixture("launch_view"), "launch_view");
    let p = program.to_str().unwrap();
    let served_out = out_dir("fork-server-view");
    let served = dara_trace(&["-o", served_out.to_str().unwrap(), "--runs", "2", "--", p], Duration::from_secs(120));
    assert_eq!(served.code, 0, "{}", served.text());
    assert!(served.stderr.contains("fork server            2 of 2 executions copied"), "{}", served.text());
    let launched_out = out_dir("fork-server-view-launched");
    let launched = dara_trace(&["-o", launched_out.to_str().unwrap(), "--runs", "2", "--no-fork-server", "--", p], Duration::from_secs(120));
    assert_eq!(launched.code, 0, "{}", launched.text());
    assert!(!launched.stderr.contains("fork server"), "{}", launched.text());

    let seen = view(&served.stdout);
    assert!(seen.iter().filter(|l| l.starts_with("pid 2 ppid 0 own-group 1")).count() == 2, "{}", served.text());
    assert!(seen.iter().any(|l| l.starts_with("map ")) && seen.iter().any(|l| l.starts_with("fd 1000 ")), "{}", served.text());
    // libgcc_s's CPU model, filled in the server for its copies, as the launched program's
    // constructor fills it (the preload links libgcc_s: always loaded).
    assert!(!cpu_has("cpuid_fault") || seen.iter().any(|l| l.starts_with("cpuid 1.0 ")), "{}", served.text());
    assert!(seen.iter().any(|l| l.starts_with("libgcc cpu model ")), "{}", served.text());
    // The kernel drops a CLONE_VM child's rseq registration; a copy made with a holder puts
    // glibc's back.
    assert!(seen.iter().any(|l| l.starts_with("rseq main thread registered yes")), "{}", served.text());
    assert_eq!(seen, view(&launched.stdout), "a copied program saw something a launched one did not");
    // The last execution's trace, replayed with a plain launch, prints the same again.
    let replay = dara_replay(&[served_out.join("trace.bin").to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(replay.code, 0, "{}", replay.text());
    assert_eq!(view(&replay.stdout), seen[seen.len() / 2..], "the replay saw other things\n{}", replay.text());
    assert_no_survivors(&program);
}

#[test]
fn a_seed_finds_the_same_bug_with_and_without_the_fork_server_and_it_replays() {
    let program = private_copy(&fixture("lost_update"), "lost_update_fork_server");
    let bug = same_bug_both_ways("fork-server-bug", 1, &program, &["--no-fork-server"]);
    replays(&bug, "SIGABRT");
    assert_no_survivors(&program);
}

/// Searches `program` (random, `seed`, up to 200 executions) as dara does by default and with
/// `options`; both find a bug, with the same decisions. The default search's bug trace.
fn same_bug_both_ways(name: &str, seed: u64, program: &Path, options: &[&str]) -> PathBuf {
    let default_out = out_dir(name);
    let default = search(&default_out, "random", seed, 200, program);
    assert_eq!(default.code, 1, "{}", default.text());
    let other_out = out_dir(&format!("{name}-other"));
    let other = search_with(&other_out, "random", seed, 200, program, options);
    assert_eq!(other.code, 1, "{options:?}\n{}", other.text());
    let bug = default_out.join("bug-0001/trace.bin");
    same_decisions(&bug, &other_out.join("bug-0001/trace.bin"));
    bug
}

#[test]
fn a_program_launched_ahead_runs_as_one_launched_at_its_executions_start() {
    // One job: each execution's program is started while the one before runs (on another CPU);
    // two jobs: each at its execution's start. The same seed finds the same bug either way.
    let program = private_copy(&fixture("lost_update"), "lost_update_ahead");
    let bug = same_bug_both_ways("launch-ahead-bug", 3, &program, &["--jobs", "2"]);
    replays(&bug, "SIGABRT");

    // The summary counts them, with or without the fork server (where there is a second CPU).
    let demo = private_copy(&fixture("demo_ok"), "demo_ok_ahead");
    // SAFETY: cpu_set_t is plain data; sched_getaffinity fills it.
    let cpus = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set);
        libc::CPU_COUNT(&set)
    };
    for options in [&[][..], &["--no-fork-server"][..]] {
        let out = out_dir("launch-ahead-summary");
        let mut args = vec!["-o", out.to_str().unwrap(), "--runs", "5"];
        args.extend_from_slice(options);
        args.extend(["--", demo.to_str().unwrap()]);
        let run = dara_trace(&args, Duration::from_secs(120));
        assert_eq!(run.code, 0, "{}", run.text());
        let counted = run.stderr.contains("launched ahead         4 of 5 executions");
        assert_eq!(counted, cpus > 1, "{options:?}, {cpus} CPUs\n{}", run.text());
    }
    assert_no_survivors(&program);
    assert_no_survivors(&demo);
}

#[test]
fn killing_dara_trace_ends_its_fork_server() {
    let program = private_copy(&fixture("demo_ok"), "demo_ok_fork_server");
    let out = out_dir("fork-server-kill");
    let mut dara = Command::new(env!("CARGO_BIN_EXE_dara-trace"))
        .args(["-o", out.to_str().unwrap(), "--runs", "1000000", "--", program.to_str().unwrap()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The server and an execution's copy both run the program: wait (bounded) until one does.
    let deadline = Instant::now() + Duration::from_secs(60);
    while processes_mentioning(program.to_str().unwrap()).is_empty() {
        assert!(Instant::now() < deadline, "the search never started its program");
        std::thread::sleep(Duration::from_millis(10));
    }
    dara.kill().unwrap();
    dara.wait().unwrap();
    // They die with dara (PR_SET_PDEATHSIG); the kernel may take a moment on a loaded machine.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !processes_mentioning(program.to_str().unwrap()).is_empty() {
        assert!(Instant::now() < deadline, "processes of the search survived dara-trace: {:?}", processes_mentioning(program.to_str().unwrap()));
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_copy_whose_main_thread_ends_first_keeps_its_descriptors() {
    let program = private_copy(&fixture("main_exits_first"), "main_exits_first");
    let out = out_dir("fork-server-main-exits-first");
    let run = dara_trace(&["-o", out.to_str().unwrap(), "--runs", "30", "--seed", "4", "--", program.to_str().unwrap()], Duration::from_secs(180));
    assert_eq!(run.code, 0, "a worker lost its descriptors after the main thread ended\n{}", run.text());
    assert!(run.stderr.contains("fork server            30 of 30 executions copied"), "{}", run.text());
    let verify = dara_replay(&["-q", "--verify", out.join("trace.bin").to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(verify.code, 0, "{}", verify.text());
    assert_no_survivors(&program);
}
