//! Strategies for many fine-grained points (issue 17, item 3; docs/memory-preemption.md,
//! docs/strategies.md): `pos` and `rf` on the memory-level fixture families, TSan-ABI builds
//! searched with `--preempt-on memory`.
//!
//! * mem_reorder (N setters, N from argv), mem_wrong_lock (two locks for one counter) and
//!   mem_two_stage (100 writers, one late reader) are found by a stated strategy and seed within
//!   a stated number of executions; the bug replays 20/20 with `--verify`, and the same seed
//!   finds it again with the same decisions.
//! * Each twin stays clean over a bounded number of executions of the same strategy.
mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;

/// A search of `program args...` with memory points.
fn search_args(out: &Path, strategy: &str, seed: u64, runs: u64, program: &Path, args: &[&str]) -> Run {
    search_jobs(out, strategy, seed, runs, 1, program, args)
}

/// [`search_args`] with `jobs` parallel executions.
fn search_jobs(out: &Path, strategy: &str, seed: u64, runs: u64, jobs: u32, program: &Path, args: &[&str]) -> Run {
    let (seed, runs, jobs) = (seed.to_string(), runs.to_string(), jobs.to_string());
    let mut argv = vec!["-q", "-o", out.to_str().unwrap(), "--strategy", strategy, "--seed", &seed, "--runs", &runs, "--jobs", &jobs, "--epoch", SEARCH_EPOCH, "--preempt-on", "memory", "--", program.to_str().unwrap()];
    argv.extend_from_slice(args);
    dara_trace(&argv, Duration::from_secs(300))
}

fn program(name: &str, tag: &str) -> PathBuf {
    private_copy(&tsan_fixture(name), tag)
}

/// `strategy` with `seed` finds `name args`'s bug within `runs` executions; the bug replays, and
/// the same seed finds it again in the same execution with the same decisions.
fn found(name: &str, args: &[&str], strategy: &str, seed: u64, runs: u64) {
    let tag = format!("{name}{}-{}", args.join("-"), strategy.replace(':', ""));
    let program = program(name, &tag);
    let what = format!("{name} {} within {runs} {strategy} executions (seed {seed})", args.join(" "));
    found_with_memory_points(&tag, &what, 2, |out| search_args(out, strategy, seed, runs, &program, args));
    assert_no_survivors(&program);
}

/// `twin args` stays clean over `runs` executions of `strategy`.
fn clean(twin: &str, args: &[&str], strategy: &str, runs: u64) {
    let tag = format!("{twin}{}-{}", args.join("-"), strategy.replace(':', ""));
    let program = program(twin, &tag);
    let out = out_dir(&tag);
    let run = search_args(&out, strategy, 1, runs, &program, args);
    assert_eq!(run.code, 0, "false alarm on the twin\n{}", run.text());
    assert_no_survivors(&program);
}

#[test]
fn reorder_with_many_setters_is_found_by_rf() {
    for setters in ["3", "10", "20"] {
        found("mem_reorder", &[setters], "rf", 1, 30);
    }
    found("mem_reorder", &["5"], "pos", 2, 30);
    // pos's executions are independent: two jobs find the same bug with the same decisions.
    let program = program("mem_reorder", "reorder-pos-jobs");
    let (one, two) = (out_dir("reorder-pos-jobs1"), out_dir("reorder-pos-jobs2"));
    assert_eq!(search_jobs(&one, "pos", 2, 30, 1, &program, &["5"]).code, 1);
    let run = search_jobs(&two, "pos", 2, 30, 2, &program, &["5"]);
    assert_eq!(run.code, 1, "{}", run.text());
    same_decisions(&one.join("bug-0001/trace.bin"), &two.join("bug-0001/trace.bin"));
    assert_no_survivors(&program);
    clean("mem_reorder_ok", &["10"], "rf", 50);
    clean("mem_reorder_ok", &["10"], "pos", 50);
}

#[test]
fn wrong_lock_is_found_by_pos_and_rf() {
    found("mem_wrong_lock", &[], "pos", 1, 60);
    found("mem_wrong_lock", &[], "rf", 1, 60);
    clean("mem_wrong_lock_ok", &[], "rf", 50);
}

#[test]
fn two_stage_among_100_threads_is_found_by_rf() {
    found("mem_two_stage", &[], "rf", 1, 60);
    clean("mem_two_stage_ok", &[], "rf", 30);
    clean("mem_two_stage_ok", &[], "pos", 30);
}

/// Both strategies are listed where a user looks for them.
#[test]
fn pos_and_rf_are_in_the_help() {
    let run = dara_trace(&["--help"], Duration::from_secs(30));
    assert!(run.stdout.contains("pos (partial order") && run.stdout.contains("rf (reads-from"), "{}", run.text());
    let run = dara_trace(&["--strategy", "rff", "--", "/bin/true"], Duration::from_secs(30));
    assert_ne!(run.code, 0);
    assert!(run.stderr.contains("pos, rf"), "{}", run.text());
}
