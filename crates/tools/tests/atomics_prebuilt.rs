//! `--preempt-on atomics`: the atomic instructions of a prebuilt program (built with plain
//! `cc -O2`, no instrumentation, no dara library) are scheduling points (docs/memory-preemption.md,
//! issue 17 item 1b).
//!
//! * atomic_check_then_act, chase_lev and aba_stack, built plainly, are found within a stated
//!   number of executions for a stated seed; each bug replays 20/20, `--verify` holds, the same
//!   seed finds it again with the same decisions. Without the option none is ever found (the
//!   atomics tests show that for dpor; here a random search of the same size).
//! * Their twins stay clean; dpor over the trapped points says it was not exhaustive and why.
//! * `--jobs 2` finds the ABA bug in the same execution with the same decisions as one job.
//! * The listing names the atomic variable and the function that touched it.
//! * Under the ptrace agent too: the static (musl) check-then-act, and a Go program whose own
//!   `sync/atomic` calls are points while the runtime's atomics are left alone.
mod common;

use common::go::*;
use common::*;

const ATOMICS: [&str; 2] = ["--preempt-on", "atomics"];

/// The fixture `name` as a user's prebuilt binary: `cc -O2`, nothing of dara's.
fn prebuilt(name: &str, test: &str) -> std::path::PathBuf {
    private_copy(&fixture_with(name, &["-O2"]), test)
}

/// `strategy` with `seed` finds `name`'s bug within `runs` executions with the atomic
/// instructions as points, and not at all in as many executions without them.
fn found_only_with_atomics_as_points(name: &str, strategy: &str, seed: u64, runs: u64) {
    let tag = format!("{name}-prebuilt-{}", strategy.replace(':', ""));
    let program = prebuilt(name, &tag);
    let what = format!("{name} (cc -O2) within {runs} {strategy} executions (seed {seed}) with --preempt-on atomics");
    found_with_memory_points(&tag, &what, 2, |out| search_with(out, strategy, seed, runs, &program, &ATOMICS));
    let out = out_dir(&format!("{tag}-without"));
    let run = search(&out, strategy, seed, runs, &program);
    assert_eq!(run.code, 0, "without atomic points the bug cannot show\n{}", run.text());
    assert_no_survivors(&program);
}

/// `twin` built plainly: clean over `runs` random executions with the atomic points; dpor over
/// them is honest about what it could not see.
fn twin_clean(twin: &str, runs: u64) {
    let program = prebuilt(twin, &format!("{twin}-prebuilt"));
    let out = out_dir(&format!("{twin}-prebuilt-random"));
    let run = search_with(&out, "random", 1, runs, &program, &ATOMICS);
    assert_eq!(run.code, 0, "false alarm on the twin\n{}", run.text());
    assert!(run.stderr.contains(&format!("no bug found in {runs} executions")), "{}", run.text());
    let out = out_dir(&format!("{twin}-prebuilt-dpor"));
    let run = search_with(&out, "dpor", 0, 2000, &program, &ATOMICS);
    assert_eq!(run.code, 0, "{}", run.text());
    let line = run.stderr.lines().find(|l| l.starts_with("search not exhaustive:")).unwrap_or_else(|| panic!("dpor claimed too much\n{}", run.text()));
    assert!(line.contains("only the program's own atomic read-modify-write and exchange instructions were scheduling points"), "{line}");
    assert_no_survivors(&program);
}

#[test]
fn a_prebuilt_check_then_act_is_found_with_its_atomic_instructions_as_points() {
    found_only_with_atomics_as_points("atomic_check_then_act", "random", 1, 20);
    twin_clean("atomic_check_then_act_ok", 50);

    // What the search printed about the plan, and what the listing shows of the race.
    let program = prebuilt("atomic_check_then_act", "atomic_check_then_act-listing");
    let out = out_dir("atomic_check_then_act-prebuilt-listing");
    let args = ["-o", out.to_str().unwrap(), "--strategy", "random", "--seed", "1", "--runs", "20", "--epoch", SEARCH_EPOCH, ATOMICS[0], ATOMICS[1], "--", program.to_str().unwrap()];
    let run = dara_trace(&args, std::time::Duration::from_secs(300));
    assert_eq!(run.code, 1, "{}", run.text());
    let profile = run.stderr.lines().find(|l| l.starts_with("memory profile:")).unwrap_or_else(|| panic!("{}", run.text()));
    assert!(profile.contains("2 of 2 granules watched") && profile.contains("atomic instructions trapped: 2 in "), "{profile}");
    let listing = dara_replay(&[out.join("bug-0001/trace.bin").to_str().unwrap()], std::time::Duration::from_secs(60));
    let writes: Vec<&str> = listing.stdout.lines().filter(|l| l.contains(" write ") && l.contains("taken (") && l.contains(" claim")).collect();
    assert_eq!(writes.len(), 2, "both workers' stores to `taken` are steps, at their call site\n{}", listing.stdout);
    assert_no_survivors(&program);
}

#[test]
fn a_prebuilt_chase_lev_deque_is_found_with_its_atomic_instructions_as_points() {
    found_only_with_atomics_as_points("chase_lev", "random", 1, 50);
    twin_clean("chase_lev_ok", 50);
}

#[test]
fn a_prebuilt_aba_stack_is_found_with_its_atomic_instructions_as_points() {
    found_only_with_atomics_as_points("aba_stack", "pct:3", 1, 300);
    twin_clean("aba_stack_ok", 50);

    // Two jobs find it in the same execution with the same decisions as one.
    let program = prebuilt("aba_stack", "aba_stack-jobs");
    let one = out_dir("aba_stack-prebuilt-jobs1");
    let two = out_dir("aba_stack-prebuilt-jobs2");
    let run = search_with(&one, "pct:3", 3, 300, &program, &ATOMICS);
    assert_eq!(run.code, 1, "{}", run.text());
    let run = search_with(&two, "pct:3", 3, 300, &program, &[ATOMICS[0], ATOMICS[1], "--jobs", "2"]);
    assert_eq!(run.code, 1, "{}", run.text());
    same_decisions(&one.join("bug-0001/trace.bin"), &two.join("bug-0001/trace.bin"));
    assert_no_survivors(&program);
}

#[test]
fn a_static_program_s_atomic_instructions_are_points_under_the_ptrace_agent() {
    let program = private_copy(&musl_fixture("atomic_check_then_act"), "atomic_check_then_act-static");
    let what = "the static (musl) check-then-act within 20 random executions (seed 1) with --preempt-on atomics";
    found_with_memory_points("atomic_check_then_act-static", what, 2, |out| search_with(out, "random", 1, 20, &program, &ATOMICS));
    let out = out_dir("atomic_check_then_act-static-without");
    let run = search(&out, "random", 1, 20, &program);
    assert_eq!(run.code, 0, "without atomic points the bug cannot show\n{}", run.text());
    assert_no_survivors(&program);
}

/// A Go program: the XCHG of `atomic.StoreInt32` in `main.claim` is a point; the runtime's and
/// the standard library's atomics are not trapped (2 sites, not thousands).
#[test]
fn a_go_program_s_own_atomics_are_points_and_the_runtime_s_are_not() {
    let program = private_copy(&go_fixture("atomicclaim"), "atomicclaim");
    let search_go = |out: &std::path::Path| {
        let args = ["-o", out.to_str().unwrap(), "--strategy", "random", "--seed", "1", "--runs", "100", "--epoch", SEARCH_EPOCH, ATOMICS[0], ATOMICS[1], "--", program.to_str().unwrap()];
        dara_trace(&args, std::time::Duration::from_secs(300))
    };
    let out = out_dir("atomicclaim");
    let run = search_go(&out);
    assert_eq!(run.code, 1, "expected the double claim within 100 random executions (seed 1)\n{}", run.text());
    assert!(run.stdout.contains("atomicclaim: 2 owners"), "{}", run.text());
    let profile = run.stderr.lines().find(|l| l.starts_with("memory profile:")).unwrap_or_else(|| panic!("{}", run.text()));
    assert!(profile.contains("atomic instructions trapped: 2 in atomicclaim"), "only the program's own two: {profile}");
    let bug = out.join("bug-0001/trace.bin");
    let points = dara_scheduler::trace::read_file(&bug).unwrap().steps.iter().filter(|s| s.choice.op == dara_abi::Op::MemoryWrite).count();
    assert!(points >= 2, "the atomic instructions were steps ({points})");
    let verify = dara_replay(&["-q", "--verify", bug.to_str().unwrap()], std::time::Duration::from_secs(120));
    assert_eq!(verify.code, 1, "{}", verify.text());
    assert!(verify.stdout.contains("verify: 2 more executions identical") && verify.stdout.contains("2 owners"), "{}", verify.text());
    let again = out_dir("atomicclaim-again");
    assert_eq!(search_go(&again).code, 1);
    same_decisions(&bug, &again.join("bug-0001/trace.bin"));

    let twin = private_copy(&go_twin("atomicclaim"), "atomicclaim_ok");
    let out = out_dir("atomicclaim-ok");
    let run = search_with(&out, "random", 1, 30, &twin, &ATOMICS);
    assert_eq!(run.code, 0, "false alarm on the twin\n{}", run.text());
    assert_no_survivors(&program);
    assert_no_survivors(&twin);
}
