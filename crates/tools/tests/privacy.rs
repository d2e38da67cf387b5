//! Traces are private: written 0600 (bug directories' files too), and `--env-exclude` leaves
//! variables' values out of them while the replay, given the variables again, stays exact.
mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;

const SECRET: &str = "hunter2-do-not-record";

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).permissions().mode() & 0o777
}

fn replay_with(secret: Option<&str>, args: &[&str]) -> Run {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dara-replay"));
    cmd.args(args).env_remove("DARA_SECRET");
    if let Some(value) = secret {
        cmd.env("DARA_SECRET", value);
    }
    run_with_limit(cmd, Duration::from_secs(60))
}

#[test]
fn an_excluded_variable_stays_out_of_the_trace_and_comes_back_from_the_replaying_environment() {
    let out = out_dir("env-exclude");
    let program = private_copy(&fixture("env_secret"), "env_secret");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dara-trace"));
    cmd.args(["-o", out.to_str().unwrap(), "--env-exclude", "DARA_SEC*", "--", program.to_str().unwrap()]).env("DARA_SECRET", SECRET);
    let run = run_with_limit(cmd, Duration::from_secs(60));
    assert_eq!(run.code, 0, "the program saw its secret in the recording\n{}", run.text());
    assert!(run.stdout.contains(&format!("secret of {} bytes", SECRET.len())), "{}", run.text());

    let trace_path = out.join("trace.bin");
    assert_eq!(mode(&trace_path), 0o600, "trace.bin is its owner's only");
    let bytes = std::fs::read(&trace_path).unwrap();
    assert!(!bytes.windows(SECRET.len()).any(|w| w == SECRET.as_bytes()), "the secret's value is in trace.bin");
    let trace = dara_scheduler::trace::read_file(&trace_path).unwrap();
    assert!(trace.header.env.iter().any(|(k, v)| k == "DARA_SECRET" && v.is_empty()), "the variable keeps its place, without its value");
    assert_eq!(trace.header.env_left_out.len(), 1);
    assert_eq!((trace.header.env_left_out[0].name.as_str(), trace.header.env_left_out[0].len), ("DARA_SECRET", SECRET.len()));

    let trace_arg = trace_path.to_str().unwrap();
    let replay = replay_with(Some(SECRET), &["-q", "--verify", trace_arg]);
    assert_eq!(replay.code, 0, "{}", replay.text());
    assert!(replay.stdout.contains("(same as recorded)") && replay.stdout.contains("verify: 2 more executions identical"), "{}", replay.text());

    let unset = replay_with(None, &["-q", trace_arg]);
    assert_eq!(unset.code, 2, "{}", unset.text());
    assert!(unset.stderr.contains("DARA_SECRET") && unset.stderr.contains("--env-exclude"), "the error names the variable and the option\n{}", unset.text());

    // Another value of another length: the program gets it, and dara warns that the stack moves.
    let other = replay_with(Some("x"), &["-q", trace_arg]);
    assert!(other.stderr.contains("DARA_SECRET has 1 bytes here but had"), "{}", other.text());
    assert_no_survivors(&program);
}

#[test]
fn bug_directories_hold_private_files() {
    let out = out_dir("private-bugs");
    let program = fixture("lost_update");
    let run = search(&out, "pct:3", 1, 300, &program);
    assert_eq!(run.code, 1, "{}", run.text());
    for file in ["trace.bin", "bug-0001/trace.bin", "bug-0001/summary.txt"] {
        assert_eq!(mode(&out.join(file)), 0o600, "{file}");
    }
    let minimal = out.join("bug-0001/minimal.bin");
    if minimal.exists() {
        assert_eq!(mode(&minimal), 0o600, "minimal.bin");
    }
}
