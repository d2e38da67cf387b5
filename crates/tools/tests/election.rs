//! A leader election with timeouts (issue 4): a bash script starts three election nodes
//! (tests/fixtures/election_node.c) in the background on loopback UDP and checks that no term had
//! two leaders. The buggy node counts a vote that arrives after its election timeout moved it on
//! to the next term; only a timeout that fires before a vote arrives shows it, which needs a slow
//! node: a `pause` fault (docs/time.md). The bug is found by
//! a stated search, replays exactly (20 times, `--verify`) with the timer firings and the votes in
//! the listing, the same seed gives the same decisions, the twin that checks a vote's term stays
//! clean over as many executions, and no node survives.
mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use dara_scheduler::trace;

/// Executions searched, for the bug and for its twin, with up to two `pause` faults each: timers
/// fire at their deadlines (docs/time.md), so a vote arrives long before the next election
/// timeout unless a node is slow. Random, seed 15, finds the bug in execution 42. (Fault points
/// are drawn over the first execution's length: since the test script's final SIGCHLD ends its
/// `read` of the nodes' output as a step of its own, seed 1 no longer finds it within 300;
/// seeds 11, 13, 14 and 15 of 2..15 do.)
const RUNS: u64 = 300;
const SEED: u64 = 15;
const SHOWS: &str = "election_test: two leaders in term ";
const CLEAN: &str = "election_test: one leader per term";

fn script(name: &str) -> PathBuf {
    repo_root().join("tests/fixtures/scripts").join(name)
}

/// `dara-trace` over the test script `name` with the node binary `node` on ports from `base`.
fn search_script(out: &Path, name: &str, node: &Path, base: u16) -> Run {
    let (seed, runs, base) = (SEED.to_string(), RUNS.to_string(), base.to_string());
    let test = script(name);
    let args = ["-q", "-o", out.to_str().unwrap(), "--strategy", "random", "--seed", &seed, "--runs", &runs, "--faults", "pause:2", "--", test.to_str().unwrap(), node.to_str().unwrap(), &base];
    dara_trace(&args, Duration::from_secs(120))
}

#[test]
fn two_leaders_after_a_timeout_beats_a_vote_are_found_and_replay() {
    let node = private_copy(&fixture("election_node"), "election-two-leaders");
    let base = free_ports(3);
    let out = out_dir("election-two-leaders");
    let run = search_script(&out, "election_test.sh", &node, base);
    assert_eq!(run.code, 1, "expected two leaders in one term within {RUNS} random executions (seed {SEED})\n{}", run.text());
    assert!(run.stderr.contains("BUG: exited with status 1"), "{}", run.text());
    let shows = run.stdout.lines().find(|l| l.starts_with(SHOWS)).unwrap_or_else(|| panic!("no \"{SHOWS}...\" line\n{}", run.text()));
    let bug = out.join("bug-0001/trace.bin");

    // The script and the three nodes are traced; the listing shows election timeouts firing and
    // the nodes asking for votes and receiving them.
    let t = trace::read_file(&bug).unwrap();
    let starts = t.steps.iter().filter(|s| s.choice.op.name() == "process-start").count();
    assert!(starts >= 4, "script and nodes traced: {starts} process starts");
    let listing = dara_replay(&[bug.to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(listing.code, 1, "{}", listing.text());
    let lines = |op: &str, text: &str| listing.stdout.lines().filter(|l| l.contains(op) && l.contains(text)).count();
    assert_eq!(lines("process-start", "election_node"), 3, "three nodes\n{}", listing.stdout);
    assert!(lines("poll (timeout)", "") >= 2, "election timeouts fire\n{}", listing.stdout);
    assert!(lines(" send ", " RE\"") >= 2, "vote requests are sent\n{}", listing.stdout);
    assert!(lines(" recv ", " VO\"") >= 2, "votes are received\n{}", listing.stdout);

    replays(&bug, shows);

    let again = out_dir("election-two-leaders-again");
    let run2 = search_script(&again, "election_test.sh", &node, base);
    assert_eq!(run2.code, 1, "the same seed did not find two leaders again\n{}", run2.text());
    same_decisions(&bug, &again.join("bug-0001/trace.bin"));
    assert_no_survivors(&node);
}

#[test]
fn a_candidate_that_checks_the_vote_term_never_makes_two_leaders() {
    let node = private_copy(&fixture("election_node_ok"), "election-two-leaders-ok");
    let out = out_dir("election-two-leaders-ok");
    let run = search_script(&out, "election_test_ok.sh", &node, free_ports(3));
    assert_eq!(run.code, 0, "the twin reported a bug\n{}", run.text());
    assert!(run.stderr.contains(&format!("no bug found in {RUNS} executions")), "{}", run.text());
    let verdicts: Vec<&str> = run.stdout.lines().filter(|l| l.starts_with(CLEAN)).collect();
    assert_eq!(verdicts.len() as u64, RUNS, "every execution checked its leaders\n{}", run.text());
    assert!(verdicts.iter().any(|l| !l.ends_with("none)")), "some execution elected a leader\n{}", run.text());
    let verify = dara_replay(&["-q", "--verify", out.join("trace.bin").to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(verify.code, 0, "{}", verify.text());
    assert!(verify.stdout.contains("verify: 2 more executions identical"), "{}", verify.text());
    assert_no_survivors(&node);
}
