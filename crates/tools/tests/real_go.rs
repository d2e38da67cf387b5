//! Go programs nobody here wrote, from Debian, under dara's ptrace agent (docs/ptrace.md): etcd
//! 3.4 (a Raft key-value store: gRPC, bbolt, dozens of goroutines) and its client etcdctl, both
//! dynamically linked Go (cgo) programs.
//!
//! * A bash test script (`tests/fixtures/scripts/etcd_test.sh`) starts etcd, puts and reads keys
//!   with etcdctl and stops etcd: bash runs on the preload, and each Go program it starts goes to
//!   the agent at its exec (the preload recognises Go's build-id note and drops itself from the
//!   new image's `LD_PRELOAD`). Searched without a false bug, replayed exactly.
//! * etcd recorded with etcdctl as its client from outside (the agent splits its listeners as the
//!   preload does: the clients' requests are recorded, and the replay needs nobody outside), and
//!   stopped by a Ctrl-C sent to dara-trace's whole process group, as a terminal sends it: the
//!   agent must not die of it (its tracees would die with it, and the run was reported as
//!   "killed from outside"); etcd shuts down gracefully, and the recording replays.
//! * A three-member etcd cluster with Raft's default timeouts (100 ms heartbeats, 1 s elections,
//!   none edited) started by a test script, searched without a false bug and replayed exactly.
//!
//! * hugo (a static site generator: goroutines rendering pages in parallel, maps everywhere)
//!   builds a small site recorded and searched: the pages are those it builds natively, a
//!   recording takes few steps (only the probes that break spins are armed in coarse mode: with
//!   every probe, its map accesses made 64,000 of 66,000 steps), the replay is exact.
//!
//! The packages come from `scripts/install-deps.sh`.
mod common;

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::real::*;
use common::*;
use dara_abi::Op;
use dara_scheduler::outside::OutsideWhat;

/// Executions of the etcd script's search.
const ETCD_RUNS: u64 = 8;

#[test]
fn etcd_and_etcdctl_in_a_test_script_search_clean_and_replay() {
    installed("etcd", "etcd-server");
    installed("etcdctl", "etcd-client");
    let script = repo_root().join("tests/fixtures/scripts/etcd_test.sh");
    let port = free_ports(2).to_string();
    let (trace, run) = search_clean("etcd-script", ETCD_RUNS, &[], &[script.to_str().unwrap(), &port]);
    // The Go programs ran on the agent: their waits are raw futexes, and none of libc's pthread
    // calls (which the preload would have hooked in them) is a step.
    assert!(steps_with(&trace, Op::FutexWait) > 100, "etcd's goroutines waited under control\n{}", run.text());
    let pthread = [Op::MutexLock, Op::CondWait, Op::CondBroadcast].iter().map(|&op| steps_with(&trace, op)).sum::<usize>();
    assert_eq!(pthread, 0, "a Go program ran on the preload");
    assert!(threads_created(&trace) >= 20, "etcd's and etcdctl's threads were created under control");
    replays_identically(&trace);
    assert!(processes_with(&["etcd", &format!("127.0.0.1:{port}")]).is_empty(), "an etcd survived");
}

#[test]
fn etcd_recorded_under_outside_clients_stops_gracefully_on_a_terminal_s_ctrl_c_and_replays() {
    let etcd = installed("etcd", "etcd-server");
    let etcdctl = installed("etcdctl", "etcd-client");
    let port = free_ports(2);
    let out = out_dir("etcd-ctrl-c");
    let data = out.join("data");
    let setup = format!("rm -rf {}", data.display());
    let log = std::fs::File::create(out.join("run.log")).unwrap();
    let (client, peer) = (format!("http://127.0.0.1:{port}"), format!("http://127.0.0.1:{}", port + 1));
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dara-trace"));
    cmd.args(["-o", out.to_str().unwrap(), "--setup", &setup, "--"]).arg(&etcd);
    cmd.args(["--name", "default", "--data-dir", data.to_str().unwrap(), "--listen-client-urls", &client, "--advertise-client-urls", &client]);
    cmd.args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer, "--initial-cluster", &format!("default={peer}")]);
    // Its own process group, as a shell's job: the Ctrl-C goes to the group.
    cmd.process_group(0).stdin(Stdio::null()).stdout(log.try_clone().unwrap()).stderr(log);
    let mut child = cmd.spawn().unwrap();
    let ready = wait_for_text(&out.join("run.log"), "ready to serve client requests", Duration::from_secs(120));
    let endpoint = format!("127.0.0.1:{port}");
    let ctl = |args: &[&str]| {
        let out = Command::new(&etcdctl).env("ETCDCTL_API", "3").args(["--endpoints", &endpoint, "--dial-timeout=30s", "--command-timeout=60s"]).args(args).output().unwrap();
        (out.status.success(), String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let answers = if ready { [ctl(&["put", "k1", "v1"]), ctl(&["put", "k2", "v2"]), ctl(&["get", "--print-value-only", "k1"])].to_vec() } else { Vec::new() };
    // SAFETY: signalling the process group of our own child.
    unsafe { libc::kill(-(child.id() as i32), libc::SIGINT) };
    let status = wait_at_most(&mut child, Duration::from_secs(60));
    if status.is_none() {
        // SAFETY: as above.
        unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
        let _ = child.wait();
    }
    let text = std::fs::read_to_string(out.join("run.log")).unwrap();
    assert!(ready, "etcd never became ready under dara\n{text}");
    assert_eq!(answers, [(true, "OK".to_string()), (true, "OK".to_string()), (true, "v1".to_string())], "etcdctl from outside\n{text}");
    let status = status.unwrap_or_else(|| panic!("dara-trace did not stop after a Ctrl-C\n{text}"));
    assert!(text.contains("received interrupt signal, shutting down"), "etcd did not take the Ctrl-C\n{text}");
    assert!(text.contains("stopped by SIGINT") && !text.contains("killed from outside"), "{text}");
    assert_eq!(status.code(), Some(0), "{text}");
    let trace = dara_scheduler::trace::read_file(&out.join("trace.bin")).unwrap();
    let connects = trace.outside.iter().filter(|e| matches!(e.what, OutsideWhat::Connect { .. })).count();
    assert!(connects >= 3, "etcdctl's connections were relayed and recorded ({connects})");
    replays_identically(&out.join("trace.bin"));
    assert!(processes_with(&["etcd", &client]).is_empty(), "an etcd survived");
}

/// Executions of the three-member cluster's search (each about 140,000 steps).
const CLUSTER_RUNS: u64 = 2;

#[test]
fn a_three_member_etcd_cluster_with_default_timeouts_searches_clean_and_replays() {
    installed("etcd", "etcd-server");
    installed("etcdctl", "etcd-client");
    let script = repo_root().join("tests/fixtures/scripts/etcd_cluster_test.sh");
    let base = free_ports(6).to_string();
    let (trace, run) = search_clean("etcd-cluster", CLUSTER_RUNS, &[], &[script.to_str().unwrap(), &base]);
    assert!(steps_with(&trace, Op::NetSend) > 100 && steps_with(&trace, Op::NetRecv) > 100, "Raft's messages were steps\n{}", run.text());
    replays_identically(&trace);
    assert!(processes_with(&["etcd", "--initial-cluster", &format!("127.0.0.1:{}", base.parse::<u16>().unwrap() + 1)]).is_empty(), "an etcd survived");
}

#[test]
fn hugo_builds_a_site_recorded_and_searched_as_it_does_natively() {
    let hugo = installed("hugo", "hugo");
    let dir = out_dir("hugo-site");
    let site = dir.join("site");
    std::fs::create_dir_all(site.join("content")).unwrap();
    std::fs::create_dir_all(site.join("layouts/_default")).unwrap();
    std::fs::write(site.join("config.toml"), "baseURL = 'http://example.org/'\ntitle = 'dara'\n").unwrap();
    for layout in ["single", "list"] {
        std::fs::write(site.join(format!("layouts/_default/{layout}.html")), "<html><body><h1>{{ .Title }}</h1>{{ .Content }}</body></html>\n").unwrap();
    }
    for page in 1..=30 {
        std::fs::write(site.join(format!("content/p{page}.md")), format!("---\ntitle: \"page {page}\"\n---\nHello from page {page}.\n")).unwrap();
    }
    let build = |to: &std::path::Path| vec![hugo.to_str().unwrap().to_string(), "-s".into(), site.to_str().unwrap().into(), "--quiet".into(), "-d".into(), to.to_str().unwrap().into()];
    let native = dir.join("native");
    let out = Command::new(&hugo).args(&build(&native)[1..]).output().unwrap();
    assert!(out.status.success(), "native hugo: {}", String::from_utf8_lossy(&out.stderr));

    let recorded = dir.join("recorded");
    let setup = format!("rm -rf {}", recorded.display());
    let command = build(&recorded);
    let command: Vec<&str> = command.iter().map(String::as_str).collect();
    let (trace, _) = record_with("hugo-record", &["--setup", &setup], &command);
    for page in 1..=30 {
        let path = format!("p{page}/index.html");
        assert_eq!(std::fs::read(recorded.join(&path)).ok(), std::fs::read(native.join(&path)).ok(), "{path} as hugo builds it natively");
    }
    let steps = dara_scheduler::trace::read_file(&trace).unwrap().steps.len();
    assert!(steps < 5_000, "a recording arms only the probes that break spins: {steps} steps");
    replays_identically(&trace);

    let searched = dir.join("searched");
    let setup = format!("rm -rf {}", searched.display());
    let command = build(&searched);
    let command: Vec<&str> = command.iter().map(String::as_str).collect();
    let (last, _) = search_clean("hugo-search", 3, &["--setup", &setup], &command);
    assert!(std::fs::read(searched.join("p30/index.html")).is_ok(), "the searched hugo built the site");
    assert!(steps_with(&last, Op::Probe) > 1_000, "a search keeps every probe");
    replays_identically(&last);
}

/// Whether `file` comes to contain `text` within `limit`.
fn wait_for_text(file: &std::path::Path, text: &str, limit: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if std::fs::read_to_string(file).is_ok_and(|t| t.contains(text)) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}
