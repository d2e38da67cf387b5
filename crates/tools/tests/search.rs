//! The search loop as users drive it: parallel executions give the same results as sequential
//! ones, the time budget is honoured, and the closing summary is printed.
mod common;

use std::time::Duration;

use common::*;
use dara_scheduler::trace;

#[test]
fn jobs_two_finds_the_same_bugs_as_jobs_one() {
    let program = fixture("lost_update");
    let mut runs = Vec::new();
    for jobs in ["1", "2"] {
        let out = out_dir(&format!("jobs-{jobs}"));
        let run = dara_trace(
            &["-q", "-o", out.to_str().unwrap(), "--strategy", "pct:3", "--seed", "4", "--runs", "120", "--keep-going", "--jobs", jobs, "--", program.to_str().unwrap()],
            Duration::from_secs(120),
        );
        assert_eq!(run.code, 1, "jobs {jobs}\n{}", run.text());
        runs.push((out, run));
    }
    let bugs = |out: &std::path::Path| {
        let mut dirs: Vec<_> = std::fs::read_dir(out).unwrap().flatten().map(|e| e.file_name().into_string().unwrap()).filter(|n| n.starts_with("bug-")).collect();
        dirs.sort();
        dirs
    };
    let (one, two) = (&runs[0].0, &runs[1].0);
    assert_eq!(bugs(one), bugs(two), "same distinct bugs");
    for bug in bugs(one) {
        let a = trace::read_file(&one.join(&bug).join("trace.bin")).unwrap();
        let b = trace::read_file(&two.join(&bug).join("trace.bin")).unwrap();
        assert_eq!(a.header.execution, b.header.execution, "{bug} found in the same execution");
        assert!(trace::decision_bytes(&a) == trace::decision_bytes(&b), "{bug}: same decisions");
    }
    // Stopping at the first bug also reports the same execution.
    let mut first = Vec::new();
    for jobs in ["1", "2"] {
        let out = out_dir(&format!("jobs-first-{jobs}"));
        let run = dara_trace(
            &["-q", "-o", out.to_str().unwrap(), "--strategy", "random", "--seed", "9", "--runs", "300", "--jobs", jobs, "--", program.to_str().unwrap()],
            Duration::from_secs(120),
        );
        assert_eq!(run.code, 1, "{}", run.text());
        first.push(trace::read_file(&out.join("bug-0001/trace.bin")).unwrap().header.execution);
    }
    assert_eq!(first[0], first[1]);
}

#[test]
fn time_budget_stops_the_search() {
    let program = fixture("demo_ok");
    let out = out_dir("budget");
    let run = dara_trace(&["-o", out.to_str().unwrap(), "--runs", "1000000", "--time-budget", "1", "--", program.to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(run.code, 0, "{}", run.text());
    assert!(run.stderr.contains("time budget spent after"), "{}", run.text());
    assert!(run.wall < Duration::from_secs(20), "took {:?}", run.wall);
    assert!(run.stderr.contains("distinct bugs          0"), "summary table\n{}", run.text());
}

#[test]
fn systematic_strategies_find_bugs_and_verify_correct_twins() {
    let program = fixture("lost_update");
    for strategy in ["dpor", "dfs:preempt=1", "dfs:delay"] {
        let out = out_dir(&format!("systematic-{}", strategy.replace([':', '='], "-")));
        let run = dara_trace(&["-q", "-o", out.to_str().unwrap(), "--strategy", strategy, "--runs", "5000", "--", program.to_str().unwrap()], Duration::from_secs(120));
        assert_eq!(run.code, 1, "{strategy}\n{}", run.text());
        let bug = out.join("bug-0001/trace.bin");
        let replay = dara_replay(&["-q", "--verify", bug.to_str().unwrap()], Duration::from_secs(60));
        assert_eq!(replay.code, 1, "{strategy}\n{}", replay.text());
    }
    // On the correct twin DPOR explores the whole space, and needs far fewer executions than DFS.
    let twin = fixture("lost_update_ok");
    let count = |strategy: &str| {
        let out = out_dir(&format!("verify-{}", strategy.replace([':', '='], "-")));
        let run = dara_trace(&["-o", out.to_str().unwrap(), "--strategy", strategy, "--runs", "20000", "--", twin.to_str().unwrap()], Duration::from_secs(240));
        assert_eq!(run.code, 0, "{strategy}\n{}", run.text());
        // A plain build: the space is explored, but races between scheduling points were out of
        // sight, and dara says so rather than claiming a proof.
        assert!(run.stderr.contains(&format!("search not exhaustive: {strategy} explored all")), "{strategy}\n{}", run.text());
        assert!(!run.stderr.contains("search space exhausted"), "{strategy}\n{}", run.text());
        let line = run.stderr.lines().find(|l| l.starts_with("no bug found in ")).unwrap_or_else(|| panic!("{}", run.text())).to_string();
        line.trim_start_matches("no bug found in ").split(' ').next().unwrap().parse::<u64>().unwrap()
    };
    let (dpor, dfs) = (count("dpor"), count("dfs"));
    assert!(dpor * 10 < dfs, "dpor {dpor} executions vs dfs {dfs}");
}

#[test]
fn sequential_strategies_refuse_parallel_jobs() {
    let program = fixture("lost_update_ok");
    let out = out_dir("dpor-jobs");
    let run = dara_trace(&["-o", out.to_str().unwrap(), "--strategy", "dpor", "--jobs", "2", "--", program.to_str().unwrap()], Duration::from_secs(30));
    assert_eq!(run.code, 2, "{}", run.text());
    assert!(run.stderr.contains("cannot run with --jobs above 1"), "{}", run.text());
}

/// Bug triage: two bugs that both abort are told apart by their assertions, each saved once
/// however often it recurs, each summary names its location, and each replays as itself.
#[test]
fn bugs_are_deduplicated_by_location() {
    let program = private_copy(&fixture("two_bugs"), "two_bugs");
    let out = out_dir("two-bugs");
    let run = dara_trace(
        &["-o", out.to_str().unwrap(), "--strategy", "random", "--seed", "3", "--runs", "100", "--keep-going", "--no-minimize", "--", program.to_str().unwrap()],
        Duration::from_secs(180),
    );
    assert_eq!(run.code, 1, "{}", run.text());
    assert!(run.stderr.contains("2 distinct bug(s) in 100 executions"), "{}", run.text());
    let aborted: u64 = run
        .stderr
        .lines()
        .find_map(|l| l.trim().strip_prefix("ended signal")?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no signal count in the summary\n{}", run.text()));
    assert!(aborted > 2, "the search should have seen each bug more than once (saw {aborted} aborts)");
    let mut seen = Vec::new();
    for (bug, assertion) in [("bug-0001", "Assertion `c != NULL' failed"), ("bug-0002", "Assertion `total == 2' failed")] {
        let summary = std::fs::read_to_string(out.join(bug).join("summary.txt")).unwrap();
        seen.push(summary.lines().next().unwrap_or("").to_string());
        let replay = dara_replay(&["-q", out.join(bug).join("trace.bin").to_str().unwrap()], Duration::from_secs(60));
        assert_eq!(replay.code, 1, "{}", replay.text());
        assert!(replay.stdout.contains(assertion), "{bug} replays as itself\n{}", replay.text());
    }
    assert!(seen.iter().any(|s| s.contains("use_config: Assertion `c != NULL'")), "{seen:?}");
    assert!(seen.iter().any(|s| s.contains("main: Assertion `total == 2'")), "{seen:?}");
    assert!(!out.join("bug-0003").exists());
    assert_no_survivors(&program);
}
