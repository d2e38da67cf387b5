//! User properties (docs/properties.md): the C header (`sdk/c/dara.h`), the Rust crate
//! (`sdk/rust`), the Go package (`sdk/go`) and the line protocol from a shell script. A broken
//! ALWAYS/UNREACHABLE/EVENTUALLY is a bug named by its property, found by a search, replayed
//! exactly; goals (SOMETIMES, REACHABLE) are listed with how often they were met, a declared one
//! never reached included; a correct twin breaks nothing.
mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::go::{go_fixture, go_twin};
use common::*;
use serde_json::Value;

fn sdk_include() -> String {
    format!("-I{}", repo_root().join("sdk/c").display())
}

fn prop_bank(ok: bool) -> PathBuf {
    let include = sdk_include();
    let mut flags = vec![include.as_str()];
    if ok {
        flags.push("-DOK");
    }
    fixture_with("prop_bank", &flags)
}

/// A search with `--json`: its exit code and document.
fn search_json(out: &std::path::Path, program: &std::path::Path, runs: u64, seed: u64) -> (i32, Value) {
    let (runs, seed) = (runs.to_string(), seed.to_string());
    let run = dara_trace(
        &["--json", "-o", out.to_str().unwrap(), "--strategy", "pct:3", "--seed", &seed, "--runs", &runs, "--epoch", SEARCH_EPOCH, "--", program.to_str().unwrap()],
        Duration::from_secs(300),
    );
    let doc = serde_json::from_str(run.stdout.trim_end()).unwrap_or_else(|e| panic!("not one JSON document ({e}):\n{}", run.text()));
    (run.code, doc)
}

fn property<'a>(doc: &'a Value, kind: &str, name: &str) -> &'a Value {
    doc["properties"].as_array().unwrap().iter().find(|p| p["kind"] == kind && p["name"] == name).unwrap_or_else(|| panic!("no {kind} {name:?} in {}", doc["properties"]))
}

#[test]
fn a_broken_always_in_c_is_a_bug_named_by_its_property_and_replays() {
    let program = prop_bank(false);
    let out = out_dir("prop-bank");
    let (code, doc) = search_json(&out, &program, 100, 1);
    assert_eq!(code, 1, "{doc}");
    let bug = &doc["bugs"][0];
    assert_eq!(bug["outcome"]["identity"], "property:no overdraft", "{doc}");
    assert_eq!(bug["outcome"]["kind"], "property-failed");
    assert!(bug["outcome"]["summary"].as_str().unwrap().contains("property \"no overdraft\" (always) failed: false at 1 of its 2 evaluations"), "{doc}");
    assert_eq!(property(&doc, "always", "no overdraft")["satisfied"], false);
    assert_eq!(property(&doc, "sometimes", "both customers passed the check")["satisfied"], true, "the bug's own execution met it");
    // Declared by the header at start-up, never reached by any schedule.
    let never = property(&doc, "reachable", "three customers");
    assert_eq!((never["executions"].as_u64(), never["satisfied"].as_bool()), (Some(0), Some(false)), "{doc}");
    assert_eq!(property(&doc, "unreachable", "negative transfer")["satisfied"], true);

    let trace = out.join("bug-0001/trace.bin");
    let replay = dara_replay(&["--verify", trace.to_str().unwrap()], Duration::from_secs(120));
    assert_eq!(replay.code, 1, "{}", replay.text());
    assert!(replay.stdout.contains("property \"no overdraft\" (always) failed") && replay.stdout.contains("verify: 2 more executions identical"), "{}", replay.text());

    let again = out_dir("prop-bank-again");
    let (_, doc2) = search_json(&again, &program, 100, 1);
    assert_eq!(doc2["executions"], doc["executions"]);
    same_decisions(&trace, &again.join("bug-0001/trace.bin"));
}

#[test]
fn the_correct_twin_breaks_nothing_and_its_unmet_goals_are_listed() {
    let out = out_dir("prop-bank-ok");
    let (code, doc) = search_json(&out, &prop_bank(true), 30, 1);
    assert_eq!(code, 0, "{doc}");
    for (kind, name) in [("always", "no overdraft"), ("eventually", "money conserved"), ("unreachable", "negative transfer"), ("reachable", "a transfer refused")] {
        assert_eq!(property(&doc, kind, name)["satisfied"], true, "{kind} {name}: {doc}");
    }
    let both = property(&doc, "sometimes", "both customers passed the check");
    assert_eq!((both["executions"].as_u64(), both["executions_held"].as_u64(), both["satisfied"].as_bool()), (Some(30), Some(0), Some(false)), "{doc}");
    assert_eq!(property(&doc, "reachable", "three customers")["satisfied"], false);
}

#[test]
fn the_line_protocol_works_from_a_shell_script() {
    // `>&$DARA_SDK_FD` is bash's; dash takes only descriptors 0-9 there, so scripts write to
    // /dev/fd/$DARA_SDK_FD, which any shell opens.
    let out = out_dir("prop-shell");
    let script = "echo 'reachable shell started' >>/dev/fd/$DARA_SDK_FD; x=5; [ $x -gt 3 ] && echo 'unreachable x too large' >>/dev/fd/$DARA_SDK_FD; echo 'not the protocol' >>/dev/fd/$DARA_SDK_FD; echo via-dev-stdout >/dev/stdout";
    let run = dara_trace(&["-o", out.to_str().unwrap(), "--closed", "--", "/bin/sh", "-c", script], Duration::from_secs(120));
    assert_eq!(run.code, 1, "{}", run.text());
    assert!(run.stderr.contains("BUG: property \"x too large\" (unreachable) failed: reached (1 times)"), "{}", run.text());
    assert!(run.stderr.contains("reached in 1 of 1 executions (1 times)"), "{}", run.text());
    // dash opens /dev/fd/N and /dev/stdout anew (dara's pipes, reopened through /proc): never a
    // wait for a reader (it was a false deadlock once).
    assert!(run.stdout.contains("via-dev-stdout"), "{}", run.text());
    assert!(run.stderr.contains("1 line(s) on DARA_SDK_FD were not the property protocol") && run.stderr.contains("\"not the protocol\""), "{}", run.text());
    let replay = dara_replay(&["--verify", out.join("bug-0001/trace.bin").to_str().unwrap()], Duration::from_secs(120));
    assert_eq!(replay.code, 1, "{}", replay.text());
}

#[test]
fn a_launcher_that_closes_what_it_inherited_does_not_silence_its_child() {
    // Python's subprocess closes every inherited descriptor but 0-2 (close_fds=True): dara keeps
    // the SDK's descriptor open like its region's, so the child still reports.
    let python = installed("python3", "python3");
    let out = out_dir("prop-closefds");
    let child = "echo 'always 0 child reported' >>/dev/fd/$DARA_SDK_FD";
    let launcher = format!("import subprocess; subprocess.run(['/bin/sh', '-c', {child:?}], close_fds=True, check=True)");
    let run = dara_trace(&["-o", out.to_str().unwrap(), "--closed", "--", python.to_str().unwrap(), "-c", &launcher], Duration::from_secs(120));
    assert_eq!(run.code, 1, "{}", run.text());
    assert!(run.stderr.contains("property \"child reported\" (always) failed"), "{}", run.text());
}

#[test]
fn the_rust_crate_reports_a_lost_update() {
    let rlib = repo_root().join("target/release/libdara_sdk.rlib");
    assert!(rlib.is_file(), "{} is missing: build the workspace first (cargo build --release --workspace)", rlib.display());
    let extern_flag = format!("dara_sdk={}", rlib.display());
    let deps = format!("dependency={}", repo_root().join("target/release/deps").display());
    let program = fixture_with("prop_rust", &["--extern", &extern_flag, "-L", &deps]);
    let out = out_dir("prop-rust");
    let (code, doc) = search_json(&out, &program, 50, 1);
    assert_eq!(code, 1, "{doc}");
    assert_eq!(doc["bugs"][0]["outcome"]["identity"], "property:both increments counted", "{doc}");
    let replay = dara_replay(&["--verify", out.join("bug-0001/trace.bin").to_str().unwrap()], Duration::from_secs(120));
    assert_eq!(replay.code, 1, "{}", replay.text());
    let twin = fixture_with("prop_rust", &["--extern", &extern_flag, "-L", &deps, "--cfg", "ok"]);
    let (code, doc) = search_json(&out_dir("prop-rust-ok"), &twin, 20, 1);
    assert_eq!(code, 0, "{doc}");
    assert_eq!(property(&doc, "always", "both increments counted")["executions"], 20);
}

#[test]
fn the_go_package_reports_a_lost_update_through_the_ptrace_agent() {
    let out = out_dir("prop-go");
    let (code, doc) = search_json(&out, &go_fixture("propcount"), 30, 1);
    assert_eq!(code, 1, "{doc}");
    assert_eq!(doc["bugs"][0]["outcome"]["identity"], "property:both increments counted", "{doc}");
    assert_eq!(property(&doc, "reachable", "worker ran")["satisfied"], true);
    let replay = dara_replay(&["--verify", out.join("bug-0001/trace.bin").to_str().unwrap()], Duration::from_secs(180));
    assert_eq!(replay.code, 1, "{}", replay.text());
    let (code, doc) = search_json(&out_dir("prop-go-ok"), &go_twin("propcount"), 5, 1);
    assert_eq!(code, 0, "{doc}");
    assert_eq!(property(&doc, "eventually", "both workers finished")["satisfied"], true);
}
