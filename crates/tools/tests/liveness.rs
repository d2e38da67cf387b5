//! Liveness after MaceMC (docs/properties.md, "Liveness"): a livelock of two election nodes
//! (`livelock_election.c`: a split vote retried in the same term) never ends, so the old
//! end-of-execution judgment of `DARA_EVENTUALLY` never sees it fail; the fair random walk after
//! the workload does. The violation is found by a bounded search, named by its property, replayed
//! exactly with its walk, the same for the same seed, and its critical transition is the second
//! node's self-vote. The twin (a new term after a split vote) searches clean, and a walk that
//! recovers ends the run clean. The same for a cluster (`livelock_nodes.c`, two processes on UDP)
//! whose property is a command (`--eventually CMD`) run under control during the walk.
mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use serde_json::Value;

const WALK: &str = "2000";

fn election(ok: bool) -> PathBuf {
    let include = format!("-I{}", repo_root().join("sdk/c").display());
    let mut flags = vec![include.as_str(), "-g"];
    if ok {
        flags.push("-DOK");
    }
    fixture_with("livelock_election", &flags)
}

/// A search with `--json` and the walk's options: its exit code and document.
fn search_json(out: &Path, program: &Path, strategy: &str, runs: u64, seed: u64, options: &[&str]) -> (i32, Value) {
    let (runs, seed) = (runs.to_string(), seed.to_string());
    let mut args = vec!["--json", "-o", out.to_str().unwrap(), "--strategy", strategy, "--seed", &seed, "--runs", &runs, "--epoch", SEARCH_EPOCH];
    if !options.contains(&"--liveness-steps") {
        args.extend(["--liveness-steps", WALK]);
    }
    args.extend_from_slice(options);
    args.extend(["--", program.to_str().unwrap()]);
    let run = dara_trace(&args, Duration::from_secs(600));
    let doc = serde_json::from_str(run.stdout.trim_end()).unwrap_or_else(|e| panic!("not one JSON document ({e}):\n{}", run.text()));
    (run.code, doc)
}

/// The source line of the self-vote's lock.
fn self_vote_line() -> String {
    let src = std::fs::read_to_string(repo_root().join("tests/fixtures/livelock_election.c")).unwrap();
    let n = src.lines().position(|l| l.contains("stand: the self-vote")).unwrap() + 1;
    format!("livelock_election.c:{n} ")
}

#[test]
fn a_livelock_is_a_liveness_violation_replayed_with_its_critical_transition() {
    let program = election(false);
    let out = out_dir("livelock");
    let (code, doc) = search_json(&out, &program, "random", 30, 1, &["--run-for", "2", "--liveness-walks", "10"]);
    assert_eq!(code, 1, "{doc}");
    let bug = &doc["bugs"][0];
    assert_eq!(bug["outcome"]["identity"], "liveness:one leader", "{doc}");
    assert_eq!(bug["outcome"]["kind"], "liveness-violated", "{doc}");
    let summary = bug["outcome"]["summary"].as_str().unwrap();
    assert!(summary.contains("BUG: liveness: \"one leader\" (eventually) never held in 2,000 steps of a fair random walk after the workload"), "{summary}");
    let critical = &bug["critical_transition"];
    assert_eq!((critical["walks"].as_u64(), critical["walk_steps"].as_u64(), critical["property"].as_str()), (Some(10), Some(2000), Some("one leader")), "{doc}");
    let step = critical["step"].as_u64().unwrap();

    // The replay follows the walk step for step, and marks the transition on the second node's
    // self-vote: the second self-vote lock of the listing, by the other thread than the first.
    let trace = out.join("bug-0001/trace.bin");
    let replay = dara_replay(&["--verify", trace.to_str().unwrap()], Duration::from_secs(300));
    assert_eq!(replay.code, 1, "{}", replay.text());
    assert!(replay.stdout.contains("verify: 2 more executions identical"), "{}", replay.text());
    assert!(replay.stdout.contains(&format!("critical transition at step {step}: after it, 10 random walks of 2000 steps never reached \"one leader\"")), "{}", replay.text());
    let line = self_vote_line();
    let votes: Vec<&str> = replay.stdout.lines().filter(|l| l.contains(" mutex-lock ") && l.contains(&line)).take(2).collect();
    assert_eq!(votes.len(), 2, "{}", replay.text());
    let marked = votes[1];
    assert!(marked.starts_with("!!") && marked.split_whitespace().nth(1) == Some(step.to_string().as_str()), "the transition is not the second self-vote:\n{}", replay.text());
    let thread = |l: &str| l.split_whitespace().find(|w| w.starts_with('t') && w[1..].parse::<u32>().is_ok()).map(str::to_string);
    assert_ne!(thread(votes[0]), thread(votes[1]), "{}", replay.text());
    assert_eq!(replay.stdout.lines().filter(|l| l.starts_with("!!")).count(), 1);

    let json = dara_replay(&["--json", trace.to_str().unwrap()], Duration::from_secs(300));
    let replayed: Value = serde_json::from_str(json.stdout.trim_end()).unwrap_or_else(|e| panic!("{e}: {}", json.text()));
    assert_eq!(replayed["critical_transition"]["step"].as_u64(), Some(step), "{replayed}");
    assert_eq!(replayed["verdict"], "reproduced", "{replayed}");

    // The same seed: the same execution, the same decisions (walk included), the same transition.
    let again = out_dir("livelock-again");
    let (_, doc2) = search_json(&again, &program, "random", 30, 1, &["--run-for", "2", "--liveness-walks", "10"]);
    assert_eq!(doc2["executions"], doc["executions"]);
    same_decisions(&trace, &again.join("bug-0001/trace.bin"));
    assert_eq!(doc2["bugs"][0]["critical_transition"], doc["bugs"][0]["critical_transition"]);
}

#[test]
fn without_the_walk_the_livelock_is_only_an_unmet_property_at_the_cut() {
    // The old end-of-execution judgment: unmet when --run-for cut it, with nothing said about
    // whether it could still recover, and no transition.
    let out = out_dir("livelock-no-walk");
    let (code, doc) = search_json(&out, &election(false), "random", 10, 1, &["--run-for", "2", "--liveness-steps", "0"]);
    assert_eq!(code, 1, "{doc}");
    let bug = &doc["bugs"][0];
    assert_eq!((bug["outcome"]["identity"].as_str(), bug["outcome"]["kind"].as_str()), (Some("property:one leader"), Some("property-failed")), "{doc}");
    assert!(bug["critical_transition"].is_null(), "{doc}");
}

#[test]
fn the_twin_searches_clean_and_a_walk_that_recovers_ends_clean() {
    let program = election(true);
    for strategy in ["random", "pct:3"] {
        let out = out_dir(&format!("livelock-ok-{}", strategy.replace(':', "")));
        let (code, doc) = search_json(&out, &program, strategy, 30, 1, &["--run-for", "2"]);
        assert_eq!(code, 0, "{strategy}: {doc}");
    }
    // Cut before any node evaluated the property (it is declared, so it is pending): the walk
    // elects a leader, the run ends clean as recovered, and replays so.
    let out = out_dir("livelock-ok-cut");
    let (code, doc) = search_json(&out, &program, "random", 5, 1, &["--max-steps", "4"]);
    assert_eq!(code, 0, "{doc}");
    assert_eq!(doc["outcomes"]["recovered"].as_u64(), Some(5), "{doc}");
    let trace = out.join("trace.bin");
    let replay = dara_replay(&["--verify", trace.to_str().unwrap()], Duration::from_secs(120));
    assert_eq!(replay.code, 0, "{}", replay.text());
    assert!(replay.stdout.contains("held after") && replay.stdout.contains("verify: 2 more executions identical"), "{}", replay.text());
}

#[test]
fn a_program_that_ends_with_the_property_unmet_is_still_a_property_failure() {
    let out = out_dir("eventually-ends");
    let script = out.join("never.sh");
    write_script(&script, "#!/bin/sh\necho 'declare eventually done' >/dev/fd/$DARA_SDK_FD\necho 'eventually 0 done' >/dev/fd/$DARA_SDK_FD\n");
    let (code, doc) = search_json(&out, &script, "random", 2, 1, &[]);
    assert_eq!(code, 1, "{doc}");
    assert_eq!(doc["bugs"][0]["outcome"]["identity"], "property:done", "{doc}");
}

/// The cluster of two `livelock_nodes` processes (the split vote on loopback UDP) with `--eventually
/// 'test -e DIR/leader'`, in a directory of its own: the config file's path and the property's
/// command.
fn node_cluster(ok: bool) -> (PathBuf, String) {
    let name = if ok { "livelock-nodes-ok" } else { "livelock-nodes" };
    let node = if ok { fixture_with("livelock_nodes", &["-DOK"]) } else { fixture("livelock_nodes") };
    let node = private_copy(&node, name);
    let dir = out_dir(&format!("{name}-config"));
    let (node, data, base) = (node.display().to_string(), dir.display().to_string(), free_ports(2));
    let mut text = format!("workload = [\"{node}\", \"go\", \"{base}\"]\nsetup = \"rm -f {data}/leader\"\n");
    for id in 0..2 {
        text += &format!("\n[[node]]\nname = \"n{id}\"\nstart = [\"{node}\", \"serve\", \"{id}\", \"{base}\", \"{data}\"]\n");
    }
    let config = dir.join("cluster.toml");
    std::fs::write(&config, text).unwrap();
    (config, format!("test -e {data}/leader"))
}

#[test]
fn a_livelocked_cluster_fails_an_eventually_command_and_replays_with_its_critical_transition() {
    let (config, property) = node_cluster(false);
    let search = |out: &Path| -> (i32, Value) {
        let run = dara_trace(
            &["--json", "-o", out.to_str().unwrap(), "--config", config.to_str().unwrap(), "--eventually", &property, "--liveness-steps", "600", "--liveness-walks", "4", "--strategy", "random", "--seed", "1", "--runs", "10"],
            Duration::from_secs(600),
        );
        (run.code, serde_json::from_str(run.stdout.trim_end()).unwrap_or_else(|e| panic!("not one JSON document ({e}):\n{}", run.text())))
    };
    let out = out_dir("livelock-nodes");
    let (code, doc) = search(&out);
    assert_eq!(code, 1, "{doc}");
    let bug = &doc["bugs"][0];
    assert_eq!(bug["outcome"]["identity"], format!("liveness:{property}").as_str(), "{doc}");
    let critical = &bug["critical_transition"];
    assert_eq!((critical["walks"].as_u64(), critical["property"].as_str()), (Some(4), Some(property.as_str())), "{doc}");
    let step = critical["step"].as_u64().unwrap();

    // The command ran under control during the walk (a process of its own, named so), the replay
    // follows the walk step for step, and the transition is the workload's GO to the second node
    // sent before the first node asked for its vote: node 1 then stands before it can grant it.
    let trace = out.join("bug-0001/trace.bin");
    let replay = dara_replay(&["--verify", trace.to_str().unwrap()], Duration::from_secs(300));
    assert_eq!(replay.code, 1, "{}", replay.text());
    assert!(replay.stdout.contains("verify: 2 more executions identical"), "{}", replay.text());
    assert!(replay.stdout.lines().any(|l| l.contains("eventually:") && l.contains("process-start")), "{}", replay.text());
    let marked: Vec<&str> = replay.stdout.lines().filter(|l| l.starts_with("!!")).collect();
    assert_eq!(marked.len(), 1, "{}", replay.text());
    assert!(marked[0].split_whitespace().nth(1) == Some(step.to_string().as_str()) && marked[0].contains("workload:") && marked[0].contains("\"GO\"") && marked[0].contains("e1"), "the transition is not the second GO:\n{}", replay.text());
    let first_ask = replay.stdout.lines().position(|l| l.contains("n0:") && l.contains(" send ")).unwrap();
    let transition = replay.stdout.lines().position(|l| l.starts_with("!!")).unwrap();
    assert!(transition < first_ask, "the second GO was sent before node 0 asked\n{}", replay.text());

    // The same seed: the same decisions, walk included, and the same transition.
    let again = out_dir("livelock-nodes-again");
    let (_, doc2) = search(&again);
    same_decisions(&trace, &again.join("bug-0001/trace.bin"));
    assert_eq!(doc2["bugs"][0]["critical_transition"], doc["bugs"][0]["critical_transition"]);
}

#[test]
fn the_twin_cluster_elects_a_leader_in_every_walk() {
    let (config, property) = node_cluster(true);
    let out = out_dir("livelock-nodes-ok");
    let run = dara_trace(&["--json", "-o", out.to_str().unwrap(), "--config", config.to_str().unwrap(), "--eventually", &property, "--liveness-steps", "600", "--strategy", "random", "--seed", "1", "--runs", "10"], Duration::from_secs(600));
    assert_eq!(run.code, 0, "{}", run.text());
    let doc: Value = serde_json::from_str(run.stdout.trim_end()).unwrap_or_else(|e| panic!("not one JSON document ({e}):\n{}", run.text()));
    assert_eq!(doc["outcomes"]["recovered"].as_u64(), Some(10), "every execution's walk ran the command until it held\n{doc}");
    let trace = out.join("trace.bin");
    let replay = dara_replay(&["--verify", trace.to_str().unwrap()], Duration::from_secs(120));
    assert_eq!(replay.code, 0, "{}", replay.text());
    assert!(replay.stdout.contains("verify: 2 more executions identical"), "{}", replay.text());
    // Without the walk there is nothing to run the command in.
    let refused = dara_trace(&["-o", out.to_str().unwrap(), "--config", config.to_str().unwrap(), "--eventually", &property, "--liveness-steps", "0"], Duration::from_secs(60));
    assert_eq!(refused.code, 2, "{}", refused.text());
    assert!(refused.stderr.contains("--eventually needs the liveness walk"), "{}", refused.text());
}
