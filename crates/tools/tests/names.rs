//! Name lookups (docs/outside.md, "Name lookups"): a program's `getaddrinfo` is answered by dara,
//! since glibc's resolver would ask name servers through libc-internal calls no hook sees. A
//! recording asks the machine's resolver and records the answer; its replay gives the recorded
//! answer back even where the name no longer resolves; a search (a closed world) answers what
//! the hosts file lists and stops, in one line, at a name only a name server knows.
//!
//! A name the machine resolves differently at record and replay time is made with a private
//! hosts file in a mount namespace (`unshare -m`, as root: the tests run as root on CI).
mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;
use dara_scheduler::outside::OutsideWhat;

/// A name only the private hosts file knows.
const NAME: &str = "dara-lookup-test";
const ADDRESS: &str = "10.1.2.3";

/// `dara-trace ARGS` in a mount namespace where /etc/hosts also names [`NAME`].
fn dara_trace_with_name(dir: &Path, args: &[&str]) -> Run {
    with_name(dir, env!("CARGO_BIN_EXE_dara-trace"), args)
}

/// `tool ARGS` in a mount namespace where /etc/hosts also names [`NAME`].
fn with_name(dir: &Path, tool: &str, args: &[&str]) -> Run {
    let hosts = dir.join("hosts");
    let system = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
    std::fs::write(&hosts, format!("{ADDRESS} {NAME}\n{system}")).unwrap();
    let mut cmd = Command::new("unshare");
    cmd.args(["-m", "sh", "-c", "mount --bind \"$0\" /etc/hosts && exec \"$@\"", hosts.to_str().unwrap(), tool]);
    cmd.args(args);
    run_with_limit(cmd, Duration::from_secs(120))
}

/// The answers `name_lookup` prints for a recorded lookup of [`NAME`] (`getaddrinfo`, the
/// address named back by `getnameinfo`, then `gethostbyname`) and its two threads' lookups of
/// localhost with port 8080.
fn looked_up(stdout: &str) -> bool {
    stdout.contains(&format!("{NAME}:\n  inet type 1 {ADDRESS} port 0 canonical {NAME}\n"))
        && stdout.contains(&format!("  getnameinfo: {NAME}\n"))
        && stdout.contains(&format!("  gethostbyname: {NAME} {ADDRESS}\n"))
        && stdout.contains("thread 0, localhost:\n  inet")
        && stdout.contains("port 8080")
}

#[test]
fn a_recorded_lookup_replays_from_the_recording_where_the_name_no_longer_resolves() {
    let program = private_copy(&fixture_with("name_lookup", &["-pthread"]), "name-lookup");
    let dir = out_dir("name-lookup");
    let out = dir.join("recorded");
    let run = dara_trace_with_name(&dir, &["-o", out.to_str().unwrap(), "--", program.to_str().unwrap(), NAME, "127.0.0.1"]);
    assert_eq!(run.code, 0, "{}", run.text());
    assert!(looked_up(&run.stdout), "{}", run.text());
    let trace = dara_scheduler::trace::read_file(&out.join("trace.bin")).unwrap();
    let names: Vec<Option<String>> = trace.outside.iter().filter_map(|e| if let OutsideWhat::NameLookup { query, .. } = &e.what { Some(query.node.clone()) } else { None }).collect();
    assert_eq!(names.len(), 8, "eight lookups recorded (two names, each by getaddrinfo, getnameinfo and gethostbyname, and the threads' two): {names:?}");
    let reverse: Vec<&OutsideWhat> = trace.outside.iter().map(|e| &e.what).filter(|w| matches!(w, OutsideWhat::NameLookup { query, .. } if query.address.is_some())).collect();
    assert_eq!(reverse.len(), 2, "two addresses named back: {reverse:?}");
    assert_eq!(names.iter().filter(|n| n.as_deref() == Some("localhost")).count(), 2, "{names:?}");
    assert!(trace.steps.iter().filter(|s| s.choice.op == dara_abi::Op::NameLookup).count() == 8, "each lookup is a step");

    // Here the name is unknown: the replay still answers it as recorded, every time.
    let native = Command::new(&program).arg(NAME).output().unwrap();
    let native = String::from_utf8_lossy(&native.stdout);
    assert!(native.contains(&format!("{NAME}:\n  Name or service not known\n  gethostbyname: h_errno 1")), "{NAME} resolves outside the namespace\n{native}");
    let listing = dara_replay(&[out.join("trace.bin").to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(listing.code, 0, "{}", listing.text());
    assert!(looked_up(&listing.stdout), "{}", listing.text());
    assert!(listing.stdout.contains(&format!("the program looks up \"{NAME}\": {ADDRESS}")), "the listing shows the answer\n{}", listing.stdout);
    let verify = dara_replay(&["-q", "--verify", out.join("trace.bin").to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(verify.code, 0, "{}", verify.text());
    assert!(verify.stdout.contains("verify: 2 more executions identical") && looked_up(&verify.stdout), "{}", verify.text());

    // The same seed records the same decisions.
    let again = dir.join("again");
    let run2 = dara_trace_with_name(&dir, &["-o", again.to_str().unwrap(), "--", program.to_str().unwrap(), NAME, "127.0.0.1"]);
    assert_eq!(run2.code, 0, "{}", run2.text());
    same_decisions(&out.join("trace.bin"), &again.join("trace.bin"));
    assert_no_survivors(&program);
}

#[test]
fn a_search_answers_from_the_hosts_file_and_stops_at_a_name_only_a_name_server_knows() {
    let program = private_copy(&fixture_with("name_lookup", &["-pthread"]), "name-lookup-search");
    let dir = out_dir("name-lookup-search");
    // Listed in the (private) hosts file: answered, in every execution.
    let out = dir.join("listed");
    let run = dara_trace_with_name(&dir, &["-q", "-o", out.to_str().unwrap(), "--runs", "5", "--seed", "3", "--", program.to_str().unwrap(), NAME]);
    assert_eq!(run.code, 0, "{}", run.text());
    assert_eq!(run.stdout.matches(&format!("{NAME}:\n  inet type 1 {ADDRESS}")).count(), 5, "{}", run.text());
    // A closed run's replay answers from the hosts file again (the same one).
    let verify = with_name(&dir, env!("CARGO_BIN_EXE_dara-replay"), &["-q", "--verify", out.join("trace.bin").to_str().unwrap()]);
    assert_eq!(verify.code, 0, "{}", verify.text());
    // Where the hosts file no longer lists it, the replay says why it cannot go on.
    let replay = dara_replay(&["-q", out.join("trace.bin").to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(replay.code, 3, "{}", replay.text());
    assert!(replay.stdout.contains(&format!("the replay ended with uncontrolled: thread 0 getaddrinfo: the program looked up \"{NAME}\"")), "{}", replay.text());

    // Not listed (no namespace): the search stops at the lookup, saying what to do.
    let stopped = dir.join("unlisted");
    let run = dara_trace(&["-q", "-o", stopped.to_str().unwrap(), "--runs", "5", "--", program.to_str().unwrap(), NAME], Duration::from_secs(60));
    assert_eq!(run.code, 2, "{}", run.text());
    let said = format!("the program looked up \"{NAME}\", a name only a name server outside dara knows");
    assert!(run.stderr.contains(&said) && run.stderr.contains("list the name in /etc/hosts"), "{}", run.text());
    assert!(!run.stdout.contains("Name or service not known"), "the program never saw an answer\n{}", run.text());
    assert_no_survivors(&program);
}

/// Python's `socket.getaddrinfo` (glibc's underneath): recorded with the name known, replayed
/// where it is not.
#[test]
fn python_s_getaddrinfo_is_recorded_and_replayed() {
    let dir = out_dir("name-lookup-python");
    let out = dir.join("recorded");
    let script = format!("import socket\nprint(sorted({{a[4][0] for a in socket.getaddrinfo('{NAME}', 80)}}))");
    let run = dara_trace_with_name(&dir, &["-o", out.to_str().unwrap(), "--", "python3", "-c", &script]);
    assert_eq!(run.code, 0, "{}", run.text());
    assert!(run.stdout.contains(&format!("['{ADDRESS}']")), "{}", run.text());
    let verify = dara_replay(&["-q", "--verify", out.join("trace.bin").to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(verify.code, 0, "{}", verify.text());
    assert!(verify.stdout.contains(&format!("['{ADDRESS}']")) && verify.stdout.contains("identical"), "{}", verify.text());
}
