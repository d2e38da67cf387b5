//! Memory-level preemption against real binaries (docs/memory-preemption.md): fixtures built with
//! clang's sancov `trace-loads`/`trace-stores` and run with `--preempt-on memory` / `edges:N`.
//!
//! * mem_lost_update's lost update needs a preemption between two plain accesses: found with
//!   memory points (pct:3 and dpor, fixed seed, stated bound), never without them over the same
//!   executions; replays 20/20, `--verify` holds, the same seed gives the same decisions, also
//!   with `--jobs 2`; its twin stays clean.
//! * mem_spin spins on a plain flag: a hang without `edges:N`, completes with it.
//! * dpor finds order_violation on the sancov build with memory points (and not without).
//! * A program without load/store instrumentation gets one clear warning.
mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use dara_scheduler::trace;

/// Builds tests/fixtures/NAME.c with clang and sancov edges, loads and stores, linked against
/// libdara_cov.so (the build line of docs/memory-preemption.md).
fn sancov_fixture(name: &str) -> PathBuf {
    let lib = cov_lib_dir();
    let (dir, rpath) = (lib.to_str().unwrap().to_string(), format!("-Wl,-rpath,{}", lib.display()));
    fixture_built_by(name, Some("clang"), &["-fsanitize-coverage=trace-pc-guard,trace-loads,trace-stores", "-fno-sanitize-link-runtime", "-L", &dir, "-ldara_cov", &rpath])
}

fn trace_run(out: &Path, program: &Path, extra: &[&str]) -> Run {
    let mut args = vec!["-o", out.to_str().unwrap()];
    args.extend_from_slice(extra);
    args.push("--");
    args.push(program.to_str().unwrap());
    dara_trace(&args, Duration::from_secs(300))
}

fn same_decisions_and_watch_set(a: &Path, b: &Path) {
    same_decisions(a, b);
    let (ta, tb) = (trace::read_file(a).unwrap(), trace::read_file(b).unwrap());
    assert_eq!(ta.header.preempt, tb.header.preempt, "same seed, different watch set");
}

/// mem_lost_update under `strategy`: found with memory points within `runs`, not without.
fn lost_update_needs_memory_points(strategy: &str, seed: u64, runs: u64) {
    let tag = format!("mem_lost_update-{}", strategy.replace(':', ""));
    let program = private_copy(&sancov_fixture("mem_lost_update"), &tag);
    let (seed_s, runs_s) = (seed.to_string(), runs.to_string());
    let common = ["-q", "--strategy", strategy, "--seed", &seed_s, "--runs", &runs_s];

    let without = out_dir(&format!("{tag}-without"));
    let run = trace_run(&without, &program, &common);
    assert_eq!(run.code, 0, "without memory points the lost update cannot show\n{}", run.text());

    let out = out_dir(&tag);
    let with: Vec<&str> = common.iter().copied().chain(["--preempt-on", "memory"]).collect();
    let run = trace_run(&out, &program, &with);
    assert_eq!(run.code, 1, "expected the lost update within {runs} {strategy} executions (seed {seed})\n{}", run.text());
    assert!(run.stderr.contains("SIGABRT"), "{}", run.text());
    let bug = out.join("bug-0001/trace.bin");
    let recorded = trace::read_file(&bug).unwrap();
    assert!(recorded.header.preempt.memory);
    assert_eq!(recorded.header.preempt.watch.len(), 1, "exactly `counter` is shared and written: {:?}", recorded.header.preempt);
    let memory_steps = recorded.steps.iter().filter(|s| matches!(s.choice.op, dara_abi::Op::MemoryRead | dara_abi::Op::MemoryWrite)).count();
    assert!(memory_steps >= 4, "both threads' read and write are scheduling points ({memory_steps})");
    replays(&bug, "SIGABRT");

    let again = out_dir(&format!("{tag}-again"));
    let run2 = trace_run(&again, &program, &with);
    assert_eq!(run2.code, 1, "the same seed did not find the bug again\n{}", run2.text());
    same_decisions_and_watch_set(&bug, &again.join("bug-0001/trace.bin"));
    assert_no_survivors(&program);
}

#[test]
fn pct_finds_the_plain_memory_lost_update_only_with_memory_points() {
    lost_update_needs_memory_points("pct:3", 1, 100);
}

#[test]
fn dpor_finds_the_plain_memory_lost_update_only_with_memory_points() {
    lost_update_needs_memory_points("dpor", 0, 100);
}

#[test]
fn parallel_search_with_memory_points_runs_the_same_executions() {
    let program = private_copy(&sancov_fixture("mem_lost_update"), "mem_lost_update-jobs");
    let args = ["-q", "--strategy", "random", "--seed", "5", "--runs", "200", "--preempt-on", "memory"];
    let one = out_dir("mem_lost_update-jobs1");
    let run1 = trace_run(&one, &program, &args);
    assert_eq!(run1.code, 1, "{}", run1.text());
    let two = out_dir("mem_lost_update-jobs2");
    let parallel: Vec<&str> = args.iter().copied().chain(["--jobs", "2"]).collect();
    let run2 = trace_run(&two, &program, &parallel);
    assert_eq!(run2.code, 1, "{}", run2.text());
    same_decisions_and_watch_set(&one.join("bug-0001/trace.bin"), &two.join("bug-0001/trace.bin"));
    assert_no_survivors(&program);
}

#[test]
fn the_atomic_twin_stays_clean_with_memory_points() {
    let program = private_copy(&sancov_fixture("mem_lost_update_ok"), "mem_lost_update_ok");
    for (strategy, seed) in [("pct:3", 11u64), ("dpor", 0)] {
        let out = out_dir(&format!("mem_lost_update_ok-{}", strategy.replace(':', "")));
        let run = trace_run(&out, &program, &["-q", "--strategy", strategy, "--seed", &seed.to_string(), "--runs", "100", "--preempt-on", "memory"]);
        assert_eq!(run.code, 0, "correct twin reported a bug under {strategy}\n{}", run.text());
        let verify = dara_replay(&["-q", "--verify", out.join("trace.bin").to_str().unwrap()], Duration::from_secs(60));
        assert_eq!(verify.code, 0, "clean run did not replay clean\n{}", verify.text());
    }
    assert_no_survivors(&program);
}

#[test]
fn a_spin_on_a_plain_flag_stops_uncontrolled_without_edge_quanta_and_completes_with_them() {
    let program = private_copy(&sancov_fixture("mem_spin"), "mem_spin");
    let out = out_dir("mem_spin-without");
    let run = trace_run(&out, &program, &["-q", "--busy-limit", "1", "--runs", "1"]);
    // The setter could still run: no hang of the program, a spin dara cannot preempt (exit 2).
    assert_eq!(run.code, 2, "{}", run.text());
    assert!(run.text().contains("computes without a scheduling point") && run.text().contains("--preempt-on edges:N"), "{}", run.text());

    let out = out_dir("mem_spin-edges");
    let run = trace_run(&out, &program, &["-q", "--busy-limit", "5", "--runs", "30", "--seed", "3", "--preempt-on", "edges:100"]);
    assert_eq!(run.code, 0, "with edges:100 every run completes\n{}", run.text());
    assert!(run.stderr.contains("no bug found in 30 executions"), "{}", run.text());
    let last = trace::read_file(&out.join("trace.bin")).unwrap();
    assert_eq!(last.header.preempt.edges, 100);
    assert!(last.steps.iter().any(|s| s.choice.op == dara_abi::Op::EdgeQuantum), "the spinning thread yielded through edge quanta");
    let verify = dara_replay(&["-q", "--verify", out.join("trace.bin").to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(verify.code, 0, "{}", verify.text());
    assert_no_survivors(&program);
}

#[test]
fn dpor_finds_the_order_violation_on_a_sancov_build_with_memory_points() {
    let program = private_copy(&sancov_fixture("order_violation"), "order_violation-sancov");
    let out = out_dir("order_violation-dpor-plain");
    let run = trace_run(&out, &program, &["-q", "--strategy", "dpor", "--runs", "100"]);
    assert_eq!(run.code, 0, "without memory points dpor cannot see the race (DESIGN gap this closes)\n{}", run.text());

    let out = out_dir("order_violation-dpor-memory");
    let run = trace_run(&out, &program, &["-q", "--strategy", "dpor", "--runs", "100", "--preempt-on", "memory"]);
    assert_eq!(run.code, 1, "{}", run.text());
    assert!(run.stderr.contains("SIGSEGV"), "{}", run.text());
    replays(&out.join("bug-0001/trace.bin"), "SIGSEGV");
    assert_no_survivors(&program);
}

#[test]
fn an_uninstrumented_program_gets_one_clear_warning_and_bad_values_are_refused() {
    let program = private_copy(&fixture("lost_update_ok"), "mem-uninstrumented");
    let out = out_dir("mem-uninstrumented");
    let run = trace_run(&out, &program, &["-q", "--runs", "3", "--preempt-on", "memory"]);
    assert_eq!(run.code, 0, "{}", run.text());
    assert_eq!(run.stderr.matches("saw no instrumented load or store").count(), 1, "{}", run.text());
    assert!(run.stderr.contains("trace-loads,trace-stores"), "{}", run.text());

    for bad in ["memroy", "edges:0", "edges:many", "memory;edges:5"] {
        let run = trace_run(&out, &program, &["-q", "--preempt-on", bad]);
        assert_eq!(run.code, 2, "{bad}: {}", run.text());
        assert_eq!(run.stderr.trim().lines().count(), 1, "one line: {}", run.text());
        assert!(run.stderr.contains("--preempt-on"), "{}", run.text());
    }
    assert_no_survivors(&program);
}
