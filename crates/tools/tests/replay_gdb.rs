//! `dara-replay --gdb STEP` (issue 18 item 7): a replay paused before a step and served to gdb.
//! gdb, scripted, reads the paused threads' stacks at the decisive step; after it detaches the
//! replay goes on and reproduces the bug as recorded. A process traced by dara's agent cannot
//! take a second tracer: that is a one-line error, exit 2, nothing left running.
mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;

/// The first step of `thread`'s (`t1`, shown as `p0/t1` in several processes) `op` in a replay
/// listing: its step number.
fn step_of(listing: &str, thread: &str, op: &str) -> Option<u64> {
    listing.lines().find_map(|line| {
        let words: Vec<&str> = line.trim_start_matches(">>").split_whitespace().collect();
        (words.len() > 3 && (words[2] == thread || words[2].ends_with(&format!("/{thread}"))) && words[3] == op).then(|| words[0].parse().ok()).flatten()
    })
}

#[test]
fn gdb_reads_the_stacks_before_the_decisive_step_and_the_replay_goes_on() {
    installed("gdb", "gdb");
    installed("gdbserver", "gdbserver");
    let program = private_copy(&fixture("lost_update"), "gdb-lost-update");
    let out = out_dir("gdb-lost-update");
    let run = search(&out, "pct:3", 1, 300, &program);
    assert_eq!(run.code, 1, "{}", run.text());
    let trace = out.join("bug-0001/trace.bin");
    let listing = dara_replay(&[trace.to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(listing.code, 1, "{}", listing.text());
    let step = step_of(&listing.stdout, "t1", "mutex-lock").unwrap_or_else(|| panic!("a mutex-lock of t1 in\n{}", listing.stdout));

    let mut replay = Command::new(env!("CARGO_BIN_EXE_dara-replay"))
        .args(["-q", "--gdb", &step.to_string(), trace.to_str().unwrap()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut said = BufReader::new(replay.stdout.take().unwrap());
    let mut text = String::new();
    let port = loop {
        let mut line = String::new();
        assert!(said.read_line(&mut line).unwrap() > 0, "dara-replay ended before pausing: {text}");
        text.push_str(&line);
        if let Some(rest) = line.split("gdbserver on 127.0.0.1:").nth(1) {
            break rest.split(',').next().unwrap().to_string();
        }
    };
    assert!(text.contains(&format!("paused before step {step} (t1 mutex-lock")), "{text}");
    let gdb = Command::new("gdb")
        .args(["-batch", "-nx", "-ex", &format!("target remote 127.0.0.1:{port}"), "-ex", "thread apply all bt", "-ex", "detach", program.to_str().unwrap()])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stacks = String::from_utf8_lossy(&gdb.stdout).to_string() + &String::from_utf8_lossy(&gdb.stderr);
    // t1 stands in its pthread_mutex_lock, called from the fixture's own code (with its line).
    assert!(stacks.contains("pthread_mutex_lock") && stacks.contains("lost_update.c:"), "gdb sees the paused step's call in the program's source\n{stacks}");
    let status = wait_at_most(&mut replay, Duration::from_secs(120)).expect("the replay ends after gdb detached");
    std::io::Read::read_to_string(&mut said, &mut text).unwrap();
    assert_eq!(status.code(), Some(1), "the replay went on and reproduced the bug\n{text}");
    assert!(text.contains("gdb detached") && text.contains("(same as recorded)"), "{text}");
}

#[test]
fn gdb_on_a_process_the_agent_traces_is_refused_in_one_line() {
    installed("gdbserver", "gdbserver");
    let busybox = installed("busybox", "busybox-static");
    let out = out_dir("gdb-agent");
    let run = dara_trace(&["-q", "--closed", "-o", out.to_str().unwrap(), "--", busybox.to_str().unwrap(), "sh", "-c", "echo one; echo two"], Duration::from_secs(120));
    assert_eq!(run.code, 0, "{}", run.text());
    let trace = out.join("trace.bin");
    let replay = dara_replay(&["-q", "--gdb", "1", trace.to_str().unwrap()], Duration::from_secs(120));
    assert_eq!(replay.code, 2, "{}", replay.text());
    let error = replay.stderr.lines().find(|l| l.starts_with("dara-replay: error:")).unwrap_or_default();
    assert!(error.contains("ptrace agent") && error.contains("--gdb works on programs run through the preload"), "{}", replay.text());
    assert!(processes_with(&[busybox.to_str().unwrap(), "sh", "-c", "echo one; echo two"]).is_empty(), "a busybox survived");
}

#[test]
fn gdb_past_the_last_step_is_a_usage_error() {
    let program = fixture("lost_update_ok");
    let out = out_dir("gdb-past-end");
    let run = dara_trace(&["-q", "--closed", "-o", out.to_str().unwrap(), "--", program.to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(run.code, 0, "{}", run.text());
    let replay = dara_replay(&["--gdb", "100000", out.join("trace.bin").to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(replay.code, 2, "{}", replay.text());
    assert!(replay.stderr.contains("--gdb 100000: the trace has"), "{}", replay.text());
}
