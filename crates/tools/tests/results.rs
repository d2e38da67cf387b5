//! Results for machines: `dara-trace --json`, `dara-replay --json` and `--junit FILE` on real
//! searches of fixtures. stdout holds the JSON document alone (the program's output goes to
//! stderr), the document's replay command reproduces the bug it names, and exit codes are the
//! same as without `--json`.
mod common;

use std::time::Duration;

use common::*;
use serde_json::Value;

fn document(run: &Run) -> Value {
    serde_json::from_str(run.stdout.trim_end()).unwrap_or_else(|e| panic!("stdout is not one JSON document ({e}):\n{}", run.text()))
}

fn search_json(out: &std::path::Path, program: &str, runs: &str, junit: &std::path::Path) -> Run {
    let program = fixture(program);
    dara_trace(
        &["--json", "--junit", junit.to_str().unwrap(), "-o", out.to_str().unwrap(), "--strategy", "pct:3", "--seed", "5", "--runs", runs, "--epoch", SEARCH_EPOCH, "--", program.to_str().unwrap()],
        Duration::from_secs(300),
    )
}

#[test]
fn a_search_s_bug_is_one_json_document_whose_replay_command_reproduces_it() {
    let out = out_dir("results-bug");
    let junit = out.join("junit.xml");
    let run = search_json(&out, "demo", "300", &junit);
    assert_eq!(run.code, 1, "{}", run.text());
    let doc = document(&run);
    assert_eq!(doc["tool"], "dara-trace");
    assert_eq!(doc["exit_code"], 1);
    assert_eq!(doc["seed"], 5);
    assert_eq!(doc["end"]["kind"], "completed");
    let bugs = doc["bugs"].as_array().expect("a bug list");
    assert_eq!(bugs.len(), 1, "{doc}");
    let bug = &bugs[0];
    assert_eq!(bug["outcome"]["kind"], "crashed");
    assert_eq!(bug["outcome"]["bug"], true);
    let identity = bug["outcome"]["identity"].as_str().unwrap();
    assert!(identity.starts_with("signal:SIGABRT@") && identity.contains("alice.balance >= 0"), "{identity}");
    assert_eq!(doc["executions"].as_u64().unwrap(), bug["execution"].as_u64().unwrap() + 1, "stops at the first bug");
    // The program's own lines are not on stdout: the document is alone there.
    assert!(run.stderr.contains("alice="), "the program's output goes to stderr:\n{}", run.text());
    assert!(run.stderr.contains("distinct bug"), "dara's own lines go to stderr:\n{}", run.text());

    // The replay command the document gives reproduces the bug, and says so in JSON too.
    let replay = bug["replay"].as_str().unwrap();
    let trace = replay.strip_prefix(&format!("{} ", env!("CARGO_BIN_EXE_dara-replay"))).expect("a dara-replay command, with its path (no dara-replay on PATH)");
    let again = dara_replay(&["--json", "--verify", trace], Duration::from_secs(120));
    assert_eq!(again.code, 1, "{}", again.text());
    let verdict = document(&again);
    assert_eq!(verdict["verdict"], "reproduced");
    assert_eq!(verdict["verified"], true);
    assert_eq!(verdict["outcome"]["identity"], identity);
    assert_eq!(verdict["recorded_steps"], verdict["replayed_steps"]);

    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(xml.contains("tests=\"1\" failures=\"1\" errors=\"0\""), "{xml}");
    assert!(xml.contains("<failure type=\"crashed\""), "{xml}");

    // The same seed gives the same document (but for the time it took).
    let out2 = out_dir("results-bug-again");
    let run2 = search_json(&out2, "demo", "300", &out2.join("junit.xml"));
    let doc2 = document(&run2);
    assert_eq!(doc2["executions"], doc["executions"]);
    assert_eq!(doc2["bugs"][0]["outcome"], bug["outcome"]);
    assert_eq!(doc2["bugs"][0]["random_seed"], bug["random_seed"]);
}

#[test]
fn a_clean_search_is_a_passing_case_and_an_error_is_a_document_too() {
    let out = out_dir("results-clean");
    let junit = out.join("junit.xml");
    let run = search_json(&out, "demo_ok", "10", &junit);
    assert_eq!(run.code, 0, "{}", run.text());
    let doc = document(&run);
    assert_eq!(doc["bugs"].as_array().unwrap().len(), 0);
    assert_eq!(doc["executions"], 10);
    assert_eq!(doc["outcomes"]["exit"], 10, "{doc}");
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(xml.contains("tests=\"1\" failures=\"0\" errors=\"0\""), "{xml}");
    assert!(xml.contains("name=\"no bug in 10 executions (pct:3)\""), "{xml}");

    let missing = dara_trace(&["--json", "--", "/nonexistent/program"], Duration::from_secs(30));
    assert_eq!(missing.code, 2, "{}", missing.text());
    let doc = document(&missing);
    assert_eq!(doc["end"]["kind"], "error");
    assert!(doc["end"]["message"].as_str().unwrap().contains("cannot find program"), "{doc}");

    let damaged = out.join("damaged.bin");
    std::fs::write(&damaged, b"not a trace").unwrap();
    let replay = dara_replay(&["--json", damaged.to_str().unwrap()], Duration::from_secs(30));
    assert_eq!(replay.code, 2, "{}", replay.text());
    let doc = document(&replay);
    assert_eq!(doc["verdict"], "error");
    assert!(doc["error"].as_str().is_some_and(|e| !e.is_empty()), "{doc}");
}

fn dara(args: &[&str]) -> Run {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_dara"));
    cmd.args(args);
    run_with_limit(cmd, Duration::from_secs(60))
}

#[test]
fn a_trace_exports_as_a_shiviz_log_with_consistent_vector_clocks_and_as_json() {
    let out = out_dir("results-export");
    let run = search_json(&out, "demo", "300", &out.join("junit.xml"));
    assert_eq!(run.code, 1, "{}", run.text());
    let trace = out.join("bug-0001/trace.bin");
    let log = out.join("demo.shiviz");
    let export = dara(&["export", "--format", "shiviz", trace.to_str().unwrap(), "-o", log.to_str().unwrap()]);
    assert_eq!(export.code, 0, "{}", export.text());
    let text = std::fs::read_to_string(&log).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("(?<event>.*)\\n(?<host>\\S*) (?<clock>{.*})"), "ShiViz's parsing expression first");
    assert_eq!(lines.next(), Some(""), "then the (empty) execution delimiter");
    let rest: Vec<&str> = lines.collect();
    assert_eq!(rest.len() % 2, 0, "two lines an event:\n{text}");
    // What ShiViz checks: a host's own entry counts its events by one; no entry ever goes back.
    let mut last: std::collections::BTreeMap<String, Value> = Default::default();
    let mut knows_other_thread = false;
    for pair in rest.chunks(2) {
        let (host, clock) = pair[1].split_once(' ').unwrap_or_else(|| panic!("`{}` is not `host {{clock}}`", pair[1]));
        let clock: serde_json::Map<String, Value> = serde_json::from_str(clock).unwrap();
        let own = clock[host].as_u64().unwrap();
        let before = last.get(host).and_then(|c| c[host].as_u64()).unwrap_or(0);
        assert_eq!(own, before + 1, "{host}'s own entry must count its events by one: {}", pair[1]);
        if let Some(Value::Object(prev)) = last.get(host) {
            for (h, n) in prev {
                assert!(clock.get(h).and_then(Value::as_u64).unwrap_or(0) >= n.as_u64().unwrap(), "{host} forgot {h}: {}", pair[1]);
            }
        }
        knows_other_thread |= host == "t2" && clock.contains_key("t1") || host == "t1" && clock.contains_key("t2");
        last.insert(host.to_string(), Value::Object(clock));
    }
    assert!(knows_other_thread, "the two customers' lock on alice orders them:\n{text}");
    assert!(text.contains("outcome: BUG: process 0 killed by SIGABRT"), "{text}");

    let json = dara(&["export", "--format", "json", trace.to_str().unwrap()]);
    assert_eq!(json.code, 0, "{}", json.text());
    let doc = document(&json);
    assert_eq!(doc["outcome"]["kind"], "crashed");
    let steps = doc["steps"].as_array().unwrap();
    assert_eq!(steps[0]["operation"], "process-start");
    assert!(steps.iter().any(|s| s["operation"] == "mutex-lock" && s["object"].as_str().is_some_and(|o| o.starts_with("0x"))), "{doc}");
    let bad = dara(&["export", "--format", "dot", trace.to_str().unwrap()]);
    assert_eq!(bad.code, 2, "{}", bad.text());
}
