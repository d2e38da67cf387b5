//! Every clock path reads the virtual clock (docs/determinism.md): clock_paths reads the time
//! through libc, the vDSO found by hand, raw system calls and rdtsc, from three threads; the
//! same seed prints the same values, the values are dara's (realtime at the `--epoch` given), and
//! replay --verify holds. Without `--epoch` the wall clock starts at the real time dara-trace
//! started, and a replay reads the recorded start. Files written during a run keep real
//! modification times (ahead of the virtual clock, or behind it after a long sleep). A real
//! SIGSEGV is still a crash while rdtsc faults into dara.
mod common;

use std::path::Path;
use std::time::Duration;

use common::*;

const REALTIME_EPOCH_S: i64 = 1_704_067_200;
const MONOTONIC_BASE_S: i64 = 3_600;
/// Virtual seconds a short run stays within (its sleeps add up to milliseconds).
const WINDOW_S: i64 = 60;

/// The program's own output lines (dara's own start with neither).
fn program_lines(stdout: &str) -> Vec<&str> {
    stdout.lines().filter(|l| l.starts_with("thread ") || l.starts_with("  ")).collect()
}

/// Every `name value` pair of the probe's output, for one name.
fn values(lines: &[&str], name: &str) -> Vec<String> {
    lines
        .iter()
        .flat_map(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            words.windows(2).filter(|w| w[0] == name).map(|w| w[1].to_string()).collect::<Vec<_>>()
        })
        .collect()
}

fn seconds(value: &str, digits_after: usize) -> i64 {
    let whole: i64 = value.split('.').next().unwrap().parse().unwrap();
    if value.contains('.') || digits_after == 0 {
        whole
    } else {
        whole / 10i64.pow(digits_after as u32)
    }
}

fn trace_probe(program: &Path, out: &Path, extra: &[&str]) -> Run {
    let mut args = vec!["-q", "--seed", "5", "--cpus", "3", "--epoch", "1704067200", "-o", out.to_str().unwrap()];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--", program.to_str().unwrap(), "4"]);
    let run = dara_trace(&args, Duration::from_secs(120));
    assert_eq!(run.code, 0, "clock_paths under dara\n{}", run.text());
    run
}

#[test]
fn every_clock_path_reads_the_virtual_clock_the_same_way_every_run() {
    let program = private_copy(&fixture("clock_paths"), "clock_paths");
    for (mode, extra) in [("closed", &["--closed"][..]), ("recording", &[][..])] {
        let first_out = out_dir(&format!("clock_paths-{mode}-1"));
        let first = trace_probe(&program, &first_out, extra);
        let second = trace_probe(&program, &out_dir(&format!("clock_paths-{mode}-2")), extra);
        let lines = program_lines(&first.stdout);
        assert_eq!(lines.len(), 3 * 4 * 7, "three threads, four rounds, seven lines each\n{}", first.text());
        assert_eq!(lines, program_lines(&second.stdout), "{mode}: the same seed printed different values");

        for (name, digits) in [("realtime", 9), ("timespec_get", 9), ("gettimeofday", 0), ("time", 0), ("ftime", 0), ("vdso_clock_gettime", 9), ("vdso_time", 0), ("raw_clock_gettime", 9), ("raw_time", 0)] {
            for v in values(&lines, name) {
                let s = seconds(&v, digits);
                assert!((REALTIME_EPOCH_S..REALTIME_EPOCH_S + WINDOW_S).contains(&s), "{mode}: {name} reads {v}, not dara's epoch\n{}", first.text());
            }
        }
        for name in ["monotonic", "rdtsc", "rdtscp"] {
            for v in values(&lines, name) {
                let s = seconds(&v, 9);
                assert!((MONOTONIC_BASE_S..MONOTONIC_BASE_S + WINDOW_S).contains(&s), "{mode}: {name} reads {v}, not the virtual monotonic clock");
            }
        }
        for (name, expected) in [("resolution", "1"), ("timespec_getres", "1"), ("tsc_aux", "0"), ("sched_getcpu", "0"), ("getcpu", "0"), ("node", "0"), ("sysconf_cpus", "3")] {
            let seen = values(&lines, name);
            assert_eq!(seen.len(), 12, "{name} printed by every round");
            assert!(seen.iter().all(|v| v == expected), "{mode}: {name} reads {seen:?}, expected {expected}");
        }
        // A raw sched_getaffinity is not virtual (docs/determinism.md): it sees the one CPU the
        // execution is pinned to, the same count in every run.
        assert!(values(&lines, "raw_cpus").iter().all(|v| v == "1"), "{mode}: raw CPU count\n{}", first.text());
        // The virtual CPU time is the virtual time: it moves as the run goes on.
        let cputime = values(&lines, "thread_cputime");
        assert!(cputime.iter().any(|v| v != &cputime[0]), "{mode}: CPU time never moved: {cputime:?}");

        let trace = first_out.join("trace.bin");
        let verify = dara_replay(&["-q", "--verify", trace.to_str().unwrap()], Duration::from_secs(120));
        assert_eq!(verify.code, 0, "{mode}: replay\n{}", verify.text());
        assert!(verify.stdout.contains("verify: 2 more executions identical"), "{}", verify.text());
    }
    assert_no_survivors(&program);
    assert!(dara_shm_files().is_empty(), "shared memory left behind: {:?}", dara_shm_files());
}

#[test]
fn an_execd_program_reads_the_virtual_clock_too() {
    let out = out_dir("clock_exec");
    let run = dara_trace(&["-q", "--closed", "--epoch", "1704067200", "-o", out.to_str().unwrap(), "--", "sh", "-c", "date -u +%Y-%m-%d"], Duration::from_secs(60));
    assert_eq!(run.code, 0, "{}", run.text());
    assert!(run.stdout.contains("2024-01-01"), "date after exec did not read dara's epoch\n{}", run.text());
}

fn real_now_s() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs()
}

/// The seconds `date +%s` printed (its only line of output that is a number).
fn printed_seconds(run: &Run) -> u64 {
    let line = run.stdout.lines().find(|l| !l.is_empty() && l.bytes().all(|b| b.is_ascii_digit()));
    line.unwrap_or_else(|| panic!("date printed no seconds\n{}", run.text())).parse().unwrap()
}

#[test]
fn the_wall_clock_starts_at_the_real_time_and_a_replay_reads_the_recorded_start() {
    let out = out_dir("clock_epoch_now");
    let before = real_now_s();
    let run = dara_trace(&["-q", "--closed", "-o", out.to_str().unwrap(), "--", "date", "+%s"], Duration::from_secs(60));
    let after = real_now_s();
    assert_eq!(run.code, 0, "{}", run.text());
    let printed = printed_seconds(&run);
    assert!((before..=after + WINDOW_S as u64).contains(&printed), "date read {printed}, not the real time ({before}..{after})\n{}", run.text());

    // A replay reads the recorded start, not its own time.
    let out = out_dir("clock_epoch_given");
    let run = dara_trace(&["-q", "--closed", "--epoch", "1000000000", "-o", out.to_str().unwrap(), "--", "date", "+%s"], Duration::from_secs(60));
    assert_eq!((run.code, printed_seconds(&run)), (0, 1_000_000_000), "{}", run.text());
    let trace = out.join("trace.bin");
    let replay = dara_replay(&["-q", trace.to_str().unwrap()], Duration::from_secs(60));
    assert_eq!((replay.code, printed_seconds(&replay)), (0, 1_000_000_000), "{}", replay.text());
    let info = std::process::Command::new(env!("CARGO_BIN_EXE_dara")).arg("info").arg(&trace).output().unwrap();
    assert!(String::from_utf8_lossy(&info.stdout).contains("starts at 1000000000.000000000 s"), "{}", String::from_utf8_lossy(&info.stdout));
}

/// Files a program writes have real modification times while its clock is virtual
/// (docs/time.md, "Files written during a run"): from the real start (no `--epoch`) a file is
/// ahead of the clock that reads it right after, even after real computing, and behind by the
/// virtual time a sleep skipped; from an epoch in the past (every fixture search's, a replay of
/// an older trace) it is ahead every time. Same decisions for the same seed, replays verify.
#[test]
fn a_file_written_during_a_run_has_a_real_mtime_against_the_virtual_clock() {
    let program = private_copy(&fixture("file_mtime"), "file-mtime");
    let out = out_dir("file-mtime-real-start");
    let real_start = |out: &Path| {
        let args = ["-q", "-o", out.to_str().unwrap(), "--runs", "3", "--strategy", "random", "--seed", "1", "--", program.to_str().unwrap()];
        dara_trace(&args, Duration::from_secs(120))
    };
    let run = real_start(&out);
    assert_eq!(run.code, 0, "{}", run.text());
    assert_eq!(run.stdout.matches("start: ahead, after computing: ahead, after sleep: behind by 590 s or more").count(), 3, "{}", run.text());
    let trace = out.join("trace.bin");
    let verify = dara_replay(&["--verify", trace.to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(verify.code, 0, "{}", verify.text());
    assert!(verify.stdout.contains("verify: 2 more executions identical"), "{}", verify.text());
    let again = out_dir("file-mtime-real-start-again");
    assert_eq!(real_start(&again).code, 0);
    same_decisions(&trace, &again.join("trace.bin"));

    let out = out_dir("file-mtime-past-epoch");
    let run = search(&out, "random", 1, 3, &program);
    assert_eq!(run.code, 0, "{}", run.text());
    assert_eq!(run.stdout.matches("start: ahead, after computing: ahead, after sleep: ahead").count(), 3, "{}", run.text());
    assert_no_survivors(&program);
}

/// A real SIGSEGV is a crash located in its function, with and without a program handler of its
/// own, while rdtsc faults into dara; the crash replays.
#[test]
fn a_real_segfault_is_still_a_crash_while_the_counter_traps() {
    let program = private_copy(&fixture("tsc_crash"), "tsc_crash");
    for mode in ["plain", "handler"] {
        let out = out_dir(&format!("tsc_crash-{mode}"));
        let run = dara_trace(&["-q", "--closed", "--no-minimize", "-o", out.to_str().unwrap(), "--", program.to_str().unwrap(), mode], Duration::from_secs(60));
        assert_eq!(run.code, 1, "{mode}: the crash was not reported\n{}", run.text());
        assert!(run.stdout.contains("counter moved: yes"), "{}", run.text());
        assert!(run.stderr.contains("killed by SIGSEGV: in crash_here"), "{mode}: the crash lost its location\n{}", run.text());
        assert_eq!(run.stdout.contains("handler: caught the fault"), mode == "handler", "{mode}: the program's own handler\n{}", run.text());
        replays(&out.join("bug-0001/trace.bin"), "SIGSEGV: in crash_here");
    }
    let out = out_dir("tsc_crash-recover");
    let run = dara_trace(&["-q", "--closed", "-o", out.to_str().unwrap(), "--", program.to_str().unwrap(), "recover"], Duration::from_secs(60));
    assert_eq!(run.code, 0, "a program that recovers from its fault is not a bug\n{}", run.text());
    assert!(run.stdout.contains("handler: caught the fault") && run.stdout.contains("recovered"), "{}", run.text());
    assert_no_survivors(&program);
}
