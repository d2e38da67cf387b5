//! `dara minimize`: a failing trace shrinks to a schedule with fewer preemptions that fails the
//! same way and replays exactly; traces it cannot work from are refused with one line.
mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;
use dara_scheduler::trace;

/// Runs `dara ARGS` (at most two minutes).
fn dara(args: &[&str]) -> Run {
    let started = std::time::Instant::now();
    let output = Command::new(env!("CARGO_BIN_EXE_dara")).args(args).output().expect("running dara");
    assert!(started.elapsed() < Duration::from_secs(120), "dara {args:?} took {:?}", started.elapsed());
    Run {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        wall: started.elapsed(),
    }
}

/// (steps, context switches, preemptions) from the `before:` or `after:` line.
fn sizes(run: &Run, label: &str) -> (u64, u64, u64) {
    let line = run.stdout.lines().find(|l| l.starts_with(label)).unwrap_or_else(|| panic!("no {label} line\n{}", run.text()));
    let n: Vec<u64> = line.split(|c: char| !c.is_ascii_digit()).filter_map(|w| w.parse().ok()).collect();
    assert_eq!(n.len(), 3, "{line}");
    (n[0], n[1], n[2])
}

fn minimize(input: &Path, output: &Path) -> Run {
    dara(&["minimize", input.to_str().unwrap(), "-o", output.to_str().unwrap()])
}

#[test]
fn a_lost_update_shrinks_to_fewer_preemptions_and_replays_exactly() {
    let program = private_copy(&fixture("lost_update"), "minimize-lost-update");
    let out = out_dir("minimize-lost-update");
    // random, seed 1: the first execution already fails, with 8 preemptions where 1 is enough.
    let search = search(&out, "random", 1, 200, &program);
    assert_eq!(search.code, 1, "{}", search.text());
    let bug = out.join("bug-0001/trace.bin");
    let small = out.join("min.bin");
    let run = minimize(&bug, &small);
    assert_eq!(run.code, 0, "{}", run.text());
    let (steps_before, _, preemptions_before) = sizes(&run, "before:");
    let (steps_after, _, preemptions_after) = sizes(&run, "after:");
    assert!(preemptions_before >= 3, "the case has room to shrink\n{}", run.text());
    assert!(preemptions_after < preemptions_before, "{}", run.text());
    assert!(preemptions_after >= 1, "a lost update needs a preemption\n{}", run.text());
    assert!(steps_after <= steps_before, "{}", run.text());
    assert!(run.stdout.contains("candidate executions"), "{}", run.text());

    let original = trace::read_file(&bug).unwrap();
    let minimized = trace::read_file(&small).unwrap();
    assert_eq!(minimized.header, original.header, "same header");
    assert_eq!(minimized.steps.len() as u64, steps_after);
    assert_eq!(minimized.outcome.signature(), original.outcome.signature());

    let replay = dara_replay(&["-q", small.to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(replay.code, 1, "{}", replay.text());
    assert!(replay.stdout.contains("killed by SIGABRT: ") && replay.stdout.contains("(same as recorded)"), "{}", replay.text());
    let verify = dara_replay(&["-q", "--verify", small.to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(verify.code, 1, "{}", verify.text());
    assert!(verify.stdout.contains("verify: 2 more executions identical"), "{}", verify.text());
    assert_no_survivors(&program);
}

#[test]
fn a_schedule_with_nothing_to_remove_is_written_unchanged() {
    let program = fixture("order_violation");
    let out = out_dir("minimize-nothing");
    let search = search(&out, "random", 3, 300, &program);
    assert_eq!(search.code, 1, "{}", search.text());
    let bug = out.join("bug-0001/trace.bin");
    let small = out.join("min.bin");
    let run = minimize(&bug, &small);
    assert_eq!(run.code, 0, "{}", run.text());
    assert_eq!(sizes(&run, "before:"), sizes(&run, "after:"), "{}", run.text());
    assert!(run.stdout.contains("no smaller failing schedule found"), "{}", run.text());
    assert_eq!(trace::read_file(&small).unwrap().steps, trace::read_file(&bug).unwrap().steps);
}

#[test]
fn a_trace_that_does_not_reproduce_is_refused() {
    let program = fixture("lost_update");
    let out = out_dir("minimize-edited");
    let search = search(&out, "pct:3", 1, 300, &program);
    assert_eq!(search.code, 1, "{}", search.text());
    let mut t = trace::read_file(&out.join("bug-0001/trace.bin")).unwrap();
    let step = t.steps.iter().position(|s| s.choice.thread != t.steps[0].choice.thread).expect("a second thread ran");
    t.steps[step].choice.thread = 99;
    let edited = out.join("edited.bin");
    trace::write_file(&edited, &t).unwrap();
    let small = out.join("min.bin");
    let run = minimize(&edited, &small);
    assert_eq!(run.code, 2, "{}", run.text());
    assert!(run.stderr.starts_with("dara: error: the trace does not reproduce: cannot minimize"), "{}", run.text());
    assert!(run.stderr.contains(&format!("step {step}")), "says where\n{}", run.text());
    assert_eq!(run.stderr.lines().count(), 1, "{}", run.text());
    assert!(!small.exists(), "nothing written");
}

#[test]
fn unreadable_and_bug_free_traces_are_errors() {
    let out = out_dir("minimize-errors");
    let run = dara(&["minimize", "/etc/hostname"]);
    assert_eq!(run.code, 2, "{}", run.text());
    assert!(run.stderr.starts_with("dara: error: ") && run.stderr.contains("not a dara trace"), "{}", run.text());

    let program = fixture("lost_update_ok");
    let traced = dara_trace(&["-q", "-o", out.to_str().unwrap(), "--", program.to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(traced.code, 0, "{}", traced.text());
    let run = dara(&["minimize", out.join("trace.bin").to_str().unwrap()]);
    assert_eq!(run.code, 2, "{}", run.text());
    assert!(run.stderr.contains("records no bug") && run.stderr.contains("nothing to minimize"), "{}", run.text());
    assert!(!out.join("trace.min.bin").exists());
}
