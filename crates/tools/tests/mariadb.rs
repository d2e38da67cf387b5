//! Debian's MariaDB 10.11 (docs/real-programs.md): mariadbd recorded with its clients outside
//! dara and stopped by a SIGTERM sent to it from outside, as an operator stops it; and a
//! closed-world test script (tests/fixtures/scripts/mariadb_test.sh: mariadb-install-db, the
//! server, clients inserting at once, SIGTERM) searched clean. What MariaDB needed:
//!
//! * InnoDB asks for io_uring, then Linux native AIO, whose requests run in the kernel: dara
//!   refuses both as a kernel without them does, and InnoDB falls back to its own I/O threads
//!   (before: "uncontrolled ... blocked in the kernel in io_uring_enter", then `io_getevents`);
//! * mariadbd's signal thread takes SIGTERM with `sigwait`: a kill from outside dara is recorded
//!   with that grant (before: the replay diverged at the shutdown);
//! * `my_timer_init` reads the clock in pairs until a millisecond tick falls between the two reads
//!   of one iteration: with every step costing exactly 1 µs it never did for half of all starting
//!   points (20 million clock reads); steps now cost 1 µs on average;
//! * the test script's wait for the server starts clients before the server listens: the first
//!   connect was dialled as to a server outside dara, refused, and every later one was sent to
//!   that refusal too.
mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::real::*;
use common::*;
use dara_scheduler::outside::OutsideWhat;

/// Executions of each search of the test script: about 450,000 steps each (InnoDB takes a mutex
/// for nearly everything it does), 9 s on an idle machine.
const MARIADB_SEARCH_RUNS: u64 = 6;

/// A fresh data directory made by mariadb-install-db (outside dara) in `dir`, kept as `pristine`
/// for the replays' setup to copy.
fn pristine_data(dir: &Path) -> PathBuf {
    let pristine = dir.join("pristine");
    let tmp = dir.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let install = Command::new(installed("mariadb-install-db", "mariadb-server"))
        .args(["--no-defaults", &format!("--datadir={}", pristine.display()), "--user=root", "--auth-root-authentication-method=normal", "--skip-test-db", "--skip-name-resolve"])
        .arg(format!("--tmpdir={}", tmp.display()))
        .output()
        .unwrap();
    assert!(install.status.success(), "mariadb-install-db: {install:?}");
    pristine
}

/// The mariadbd processes serving `port` (not dara-trace, whose command line names them too).
fn mariadbd_processes(port: u16) -> Vec<u32> {
    let comm = |pid: &u32| std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    processes_with(&["mariadbd", &format!("--port={port}")]).into_iter().filter(|p| comm(p).trim() == "mariadbd").collect()
}

/// The mariadb client's answer to `sql` on `port` (tab-separated, no column names).
fn ask(port: u16, sql: &str) -> String {
    let out = Command::new("mariadb").args(["--no-defaults", "-h", "127.0.0.1", "-P", &port.to_string(), "-u", "root", "-N", "-B", "-e", sql]).output().expect("mariadb (run ./scripts/install-deps.sh)");
    assert!(out.status.success(), "{sql}: {out:?}");
    String::from_utf8_lossy(&out.stdout).trim_end().to_string()
}

/// mariadbd recorded under a client outside dara (a table made, rows inserted, read back), then
/// stopped by SIGTERM sent straight to it (not to dara-trace): a clean shutdown, exit 0. The
/// trace holds the clients' connections and the signal, and replays identically from the same
/// data directory (the recording's `--setup` restores it).
#[test]
fn mariadbd_under_outside_clients_stopped_by_an_outside_sigterm_records_and_replays() {
    let mariadbd = installed("mariadbd", "mariadb-server");
    let dir = out_dir("mariadb-record-data");
    let pristine = pristine_data(&dir);
    let data = dir.join("data");
    let setup = format!("rm -rf {d} && cp -a {p} {d}", d = data.display(), p = pristine.display());
    assert!(Command::new("sh").args(["-c", &setup]).status().unwrap().success());
    let port = free_ports(1);
    let out = out_dir("mariadb-record");
    let server = Command::new(env!("CARGO_BIN_EXE_dara-trace"))
        .args(["-q", "-o", out.to_str().unwrap(), "--setup", &setup, "--", mariadbd.to_str().unwrap(), "--no-defaults"])
        .arg(format!("--datadir={}", data.display()))
        .args(["--user=root", &format!("--port={port}"), "--bind-address=127.0.0.1", "--skip-log-bin", "--skip-name-resolve", "--innodb-buffer-pool-size=16M"])
        .arg(format!("--socket={}", dir.join("sock").display()))
        .arg(format!("--pid-file={}", dir.join("pid").display()))
        .arg(format!("--log-error={}", dir.join("server.log").display()))
        .arg(format!("--tmpdir={}", dir.join("tmp").display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut server = Recording(server);
    wait_for_listener(port, Duration::from_secs(120), "mariadbd under dara-trace");
    assert_eq!(ask(port, "create database t; create table t.a(k int primary key, v varchar(40)); insert into t.a select seq, md5(seq) from t.seq_1_to_200"), "");
    assert_eq!(ask(port, "select count(*), sum(k) from t.a"), "200\t20100");
    assert_eq!(ask(port, "select v from t.a where k = 1"), "c4ca4238a0b923820dcc509a6f75849b");
    let log = || std::fs::read_to_string(dir.join("server.log")).unwrap_or_default();
    let servers = mariadbd_processes(port);
    assert_eq!(servers.len(), 1, "one mariadbd: {servers:?}");
    // SAFETY: signalling the server this test started (through dara-trace).
    unsafe { libc::kill(servers[0] as i32, libc::SIGTERM) };
    let status = wait_at_most(&mut server.0, Duration::from_secs(120));
    let mut stderr = String::new();
    std::io::Read::read_to_string(server.0.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.and_then(|s| s.code()), Some(0), "SIGTERM stops mariadbd and dara with it: {stderr}\n{}", log());
    assert!(log().contains("Shutdown complete"), "{}", log());
    assert!(log().contains("native AIO failed") || log().contains("falling back"), "InnoDB was refused kernel AIO and went on: {}", log());

    let trace = out.join("trace.bin");
    let t = dara_scheduler::trace::read_file(&trace).unwrap();
    let connects = t.outside.iter().filter(|e| matches!(e.what, OutsideWhat::Connect { .. })).count();
    assert!(connects >= 3, "every client's connection was recorded: {connects}");
    assert!(t.outside.iter().any(|e| e.what.signal() == Some(libc::SIGTERM)), "the SIGTERM from outside was recorded");
    assert!(threads_created(&trace) >= 5, "InnoDB's and the server's threads ran under control");
    replays_identically(&trace);
    assert!(mariadbd_processes(port).is_empty(), "a mariadbd survived");
}

/// The test script searched twice with the same seed, each execution answering right; the last
/// execution replays identically and the second search made the same decisions.
#[test]
fn mariadb_test_script_searches_clean_and_replays() {
    installed("mariadbd", "mariadb-server");
    installed("mariadb-install-db", "mariadb-server");
    let (last, port) = script_with_data_searched_clean_twice("mariadb", "mariadb_test.sh", MARIADB_SEARCH_RUNS, "mariadb_test: every answer was right");
    assert!(steps_with(&last, dara_abi::Op::NetAccept) >= 5, "the server accepted its clients under control");
    assert!(mariadbd_processes(port).is_empty(), "a mariadbd survived");
}
