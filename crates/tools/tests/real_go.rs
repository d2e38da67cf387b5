//! Go programs nobody here wrote, from Debian, under dara's ptrace agent (docs/ptrace.md): etcd
//! 3.4 (a Raft key-value store: gRPC, bbolt, dozens of goroutines) and its client etcdctl, both
//! dynamically linked Go (cgo) programs.
//!
//! * A bash test script (`tests/fixtures/scripts/etcd_test.sh`) starts etcd, puts and reads keys
//!   with etcdctl and stops etcd: bash runs on the preload, and each Go program it starts goes to
//!   the agent at its exec (the preload recognises Go's build-id note and drops itself from the
//!   new image's `LD_PRELOAD`). Searched without a false bug, replayed exactly.
//! * etcd recorded alone and stopped by a Ctrl-C sent to dara-trace's whole process group, as a
//!   terminal sends it: the agent must not die of it (its tracees would die with it, and the run
//!   was reported as "killed from outside"); etcd shuts down gracefully, and the recording
//!   replays.
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
fn etcd_recorded_alone_stops_gracefully_on_a_terminal_s_ctrl_c_and_replays() {
    let etcd = installed("etcd", "etcd-server");
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
    let status = status.unwrap_or_else(|| panic!("dara-trace did not stop after a Ctrl-C\n{text}"));
    assert!(text.contains("received interrupt signal, shutting down"), "etcd did not take the Ctrl-C\n{text}");
    assert!(text.contains("stopped by SIGINT") && !text.contains("killed from outside"), "{text}");
    assert_eq!(status.code(), Some(0), "{text}");
    replays_identically(&out.join("trace.bin"));
    assert!(processes_with(&["etcd", &client]).is_empty(), "an etcd survived");
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
    assert!(steps_with(&last, Op::Yield) > 1_000, "a search keeps every probe");
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
