//! Atomics as memory-level scheduling points, and honest systematic search
//! (docs/memory-preemption.md, issue 17).
//!
//! * atomic_check_then_act (load, then store, on an `atomic_int`), chase_lev (a work-stealing
//!   deque whose owner takes the last element without a CAS) and aba_stack (a Treiber stack
//!   without a version tag) are found with `--preempt-on memory`
//!   on the ThreadSanitizer-ABI build (libdara_tsan.so), within a stated number of executions for
//!   a stated seed; the bug replays 20/20, `--verify` holds, the same seed gives the same
//!   decisions; each twin stays clean and dpor proves it over the visible points.
//! * The same fixtures built plainly: dpor explores everything it sees, finds nothing, and says
//!   "search not exhaustive" with the reason, not "search space exhausted".
//! * A sancov build with memory points: dpor says atomics were not scheduling points.
mod common;

use common::*;

/// Options of every memory-level search here.
const MEMORY: [&str; 2] = ["--preempt-on", "memory"];

/// `strategy` with `seed` finds `name`'s bug on the TSan-ABI build within `runs` executions; it
/// replays, and the same seed finds it again with the same decisions.
fn found_with_atomics_as_points(name: &str, strategy: &str, seed: u64, runs: u64) {
    let tag = format!("{name}-{}", strategy.replace(':', ""));
    let program = private_copy(&tsan_fixture(name), &tag);
    let what = format!("{name} within {runs} {strategy} executions (seed {seed}); the atomic operations are points");
    found_with_memory_points(&tag, &what, 3, |out| search_with(out, strategy, seed, runs, &program, &MEMORY));
    assert_no_survivors(&program);
}

/// `name`'s twin on the TSan-ABI build: clean over `runs` random executions, and dpor explores
/// its whole space and calls it exhausted (every interleaving point was visible).
fn twin_clean_and_proved(twin: &str, runs: u64) {
    let program = private_copy(&tsan_fixture(twin), twin);
    let out = out_dir(&format!("{twin}-random"));
    let run = search_with(&out, "random", 1, runs, &program, &MEMORY);
    assert_eq!(run.code, 0, "false alarm on the twin\n{}", run.text());
    let out = out_dir(&format!("{twin}-dpor"));
    let run = search_with(&out, "dpor", 0, 5000, &program, &MEMORY);
    assert_eq!(run.code, 0, "{}", run.text());
    assert!(run.stderr.contains("search space exhausted: explored all schedules"), "{}", run.text());
    assert_no_survivors(&program);
}

/// The plain (uninstrumented) build of `name` under dpor: nothing found, and the end line says
/// the search was not exhaustive and why, with the build line that would fix it.
fn plain_build_is_not_exhaustive(name: &str) {
    let program = private_copy(&fixture(name), &format!("{name}-plain"));
    let out = out_dir(&format!("{name}-plain-dpor"));
    let run = search(&out, "dpor", 0, 5000, &program);
    assert_eq!(run.code, 0, "the bug cannot show without memory points, and running out of schedules is no error\n{}", run.text());
    let line = run.stderr.lines().find(|l| l.starts_with("search not exhaustive: dpor explored all")).unwrap_or_else(|| panic!("no 'not exhaustive' line\n{}", run.text()));
    assert!(line.contains("memory accesses were not scheduling points") && line.contains("-fsanitize=thread") && line.contains("--preempt-on memory"), "{line}");
    assert!(!run.stderr.contains("search space exhausted"), "{}", run.text());
    // Machines read the same: `end.kind` is "not-exhaustive", with the reason.
    let out = out_dir(&format!("{name}-plain-dpor-json"));
    let run = search_with(&out, "dpor", 0, 5000, &program, &["--json"]);
    assert_eq!(run.code, 0, "{}", run.text());
    let document: serde_json::Value = serde_json::from_str(run.stdout.trim_end()).unwrap_or_else(|e| panic!("{e}\n{}", run.text()));
    assert_eq!(document["end"]["kind"], "not-exhaustive", "{document}");
    assert!(document["end"]["reason"].as_str().unwrap_or_default().contains("-fsanitize=thread"), "{document}");
    // The same with memory points asked for: the profile sees no instrumentation and says so.
    let out = out_dir(&format!("{name}-plain-dpor-memory"));
    let run = search_with(&out, "dpor", 0, 5000, &program, &MEMORY);
    assert_eq!(run.code, 0, "{}", run.text());
    assert!(run.stderr.contains("search not exhaustive: dpor explored all") && run.stderr.contains("the program was not built with memory instrumentation"), "{}", run.text());
    assert_no_survivors(&program);
}

#[test]
fn atomic_check_then_act_needs_atomics_as_points() {
    found_with_atomics_as_points("atomic_check_then_act", "pct:3", 1, 20);
    found_with_atomics_as_points("atomic_check_then_act", "dpor", 0, 20);
    twin_clean_and_proved("atomic_check_then_act_ok", 100);
    plain_build_is_not_exhaustive("atomic_check_then_act");
}

#[test]
fn chase_lev_missing_cas_needs_atomics_as_points() {
    found_with_atomics_as_points("chase_lev", "random", 1, 20);
    found_with_atomics_as_points("chase_lev", "dpor", 0, 50);
    twin_clean_and_proved("chase_lev_ok", 100);
    plain_build_is_not_exhaustive("chase_lev");
}

#[test]
fn aba_on_a_lock_free_stack_needs_atomics_as_points() {
    found_with_atomics_as_points("aba_stack", "pct:3", 1, 50);
    found_with_atomics_as_points("aba_stack", "dpor", 0, 50);
    twin_clean_and_proved("aba_stack_ok", 100);
    plain_build_is_not_exhaustive("aba_stack");
}

/// sancov's load/store callbacks skip atomic instructions: with memory points on a sancov build,
/// plain memory is visible and atomics are not, and dpor says so.
#[test]
fn a_sancov_build_is_not_exhaustive_about_atomics() {
    let lib = cov_lib_dir();
    let (dir, rpath) = (lib.to_str().unwrap().to_string(), format!("-Wl,-rpath,{}", lib.display()));
    let built = fixture_built_by("mem_lost_update_ok", Some("clang"), &["-fsanitize-coverage=trace-pc-guard,trace-loads,trace-stores", "-fno-sanitize-link-runtime", "-L", &dir, "-ldara_cov", &rpath]);
    let program = private_copy(&built, "sancov-atomics");
    let out = out_dir("sancov-atomics-dpor");
    let run = search_with(&out, "dpor", 0, 5000, &program, &MEMORY);
    assert_eq!(run.code, 0, "{}", run.text());
    assert!(run.stderr.contains("search not exhaustive: dpor explored all") && run.stderr.contains("atomic operations were not scheduling points"), "{}", run.text());
    assert_no_survivors(&program);
}

/// Outside dara a TSan-ABI build runs as usual: libdara_tsan.so performs the atomics.
#[test]
fn a_tsan_abi_build_runs_natively() {
    for (name, ok) in [("atomic_check_then_act_ok", "owners: 1"), ("chase_lev_ok", "item 1 handed out 1 time(s)"), ("aba_stack_ok", "node 2: 1")] {
        let program = tsan_fixture(name);
        let out = std::process::Command::new(&program).output().unwrap();
        assert!(out.status.success(), "{name}: {out:?}");
        assert!(String::from_utf8_lossy(&out.stdout).contains(ok), "{name}: {out:?}");
    }
}
