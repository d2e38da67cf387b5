//! Real multithreaded programs nobody here wrote, recorded as a user would (`dara-trace -o OUT --
//! CMD`, one run with coarse steps), searched with 20 random executions that must find no bug,
//! and replayed with `--verify`: pigz compressing with four threads, `xz -T 4` (also writing to a
//! non-blocking stdout), `zstd -T4`, `sort
//! --parallel=4`, python3 threads taking turns on the GIL, four threads of one process on a
//! sqlite WAL database (Debian's libsqlite3), memcached with four worker threads under
//! memcslap from outside (and, searched, on libevent's timerfd-based precise timers), and nginx (master and two workers) serving curl, stopped by one Ctrl-C
//! (its master waits in `sigsuspend`, its workers in `epoll_wait`), and searched in a closed-world
//! script that fetches pages with curl and stops it with SIGQUIT; a Java program on Debian's
//! OpenJDK (a thread pool, `synchronized`, a blocking queue, beside the JVM's own compiler and GC
//! threads); GNU make building a small C project with `-j4` (its jobserver learns of finished
//! jobs from SIGCHLD inside `pselect`); Python's multiprocessing (a Pool, a Queue, a Lock:
//! semaphores shared between processes); perl ithreads (a Thread::Queue, shared variables); and
//! three writer processes in one LMDB environment (its process-shared mutexes); openssl's TLS server and a
//! client that verifies a certificate made just before the run (the wall clock starts at the real time); gpg making an RSA key through gpg-agent (libgcrypt, npth); Erlang processes on the BEAM
//! VM's scheduler threads (a gen_server, an ets table, a ring, timers). The first four used to stop with a false "a lock taken without a
//! scheduling point" (issue 14). The programs come from Debian packages that
//! `scripts/install-deps.sh` installs; docs/real-programs.md has the table.
mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::real::*;
use common::*;
use dara_abi::Op;
use dara_scheduler::outside::OutsideWhat;

const PYTHON: &str = "/usr/bin/python3";
const XZ: &[&str] = &["xz"];
/// Executions of the Erlang search: each is 7,000 to 72,000 steps (most of them the BEAM's
/// scheduler threads yielding and locking as they spin for work), about 1.5 s at load 5.
const ERLANG_SEARCH_RUNS: u64 = 10;
/// Numbers sorted by each execution of the sort search.
const SEARCHED_NUMBERS: usize = 300_000;
/// Four threads, blocks small enough to give each work, fast preset, keep the input.
const XZ_ARGS: &[&str] = &["-T", "4", "--block-size=256KiB", "-3", "-k", "-f"];

#[test]
fn pigz_with_four_threads_records_searches_and_replays() {
    let dir = out_dir("pigz-input");
    let input = dir.join("input.txt");
    let original = text(40_000); // about 2.5 MB: 20 of pigz's 128 KiB blocks
    std::fs::write(&input, &original).unwrap();
    let (trace, _) = record("pigz", &["pigz", "-p", "4", "-k", "-f", input.to_str().unwrap()]);
    assert!(threads_created(&trace) >= 4, "pigz -p 4 compressed in threads");
    let unpacked = Command::new("pigz").args(["-d", "-c"]).arg(dir.join("input.txt.gz")).output().unwrap();
    assert!(unpacked.status.success() && unpacked.stdout == original.as_bytes(), "the recorded pigz wrote a faithful .gz");
    replays_identically(&trace);

    // The search compresses a smaller file (4 blocks) 20 times.
    let small = dir.join("small.txt");
    std::fs::write(&small, text(8_000)).unwrap();
    let (last, _) = search_clean("pigz-search", SEARCH_RUNS, &[], &["pigz", "-p", "4", "-k", "-f", small.to_str().unwrap()]);
    assert!(threads_created(&last) >= 2, "the searched pigz compressed in threads");
    replays_identically(&last);
    assert!(processes_with(&["pigz", input.to_str().unwrap()]).is_empty(), "a pigz survived");
    assert!(processes_with(&["pigz", small.to_str().unwrap()]).is_empty(), "a pigz survived");
}

/// `xz -T 4` on a few MB of text cut into 256 KiB blocks, so that its encoder threads share the
/// work; `xz -t` checks what the recording wrote.
#[test]
fn xz_with_four_threads_records_searches_and_replays() {
    let dir = out_dir("xz-input");
    let input = dir.join("input.txt");
    std::fs::write(&input, text(50_000)).unwrap(); // about 3 MB: 12 blocks
    let (trace, _) = record("xz", &[XZ, XZ_ARGS, &[input.to_str().unwrap()]].concat());
    assert!(threads_created(&trace) >= 2, "xz -T 4 compressed in threads");
    let test = Command::new("xz").arg("-t").arg(dir.join("input.txt.xz")).status().unwrap();
    assert!(test.success(), "xz -t: the recorded xz wrote a broken .xz");
    replays_identically(&trace);

    let small = dir.join("small.txt");
    std::fs::write(&small, text(12_000)).unwrap(); // 3 blocks
    let (last, _) = search_clean("xz-search", SEARCH_RUNS, &[], &[XZ, XZ_ARGS, &[small.to_str().unwrap()]].concat());
    assert!(threads_created(&last) >= 2, "the searched xz compressed in threads");
    let test = Command::new("xz").arg("-t").arg(dir.join("small.txt.xz")).status().unwrap();
    assert!(test.success(), "xz -t: the searched xz wrote a broken .xz");
    replays_identically(&last);
    assert!(processes_with(&["xz", dir.to_str().unwrap()]).is_empty(), "an xz survived");
}

/// zstd with four worker threads. It installs a crash handler with `signal` compiled as
/// `__sysv_signal`, which replaced dara's SIGSEGV handler: its first `cpuid` (trapped by dara)
/// crashed every run. The recording writes a frame `zstd -t` accepts; the search is clean.
#[test]
fn zstd_with_four_threads_records_searches_and_replays() {
    let dir = out_dir("zstd-input");
    let input = dir.join("input.txt");
    std::fs::write(&input, text(40_000)).unwrap();
    let zstd = |file: &str| ["zstd", "-T4", "-q", "-f", "-k", file].map(String::from);
    let command = zstd(input.to_str().unwrap());
    let (trace, _) = record("zstd", &command.each_ref().map(String::as_str));
    let test = Command::new("zstd").arg("-t").arg(dir.join("input.txt.zst")).status().unwrap();
    assert!(test.success(), "zstd -t: the recorded zstd wrote a broken frame");
    replays_identically(&trace);

    let small = dir.join("small.txt");
    std::fs::write(&small, text(8_000)).unwrap();
    let command = zstd(small.to_str().unwrap());
    let (last, _) = search_clean("zstd-search", SEARCH_RUNS, &[], &command.each_ref().map(String::as_str));
    replays_identically(&last);
    assert!(processes_with(&["zstd", dir.to_str().unwrap()]).is_empty(), "a zstd survived");
}

/// `xz -T4 -c` writing its output to stdout, which dara drains through a pipe: xz makes stdout
/// non-blocking and, when a write finds the pipe full, waits in `poll` for room. Before, a search
/// stopped with a false "deadlock: thread 0 waits for a ready descriptor" whenever dara looked
/// while its forwarder had not drained the pipe yet. Incompressible input (random letters), so
/// the output fills the pipe many times over.
#[test]
fn xz_writing_to_a_non_blocking_stdout_searches_and_replays() {
    let dir = out_dir("xz-stdout-input");
    let input = dir.join("random.txt");
    let letters = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let text: Vec<u8> = (0..3_000_000u64).map(|i| if i % 77 == 76 { b'\n' } else { letters[(dara_abi::splitmix64(i) % 64) as usize] }).collect();
    std::fs::write(&input, text).unwrap();
    let (last, _) = search_clean("xz-stdout", 5, &[], &["xz", "-T4", "-c", input.to_str().unwrap()]);
    assert!(threads_created(&last) >= 1, "xz -T4 compressed in threads");
    replays_identically(&last);
    assert!(processes_with(&["xz", input.to_str().unwrap()]).is_empty(), "an xz survived");
}

#[test]
fn sort_parallel_records_searches_and_replays() {
    let dir = out_dir("sort-input");
    let input = dir.join("numbers.txt");
    let sorted = dir.join("sorted.txt");
    let mut numbers: Vec<u64> = (0..600_000u64).map(|i| dara_abi::splitmix64(i) % 1_000_000_007).collect();
    std::fs::write(&input, numbers.iter().map(|n| format!("{n}\n")).collect::<String>()).unwrap();
    let (trace, _) = record("sort", &["sort", "--parallel=4", "-S", "100M", "-n", "-o", sorted.to_str().unwrap(), input.to_str().unwrap()]);
    assert!(threads_created(&trace) >= 3, "sort --parallel=4 sorted in threads");
    numbers.sort_unstable();
    let expected: String = numbers.iter().map(|n| format!("{n}\n")).collect();
    assert!(std::fs::read_to_string(&sorted).unwrap() == expected, "the recorded sort sorted");
    replays_identically(&trace);

    let small = dir.join("small.txt");
    // sort gives a thread at least 128 Ki lines: 300,000 lines are sorted by two.
    let unsorted = (0..SEARCHED_NUMBERS as u64).map(|i| dara_abi::splitmix64(i + 1_000_000) % 1_000_000_007);
    std::fs::write(&small, unsorted.map(|n| format!("{n}\n")).collect::<String>()).unwrap();
    let small_sorted = dir.join("small-sorted.txt");
    let (last, _) = search_clean("sort-search", SEARCH_RUNS, &[], &["sort", "--parallel=4", "-S", "100M", "-n", "-o", small_sorted.to_str().unwrap(), small.to_str().unwrap()]);
    assert!(threads_created(&last) >= 1, "the searched sort sorted in threads");
    let lines: Vec<u64> = std::fs::read_to_string(&small_sorted).unwrap().lines().map(|l| l.parse().unwrap()).collect();
    assert!(lines.len() == SEARCHED_NUMBERS && lines.windows(2).all(|w| w[0] <= w[1]), "the searched sort sorted");
    replays_identically(&last);
    assert!(processes_with(&["sort", input.to_str().unwrap()]).is_empty(), "a sort survived");
    assert!(processes_with(&["sort", small.to_str().unwrap()]).is_empty(), "a sort survived");
}

/// Four threads computing on the GIL (its 5 ms timed condition waits hand it over), then a
/// producer and three consumers through a `queue.Queue` whose gets time out
/// (tests/fixtures/python_threads.py).
#[test]
fn python_threads_on_the_gil_record_search_and_replay() {
    // A private copy: the survivor check below must not see another test process running it.
    let script = private_copy(&repo_root().join("tests/fixtures/python_threads.py"), "python-threads");
    let (trace, stdout) = record("python", &[PYTHON, script.to_str().unwrap(), "100000", "500"]);
    let expected = 4 * (0..100_000u64).map(|k| k * k % 7).sum::<u64>();
    assert!(stdout.contains(&format!("sums {expected} {}", (0..500).sum::<u64>())), "{stdout}");
    assert!(threads_created(&trace) >= 8);
    replays_identically(&trace);

    let (last, run) = search_clean("python-search", SEARCH_RUNS, &[], &[PYTHON, script.to_str().unwrap(), "2000", "100"]);
    let expected = 4 * (0..2_000u64).map(|k| k * k % 7).sum::<u64>();
    let line = format!("sums {expected} {}", (0..100).sum::<u64>());
    assert_eq!(run.stdout.matches(&line).count() as u64, SEARCH_RUNS, "every execution summed right\n{}", run.text());
    replays_identically(&last);
    assert!(processes_with(&[PYTHON, script.to_str().unwrap()]).is_empty(), "a python3 survived");
}

/// Four threads, each with its own connection, inserting into one sqlite database in WAL mode
/// (tests/fixtures/sqlite_threads.c): recorded, searched (sqlite's busy waits are sleeps there),
/// replayed; every execution ends with every row there once.
#[test]
fn sqlite_threads_on_one_wal_database_record_search_and_replay() {
    let program = private_copy(&fixture_with("sqlite_threads", &["-lsqlite3"]), "sqlite_threads");
    let db = out_dir("sqlite-db").join("corpus.db");
    let db = db.to_str().unwrap();
    let (trace, stdout) = record("sqlite", &[program.to_str().unwrap(), db]);
    assert!(stdout.contains("sqlite_threads: 160 rows, sums ok"), "{stdout}");
    assert_eq!(threads_created(&trace), 4);
    replays_identically(&trace);

    let (last, run) = search_clean("sqlite-search", SEARCH_RUNS, &[], &[program.to_str().unwrap(), db]);
    assert_eq!(run.stdout.matches("sqlite_threads: 160 rows, sums ok").count() as u64, SEARCH_RUNS, "{}", run.text());
    assert!(steps_with(&last, Op::MutexLock) > 100, "the search went through sqlite's mutexes one by one");
    replays_identically(&last);
    let (again, _) = search_clean("sqlite-search-again", SEARCH_RUNS, &[], &[program.to_str().unwrap(), db]);
    same_decisions(&last, &again);
    assert_no_survivors(&program);
    assert!(dara_shm_files().is_empty(), "{:?}", dara_shm_files());
}

/// memcached with four worker threads, recorded while memcslap's four client threads set and get
/// keys from outside, then stopped with one Ctrl-C to dara, which passes it on: memcached's main
/// thread takes it (its workers block SIGINT) and memcached exits 0, and so does dara.
#[test]
fn memcached_under_memcslap_records_and_replays() {
    let port = free_ports(1).to_string();
    let out = out_dir("memcached");
    let mut server = Recording(
        Command::new(env!("CARGO_BIN_EXE_dara-trace"))
            .args(["-q", "-o", out.to_str().unwrap(), "--", "memcached", "-u", "root", "-t", "4", "-U", "0", "-l", "127.0.0.1", "-p", &port])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    wait_for_listener(port.parse().unwrap(), Duration::from_secs(30), "memcached under dara-trace");
    let server_arg = format!("127.0.0.1:{port}");
    for test in ["set", "get"] {
        let slap = Command::new("memcslap").args(["-s", &server_arg, "-c", "4", "-e", "300", "-t", test]).output().expect("memcslap (run ./scripts/install-deps.sh)");
        let said = format!("{}{}", String::from_utf8_lossy(&slap.stdout), String::from_utf8_lossy(&slap.stderr));
        assert!(slap.status.success() && !said.contains("error") && !said.contains("FAILURE"), "memcslap -t {test}: {said}");
    }
    let (status, stderr) = ctrl_c(&mut server.0, Duration::from_secs(60));
    assert_eq!(status.code(), Some(0), "one Ctrl-C stops memcached, and dara with its exit: {status:?} {stderr}");

    let trace_path = out.join("trace.bin");
    let trace = dara_scheduler::trace::read_file(&trace_path).unwrap();
    let connects = trace.outside.iter().filter(|e| matches!(e.what, OutsideWhat::Connect { .. })).count();
    assert!(connects >= 8, "memcslap's clients were recorded ({connects} connections)");
    assert!(threads_created(&trace_path) >= 4);
    replays_identically(&trace_path);
    assert!(processes_with(&["memcached", &port]).is_empty(), "a memcached survived");
    assert!(dara_shm_files().is_empty(), "{:?}", dara_shm_files());
}

/// memcached in a closed-world test script (tests/fixtures/scripts/memcached_test.sh: bash sets
/// and reads back keys over /dev/tcp, then stops the server with SIGTERM), searched.
#[test]
fn memcached_test_script_searches_clean_and_replays() {
    let port = free_ports(1).to_string();
    let script = repo_root().join("tests/fixtures/scripts/memcached_test.sh");
    let (last, run) = search_clean("memcached-search", SEARCH_RUNS, &[], &[script.to_str().unwrap(), &port]);
    assert_eq!(run.stdout.matches("memcached_test: every answer was right").count() as u64, SEARCH_RUNS, "{}", run.text());
    assert!(threads_created(&last) >= 4, "memcached's worker threads ran under control");
    replays_identically(&last);
    assert!(processes_with(&["memcached", &port]).is_empty(), "a memcached survived");
    assert!(dara_shm_files().is_empty(), "{:?}", dara_shm_files());
}

/// The same script sending each set in two writes (`--split`: the request line, then the data
/// line), so memcached may receive a request in two parts. Searched twice with the same seed: no
/// bug, and the same executions (this used to end in a false "hang" or not, depending on real
/// time, and its traces diverged in replay: docs/real-programs.md).
#[test]
fn memcached_test_script_with_split_requests_searches_the_same_twice() {
    let port = free_ports(1).to_string();
    let script = repo_root().join("tests/fixtures/scripts/memcached_test.sh");
    let command = [script.to_str().unwrap(), "--split", &port];
    let (first, run) = search_clean("memcached-split", SEARCH_RUNS, &[], &command);
    assert_eq!(run.stdout.matches("memcached_test: every answer was right").count() as u64, SEARCH_RUNS, "{}", run.text());
    let (second, _) = search_clean("memcached-split-again", SEARCH_RUNS, &[], &command);
    same_decisions(&first, &second);
    replays_identically(&first);
    assert!(processes_with(&["memcached", &port]).is_empty(), "a memcached survived");
    assert!(dara_shm_files().is_empty(), "{:?}", dara_shm_files());
}

/// The same script with libevent's precise timers (`EVENT_PRECISE_TIMER=1`): memcached's event
/// loops then wait in `epoll_wait` with no timeout and a timerfd in the set for their timers
/// (the 1 s clock event among them), so virtual time moves only through timerfds that dara
/// fires (docs/time.md, "timerfd"). Searched clean; no `epoll_wait` ends by its own timeout, yet
/// one returns at the clock event's second; the last execution replays.
#[test]
fn memcached_on_libevents_precise_timers_searches_clean_on_timerfds() {
    let port = free_ports(1).to_string();
    let script = repo_root().join("tests/fixtures/scripts/memcached_test.sh");
    let command = ["/usr/bin/env", "EVENT_PRECISE_TIMER=1", script.to_str().unwrap(), &port];
    let (last, run) = search_clean("memcached-timerfd", SEARCH_RUNS, &[], &command);
    assert_eq!(run.stdout.matches("memcached_test: every answer was right").count() as u64, SEARCH_RUNS, "{}", run.text());
    let trace = dara_scheduler::trace::read_file(&last).unwrap();
    let waits: Vec<_> = trace.steps.iter().filter(|s| s.choice.op == Op::NetEpollWait).collect();
    assert!(waits.iter().all(|s| s.choice.kind != dara_scheduler::choice::ChoiceKind::Timeout), "an epoll_wait timed out: libevent did not wait on a timerfd");
    assert!(waits.iter().any(|s| s.now_ns >= 1_000_000_000), "no event loop woke at the clock event's second");
    replays_identically(&last);
    assert!(processes_with(&["memcached", &port]).is_empty(), "a memcached survived");
    assert!(dara_shm_files().is_empty(), "{:?}", dara_shm_files());
}

/// Starts `dara-trace -q -o OUT -- command` for a server that will listen on `port`, and waits
/// until it does.
fn start_recording(out: &std::path::Path, command: &[&str], port: &str) -> Recording {
    let server = Recording(Command::new(env!("CARGO_BIN_EXE_dara-trace")).args(["-q", "-o", out.to_str().unwrap(), "--"]).args(command).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap());
    wait_for_listener(port.parse().unwrap(), Duration::from_secs(30), &format!("{} under dara-trace", command[0]));
    server
}

/// nginx in a closed-world test script (tests/fixtures/scripts/nginx_test.sh: a config in a fresh
/// temporary directory, the master and two workers on a free loopback port, curl fetches four
/// pages and a missing one and every body is checked, then SIGQUIT to the master and a wait),
/// searched; the last execution replays.
#[test]
fn nginx_test_script_searches_clean_and_replays() {
    let port = free_ports(1).to_string();
    let script = repo_root().join("tests/fixtures/scripts/nginx_test.sh");
    let (last, run) = search_clean("nginx-search", SEARCH_RUNS, &[], &[script.to_str().unwrap(), &port]);
    assert_eq!(run.stdout.matches("nginx_test: every page was right").count() as u64, SEARCH_RUNS, "{}", run.text());
    assert!(steps_with(&last, Op::SigSuspend) >= 1, "the master waited in sigsuspend under control");
    assert!(steps_with(&last, Op::NetAccept) >= 5, "the workers accepted curl's five connections");
    replays_identically(&last);
    assert!(processes_with(&["nginx", &format!("nginx_test.{port}.")]).is_empty(), "an nginx survived");
    assert!(dara_shm_files().is_empty(), "{:?}", dara_shm_files());
}

#[test]
fn nginx_master_and_workers_under_curl_record_and_replay() {
    use dara_scheduler::ChoiceKind;
    const FETCHES: usize = 20;
    let port = free_ports(1).to_string();
    let out = out_dir("nginx");
    let dir = out.join("nginx");
    std::fs::create_dir_all(dir.join("html")).unwrap();
    std::fs::write(dir.join("html/index.html"), "served under dara\n").unwrap();
    let template = std::fs::read_to_string(repo_root().join("tests/fixtures/nginx.conf.in")).unwrap();
    let conf = dir.join("nginx.conf");
    std::fs::write(&conf, template.replace("@DIR@", dir.to_str().unwrap()).replace("@PORT@", &port)).unwrap();
    let error_log = dir.join("error.log");
    let nginx = ["nginx", "-g", "daemon off;", "-e", error_log.to_str().unwrap(), "-c", conf.to_str().unwrap()];
    let mut server = start_recording(&out, &nginx, &port);
    let url = format!("http://127.0.0.1:{port}/");
    for fetch in 0..FETCHES {
        let curl = Command::new("curl").args(["-s", "-f", "-m", "30", &url]).output().expect("curl (run ./scripts/install-deps.sh)");
        assert!(curl.status.success(), "fetch {fetch}: {curl:?}");
        assert_eq!(String::from_utf8_lossy(&curl.stdout), "served under dara\n", "fetch {fetch}");
    }
    let (status, stderr) = ctrl_c(&mut server.0, Duration::from_secs(60));
    let log = std::fs::read_to_string(&error_log).unwrap_or_default();
    assert_eq!(status.code(), Some(0), "one Ctrl-C stops nginx, and dara with its exit: {status:?} {stderr}\n{log}");
    assert!(log.contains("signal 2 (SIGINT) received") && log.contains("exit"), "nginx saw the Ctrl-C and exited: {log}");

    let trace_path = out.join("trace.bin");
    let trace = dara_scheduler::trace::read_file(&trace_path).unwrap();
    let connects = trace.outside.iter().filter(|e| matches!(e.what, OutsideWhat::Connect { .. })).count();
    assert_eq!(connects, FETCHES + 1, "every fetch was recorded, and the probe that waited for the listener");
    let interrupted = |op: Op| trace.steps.iter().filter(|s| s.choice.kind == ChoiceKind::Interrupt && s.choice.op == op).count();
    // A worker whose epoll_wait timer came due in the same quiet point as the Ctrl-C (a recording
    // keeps real time) takes the signal as it comes back from the timeout instead: at least one
    // wait is ended by it, and nginx stops on the one Ctrl-C either way (asserted above).
    assert!((1..=2).contains(&interrupted(Op::NetEpollWait)), "the Ctrl-C ends the workers' epoll_wait");
    assert!(interrupted(Op::SigSuspend) >= 2, "the Ctrl-C and the workers' SIGCHLD end the master's sigsuspend");
    assert_eq!(trace.steps.iter().filter(|s| s.choice.op == Op::NetListen).count(), 1, "nginx's second listen() splits nothing");
    std::fs::remove_file(dir.join("nginx.pid")).ok(); // nginx removes it; a replay starts afresh
    replays_identically(&trace_path);
    assert!(processes_with(&["nginx", conf.to_str().unwrap()]).is_empty(), "an nginx survived");
    assert!(dara_shm_files().is_empty(), "{:?}", dara_shm_files());
}

/// nginx serving a 4 MiB file twice to curl from outside, with `sendfile off` (non-blocking
/// `writev` loops, most without a post in a recording) and `sendfile on`; each recording is
/// replayed with `--verify`. Before a send moved at most `STREAM_SEND_MOST` bytes to dara's relay,
/// how much each call moved followed the socket's autotuned buffers: with `sendfile off` a fetch
/// took 60 s and curl got 257,024 bytes short, and both replays diverged at the first big send.
#[test]
fn nginx_sends_a_big_file_both_ways_intact_and_replays() {
    const FILE_BYTES: usize = 4 << 20;
    for sendfile in ["off", "on"] {
        let port = free_ports(1).to_string();
        let out = out_dir(&format!("nginx-big-{sendfile}"));
        let dir = out.join("nginx");
        std::fs::create_dir_all(dir.join("html")).unwrap();
        let body = big_body(FILE_BYTES);
        std::fs::write(dir.join("html/big.bin"), &body).unwrap();
        let template = std::fs::read_to_string(repo_root().join("tests/fixtures/nginx.conf.in")).unwrap();
        let conf = dir.join("nginx.conf");
        let text = template.replace("@DIR@", dir.to_str().unwrap()).replace("@PORT@", &port).replace("access_log off;", &format!("access_log off; sendfile {sendfile};"));
        std::fs::write(&conf, text).unwrap();
        let error_log = dir.join("error.log");
        let nginx = ["nginx", "-g", "daemon off;", "-e", error_log.to_str().unwrap(), "-c", conf.to_str().unwrap()];
        let mut server = start_recording(&out, &nginx, &port);
        fetch_intact(&format!("http://127.0.0.1:{port}/big.bin"), &out, 2, &body, &format!("sendfile {sendfile}"));
        let (status, stderr) = ctrl_c(&mut server.0, Duration::from_secs(60));
        assert_eq!(status.code(), Some(0), "sendfile {sendfile}: {status:?} {stderr}");
        std::fs::remove_file(dir.join("nginx.pid")).ok();
        replays_identically(&out.join("trace.bin"));
        assert!(processes_with(&["nginx", conf.to_str().unwrap()]).is_empty(), "an nginx survived");
    }
}

/// A Java program on the JVM: its thread pool, monitors and blocking queue, and the JVM's own
/// threads (compilers, GC, signal dispatcher), whose SIGSEGV handler blocks every signal and
/// makes system calls (it stopped at step 25 before dara kept SIGSYS out of that mask).
#[test]
fn java_threads_record_search_and_replay_on_the_jvm() {
    let classes = out_dir("java-classes");
    let source = repo_root().join("tests/fixtures/java/Workers.java");
    let javac = Command::new("javac").arg("-d").arg(&classes).arg(&source).status().unwrap();
    assert!(javac.success(), "javac failed on {}", source.display());
    // No /tmp/hsperfdata_<user>/<pid> file: under dara every JVM is pid 2 of its namespace, so
    // JVMs under two daras at once (two test suites) wrote the same file and a replay diverged.
    let java = ["java", "-XX:-UsePerfData", "-cp", classes.to_str().unwrap(), "Workers"];
    const ANSWER: &str = "pool 499500 counter 4000 queue 5050";
    let (trace, printed) = record("java", &java);
    assert!(printed.contains(ANSWER), "{printed}");
    assert!(threads_created(&trace) >= 9, "the JVM's threads and the program's four workers");
    replays_identically(&trace);
    let (last, run) = search_clean("java-search", SEARCH_RUNS, &[], &java);
    assert_eq!(run.stdout.matches(ANSWER).count(), SEARCH_RUNS as usize, "{}", run.text());
    replays_identically(&last);
    assert!(processes_with(&["java", classes.to_str().unwrap()]).is_empty(), "a JVM survived");
}

/// Erlang/OTP's BEAM VM (Debian's erlang-base) running tests/fixtures/erlang/workers.erl: eight
/// processes depositing into a gen_server by call and cast and updating a public ets table, a
/// token passed around a ring of processes, and timers (`receive after`, `erlang:send_after`,
/// `timer:sleep`), all on the VM's scheduler threads (one for each of the four CPUs dara shows) beside its
/// dirty schedulers, aux and poll threads and the `erl_child_setup` process. Compiled with erlc
/// outside dara; recorded, searched with [`ERLANG_SEARCH_RUNS`] executions that all print the
/// right answer, searched again with the same decisions, and replayed.
#[test]
fn erlang_processes_on_the_beam_record_search_and_replay() {
    installed("erlc", "erlang-base");
    let beams = out_dir("erlang-beams");
    let source = repo_root().join("tests/fixtures/erlang/workers.erl");
    let erlc = Command::new("erlc").arg("-o").arg(&beams).arg(&source).output().unwrap();
    assert!(erlc.status.success(), "erlc failed on {}: {}", source.display(), String::from_utf8_lossy(&erlc.stderr));
    let erl = ["erl", "-noshell", "-pa", beams.to_str().unwrap(), "-run", "workers", "main", "5"];
    const ANSWER: &str = "workers: bank 720 ets 80 rows 80 ring 30 timers 8";
    let (trace, printed) = record("erlang", &erl);
    assert!(printed.contains(ANSWER), "{printed}");
    assert!(threads_created(&trace) >= 8, "the VM's scheduler and helper threads ran under control");
    replays_identically(&trace);
    let (last, run) = search_clean("erlang-search", ERLANG_SEARCH_RUNS, &[], &erl);
    assert_eq!(run.stdout.matches(ANSWER).count() as u64, ERLANG_SEARCH_RUNS, "{}", run.text());
    replays_identically(&last);
    let (again, _) = search_clean("erlang-search-again", ERLANG_SEARCH_RUNS, &[], &erl);
    same_decisions(&last, &again);
    assert!(processes_with(&[beams.to_str().unwrap()]).is_empty(), "a BEAM VM survived");
    assert!(dara_shm_files().is_empty(), "{:?}", dara_shm_files());
}

/// `make -j4` building eight C files with the system compiler: make, its shells, cc, cc1, as and
/// ld, under one schedule. make waits for jobs in `pselect` with SIGCHLD let through only there
/// (before, a false "deadlock: thread 0 waits for a ready descriptor"). The program's wall clock
/// starts at the real time, so make finds no file "in the future" (before: a fixed 2024 epoch,
/// and "Clock skew detected" on every run).
#[test]
fn make_j4_builds_records_searches_and_replays() {
    let project = out_dir("make-project");
    let mut objects = String::new();
    for i in 1..=8 {
        std::fs::write(project.join(format!("f{i}.c")), format!("int f{i}(int x) {{ return x * {i}; }}\n")).unwrap();
        objects.push_str(&format!(" f{i}.o"));
    }
    std::fs::write(project.join("main.c"), "int f1(int);\nint main(void) { return f1(0); }\n").unwrap();
    let makefile = format!("prog: main.o{objects}\n\tcc -o $@ $^\n%.o: %.c\n\tcc -c -O1 $< -o $@\nclean:\n\trm -f prog *.o\n");
    std::fs::write(project.join("Makefile"), makefile).unwrap();
    let dir = project.to_str().unwrap();
    let clean = format!("make -s -C {dir} clean");
    let make = ["make", "-s", "-j4", "-C", dir];
    let (trace, said) = record_with("make", &["--setup", &clean], &make);
    assert!(project.join("prog").exists(), "the recorded make linked prog");
    assert!(!said.contains("Clock skew") && !said.contains("in the future"), "make saw its files in the future\n{said}");
    assert!(steps_with(&trace, Op::ProcessExec) >= 9, "make ran the compiler for every file");
    replays_identically(&trace);
    let (last, run) = search_clean("make-search", SEARCH_RUNS, &["--setup", &clean], &make);
    assert!(!run.stderr.contains("Clock skew"), "{}", run.text());
    replays_identically(&last);
    assert!(processes_with(&["make", dir]).is_empty(), "a make survived");
}

/// Python's multiprocessing: a Pool, a Queue and a Lock, each built on sem_open semaphores that
/// several processes wait on and post (before, keyed per process, a false deadlock at the Pool's
/// end and in the Queue's feeder threads).
#[test]
fn python_multiprocessing_records_searches_and_replays() {
    // A private copy: the survivor check below must not see another test process running it.
    let script = private_copy(&repo_root().join("tests/fixtures/python/mp_workers.py"), "python-mp");
    let python = [PYTHON, script.to_str().unwrap()];
    const ANSWER: &str = "pool 285 queue [0, 1, 2] counter 30";
    let (trace, printed) = record("python-mp", &python);
    assert!(printed.contains(ANSWER), "{printed}");
    assert!(steps_with(&trace, Op::ProcessFork) >= 8, "two pool workers and six children");
    replays_identically(&trace);
    let (last, run) = search_clean("python-mp-search", SEARCH_RUNS, &[], &python);
    assert_eq!(run.stdout.matches(ANSWER).count(), SEARCH_RUNS as usize, "{}", run.text());
    replays_identically(&last);
    assert!(processes_with(&[PYTHON, script.to_str().unwrap()]).is_empty(), "a python survived");
}

/// Three writer processes and a reader in one LMDB environment (tests/fixtures/lmdb_writers.c on
/// Debian's liblmdb): LMDB serialises writers with a process-shared robust pthread mutex in its
/// lock file, which the parent maps at another address than the writers do. Before, keyed per
/// process, a second writer was granted the mutex another process held and blocked in the kernel
/// on it (the run stopped as uncontrolled blocking). Recorded, searched, replayed; `mdb_stat`
/// (lmdb-utils) then reads the environment the last replay left.
#[test]
fn lmdb_writer_processes_record_search_and_replay() {
    let program = private_copy(&fixture_with("lmdb_writers", &["-llmdb"]), "lmdb_writers");
    let env = out_dir("lmdb-env");
    let command = [program.to_str().unwrap(), env.to_str().unwrap()];
    const ANSWER: &str = "lmdb_writers: counter 1+3*4, 13 keys";
    let (trace, stdout) = record("lmdb", &command);
    assert!(stdout.contains(ANSWER), "{stdout}");
    assert_eq!(steps_with(&trace, Op::ProcessFork), 3);
    replays_identically(&trace);

    let (last, run) = search_clean("lmdb-search", SEARCH_RUNS, &[], &command);
    assert_eq!(run.stdout.matches(ANSWER).count() as u64, SEARCH_RUNS, "{}", run.text());
    let t = dara_scheduler::trace::read_file(&last).unwrap();
    let lockers: std::collections::BTreeSet<u32> = t.steps.iter().filter(|s| s.choice.op == Op::MutexLock).map(|s| s.choice.thread).collect();
    assert!(lockers.len() >= 3, "every writer took the writers' mutex under control: {lockers:?}");
    replays_identically(&last);
    let (again, _) = search_clean("lmdb-search-again", SEARCH_RUNS, &[], &command);
    same_decisions(&last, &again);

    let stat = Command::new("mdb_stat").arg(&env).output().expect("mdb_stat (lmdb-utils) runs: scripts/install-deps.sh installs it");
    let stat = String::from_utf8_lossy(&stat.stdout);
    assert!(stat.contains("Entries: 13"), "{stat}");
    assert_no_survivors(&program);
}

/// Perl ithreads: a Thread::Queue and a shared total under lock(). Perl reads its hash seed from
/// /dev/urandom through glibc's fortified `__open64_2`, which dara did not serve: every replay
/// had another seed, other heap addresses and diverged (at step 121).
#[test]
fn perl_threads_record_search_and_replay() {
    // A private copy: the survivor check below must not see another test process running it.
    let script = private_copy(&repo_root().join("tests/fixtures/perl/queue_threads.pl"), "perl-threads");
    let perl = ["perl", script.to_str().unwrap()];
    let (trace, printed) = record("perl", &perl);
    assert!(printed.contains("sum 5050 keys "), "{printed}");
    assert!(threads_created(&trace) >= 3, "perl's three worker threads");
    replays_identically(&trace);
    let (last, run) = search_clean("perl-search", SEARCH_RUNS, &[], &perl);
    assert_eq!(run.stdout.matches("sum 5050 keys ").count(), SEARCH_RUNS as usize, "{}", run.text());
    replays_identically(&last);
    assert!(processes_with(&["perl", script.to_str().unwrap()]).is_empty(), "a perl survived");
}

/// git clone over git's own protocol between processes (`--no-local`: clone, sh, upload-pack,
/// pack-objects with threads, index-pack with threads, rev-list): pipes that fill up (a pack
/// written 64 KiB at a time) and a child whose exec is announced by end-of-file on a
/// close-on-exec pipe. Before: "uncontrolled ... blocked in the kernel in write(1, ..., 0xffeb)",
/// then a false deadlock on the exec's pipe.
#[test]
fn git_clone_over_its_pack_protocol_records_searches_and_replays() {
    let source = out_dir("git-source");
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git").args(["-c", "user.name=dara", "-c", "user.email=dara@localhost", "-c", "init.defaultBranch=main"]).args(args).current_dir(&source).output().unwrap();
        assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    git(&["init", "-q"]);
    // Incompressible enough that the pack is several hundred KiB: more than a pipe holds.
    let mut x: u64 = 7;
    for commit in 0..3 {
        for file in 0..4 {
            let text: String = (0..40_000).map(|_| { x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407); char::from(b'a' + (x >> 59) as u8 % 26) }).collect();
            std::fs::write(source.join(format!("f{file}.txt")), text).unwrap();
        }
        git(&["add", "."]);
        git(&["commit", "-q", "-m", &format!("commit {commit}")]);
    }
    let head = git(&["rev-parse", "HEAD"]);
    let dest = out_dir("git-dest").join("clone");
    let (src, dst) = (source.to_str().unwrap(), dest.to_str().unwrap());
    let setup = format!("rm -rf {dst}");
    let clone = ["git", "clone", "-q", "--no-local", src, dst];
    let cloned_head = || {
        let out = std::process::Command::new("git").args(["-C", dst, "rev-parse", "HEAD"]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let (trace, _) = record_with("git-clone", &["--setup", &setup], &clone);
    assert_eq!(cloned_head(), head, "the recorded clone has the source's head");
    assert!(steps_with(&trace, Op::ProcessExec) >= 3, "git ran its helpers as processes");
    replays_identically(&trace);
    let (last, _) = search_clean("git-clone-search", SEARCH_RUNS, &["--setup", &setup], &clone);
    assert_eq!(cloned_head(), head, "the searched clone has the source's head");
    replays_identically(&last);
    assert!(processes_with(&["git", src]).is_empty(), "a git survived");
}

/// mosquitto (an MQTT broker listening on 127.0.0.1 and ::1 at once) in a closed-world script:
/// a subscriber over IPv6, three QoS 1 publishes over both families. Before: "loopback delivery
/// to endpoint eN did not arrive within 2000 ms" (a connection made to [::1] was waited for on
/// the IPv4 listener of the same port).
#[test]
fn mosquitto_test_script_searches_clean_and_replays() {
    let port = free_ports(1).to_string();
    let script = repo_root().join("tests/fixtures/scripts/mosquitto_test.sh");
    let (last, run) = search_clean("mosquitto-search", SEARCH_RUNS, &[], &[script.to_str().unwrap(), &port]);
    assert_eq!(run.stdout.matches("mosquitto_test: the subscriber got every message").count() as u64, SEARCH_RUNS, "{}", run.text());
    replays_identically(&last);
    assert!(processes_with(&["mosquitto", "-p", &port]).is_empty(), "a mosquitto survived");
}

/// mosquitto recorded with its clients outside dara, over both families, stopped by one Ctrl-C.
#[test]
fn mosquitto_under_outside_clients_records_and_replays() {
    let port = free_ports(1).to_string();
    let out = out_dir("mosquitto");
    let mut broker = start_recording(&out, &["mosquitto", "-p", &port], &port);
    // mosquitto opens its IPv6 listener after the IPv4 one that start_recording waited for.
    wait_for_listener_on("::1", port.parse().unwrap(), Duration::from_secs(30), "mosquitto's IPv6 listener");
    // With -d (and its stdout line-buffered: into a pipe, stdio would hold the lines until the
    // first message) the subscriber prints its protocol exchange as it goes: publish once its
    // SUBACK shows. A fixed nap before publishing lost the first message on a loaded machine, and
    // the subscriber then waited out its -W for a third message that never came.
    let mut sub = Command::new("stdbuf").args(["-oL", "mosquitto_sub", "-d", "-h", "::1", "-p", &port, "-t", "test/#", "-C", "3", "-W", "60"]).stdout(Stdio::piped()).spawn().expect("mosquitto_sub (run ./scripts/install-deps.sh)");
    let mut said = std::io::BufReader::new(sub.stdout.take().unwrap());
    let mut text = String::new();
    while !text.contains("received SUBACK") {
        let read = std::io::BufRead::read_line(&mut said, &mut text).unwrap();
        assert!(read > 0, "the subscriber ended before its subscription was in place: {text}");
    }
    let publish = |host: &str, n: u32| {
        let status = Command::new("mosquitto_pub").args(["-h", host, "-p", &port, "-t", &format!("test/{n}"), "-m", &format!("message {n}"), "-q", "1"]).status().unwrap();
        assert!(status.success(), "publish {n} over {host}");
    };
    publish("127.0.0.1", 1);
    publish("::1", 2);
    publish("127.0.0.1", 3);
    let got = wait_at_most(&mut sub, Duration::from_secs(60)).expect("the subscriber got three messages");
    std::io::Read::read_to_string(&mut said, &mut text).unwrap();
    assert!(got.success(), "{text}");
    let messages: Vec<&str> = text.lines().filter(|l| l.starts_with("message ")).collect();
    assert_eq!(messages, ["message 1", "message 2", "message 3"], "the subscriber got every message, in order: {text}");
    let (status, stderr) = ctrl_c(&mut broker.0, Duration::from_secs(60));
    assert_eq!(status.code(), Some(0), "one Ctrl-C stops mosquitto, and dara with its exit: {status:?} {stderr}");
    replays_identically(&out.join("trace.bin"));
    assert!(processes_with(&["mosquitto", "-p", &port]).is_empty(), "a mosquitto survived");
}

/// dnsmasq (Debian's dnsmasq-base) as a DNS server in a closed-world test script
/// (tests/fixtures/scripts/dnsmasq_test.sh: names from a hosts file asked with dig over UDP and
/// TCP, a missing one, SIGTERM), searched; the last execution replays. Worked unchanged when
/// first tried (2026-11-29).
#[test]
fn dnsmasq_test_script_searches_clean_and_replays() {
    let port = free_ports(1).to_string();
    let script = repo_root().join("tests/fixtures/scripts/dnsmasq_test.sh");
    let (last, run) = search_clean("dnsmasq-search", SEARCH_RUNS, &[], &[script.to_str().unwrap(), &port]);
    assert_eq!(run.stdout.matches("dnsmasq_test: every answer was right").count() as u64, SEARCH_RUNS, "{}", run.text());
    assert!(steps_with(&last, Op::NetAccept) >= 1, "dnsmasq accepted dig's TCP query under control");
    replays_identically(&last);
    assert!(processes_with(&["dnsmasq", &format!("dnsmasq_test.{port}.")]).is_empty(), "a dnsmasq survived");
}

/// dnsmasq recorded with dig outside dara, over UDP (dara relays each outside sender's datagrams
/// through a socket of its own) and TCP, then stopped with SIGTERM sent to dnsmasq itself, as a
/// service manager stops it (in the foreground it ignores SIGINT, natively too). The replay
/// answers the same queries with nobody outside.
#[test]
fn dnsmasq_under_outside_dig_records_and_replays() {
    let port = free_ports(1).to_string();
    let out = out_dir("dnsmasq");
    let hosts = out.join("hosts");
    std::fs::write(&hosts, "10.1.2.3 alpha.test\n10.1.2.4 beta.test\n").unwrap();
    let hosts_arg = format!("--addn-hosts={}", hosts.display());
    let command = ["dnsmasq", "-k", "--no-resolv", "--no-hosts", &hosts_arg, "-p", &port, "--listen-address=127.0.0.1", "--bind-interfaces", "--user=root", "--pid-file="];
    let mut server = start_recording(&out.join("rec"), &command, &port);
    for (name, address, over) in [("alpha.test", "10.1.2.3", "+notcp"), ("beta.test", "10.1.2.4", "+tcp"), ("alpha.test", "10.1.2.3", "+notcp")] {
        let dig = Command::new("dig").args(["+short", "+time=10", "+tries=1", over, name, "@127.0.0.1", "-p", &port]).output().expect("dig (run ./scripts/install-deps.sh)");
        assert_eq!(String::from_utf8_lossy(&dig.stdout).trim(), address, "{name} over {over}: {}", String::from_utf8_lossy(&dig.stderr));
    }
    // The server itself: a process named dnsmasq whose parent is not one (dnsmasq forks a child
    // per TCP connection; dara-trace's own command line names dnsmasq too).
    let comm = |pid: u32| std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default().trim().to_string();
    let parent = |pid: u32| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok().and_then(|s| s.rsplit(')').next()?.split_whitespace().nth(1)?.parse::<u32>().ok()).unwrap_or(0);
    let dnsmasq: Vec<u32> = processes_with(&["dnsmasq", "-p", &port]).into_iter().filter(|&p| comm(p) == "dnsmasq" && comm(parent(p)) != "dnsmasq").collect();
    assert_eq!(dnsmasq.len(), 1, "one dnsmasq server runs: {dnsmasq:?}");
    // SAFETY: signalling the server's process, as `kill` from a shell would.
    unsafe { libc::kill(dnsmasq[0] as i32, libc::SIGTERM) };
    let status = wait_at_most(&mut server.0, Duration::from_secs(60)).expect("dara-trace ends with dnsmasq");
    assert_eq!(status.code(), Some(0), "dnsmasq's SIGTERM exit is clean: {status:?}");
    replays_identically(&out.join("rec/trace.bin"));
    assert!(processes_with(&["dnsmasq", "-p", &port]).is_empty(), "a dnsmasq survived");
}

/// iperf3 (Debian's) as a server recorded under its own client from outside, a one-second TCP
/// test at 40 Mbit/s and a one-second UDP test at 20 Mbit/s (`-1`: one test, then it exits). The
/// server measures each test on its clock, which must come out near the second it took (a
/// recorded server's clock keeps up with real time once a client has talked: at full speed it
/// reported 423 MB received in 0.00 s before 2026-11-29; `outside.rs` tests that alone), and the
/// UDP test works through dara's relay of each outside sender (before, iperf3's IPv6 socket
/// answered the v4-mapped client straight, past dara, and the test failed). Both replay with
/// nobody outside.
#[test]
fn iperf3_tcp_and_udp_tests_from_outside_record_and_replay() {
    // Both at a set rate (-b): the recording holds every byte the client sends, and its replays
    // feed them all again (unbounded, a TCP test moved 735 MB in the second, and the test's three
    // replays took over 300 s on an idle machine).
    for (mode, extra) in [("tcp", &["-b", "40M"][..]), ("udp", &["-u", "-b", "20M"][..])] {
        let port = free_ports(1).to_string();
        let out = out_dir(&format!("iperf3-{mode}"));
        // Not `start_recording`: its probe connection would be the one test iperf3 -1 serves.
        let mut server = Recording(Command::new(env!("CARGO_BIN_EXE_dara-trace")).args(["-q", "-o", out.to_str().unwrap(), "--", "iperf3", "-s", "-p", &port, "-1"]).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap());
        let started = std::time::Instant::now();
        while !tcp_listens(port.parse().unwrap()) {
            assert!(started.elapsed() < Duration::from_secs(30), "iperf3 under dara-trace did not listen on port {port}");
            std::thread::sleep(Duration::from_millis(50));
        }
        let client = Command::new("iperf3").args(["-c", "127.0.0.1", "-p", &port, "-t", "1", "-J"]).args(extra).output().expect("iperf3 (run ./scripts/install-deps.sh)");
        let report: serde_json::Value = serde_json::from_slice(&client.stdout).unwrap_or_else(|e| panic!("{mode}: iperf3's report: {e}\n{}", String::from_utf8_lossy(&client.stdout)));
        assert!(client.status.success(), "{mode}: {report}");
        let end = &report["end"];
        let (seconds, bytes) = match mode {
            "tcp" => (end["sum_received"]["seconds"].as_f64(), end["sum_received"]["bytes"].as_u64()),
            _ => (end["sum"]["seconds"].as_f64(), end["sum"]["bytes"].as_u64()),
        };
        assert!(bytes.is_some_and(|b| b > 0), "{mode}: nothing received: {end}");
        assert!(seconds.is_some_and(|s| s >= 0.5), "{mode}: the server measured {seconds:?} s for a 1-second test: {end}");
        let status = wait_at_most(&mut server.0, Duration::from_secs(60)).expect("dara-trace ends with iperf3's one test");
        assert_eq!(status.code(), Some(0), "{mode}: {status:?}");
        replays_identically(&out.join("trace.bin"));
        assert!(processes_with(&["iperf3", "-p", &port]).is_empty(), "an iperf3 survived");
    }
}

/// Whether a TCP socket listens on `port` (read from /proc/net/tcp and tcp6, without connecting).
fn tcp_listens(port: u16) -> bool {
    let local = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().filter_map(|f| std::fs::read_to_string(f).ok()).any(|table| {
        table.lines().skip(1).any(|l| {
            let fields: Vec<&str> = l.split_whitespace().collect();
            fields.len() > 3 && fields[1].ends_with(&local) && fields[3] == "0A"
        })
    })
}

/// haproxy with four threads in front of lighttpd, in a closed-world test script
/// (tests/fixtures/scripts/haproxy_test.sh: curl fetches three pages through the proxy), searched.
#[test]
fn haproxy_test_script_searches_clean_and_replays() {
    let port = free_ports(2).to_string();
    let script = repo_root().join("tests/fixtures/scripts/haproxy_test.sh");
    let (last, run) = search_clean("haproxy-search", SEARCH_RUNS, &[], &[script.to_str().unwrap(), &port]);
    assert_eq!(run.stdout.matches("haproxy_test: every page was right").count() as u64, SEARCH_RUNS, "{}", run.text());
    assert!(steps_with(&last, Op::NetAccept) >= 3, "haproxy and lighttpd accepted the fetches under control");
    replays_identically(&last);
    assert!(processes_with(&["haproxy", &format!("haproxy_test.{port}.")]).is_empty(), "a haproxy survived");
}

/// haproxy and lighttpd recorded with curl outside, stopped by one Ctrl-C. haproxy does not catch
/// SIGINT: it dies of the signal dara passes on, as at a terminal. That is the user stopping it,
/// not a crash: dara exits 0 and says so, and the replay ends the same way.
#[test]
fn haproxy_under_curl_is_recorded_and_one_ctrl_c_stops_it_without_a_false_bug() {
    let port = free_ports(2).to_string();
    let out = out_dir("haproxy");
    let script = repo_root().join("tests/fixtures/scripts/haproxy_test.sh");
    let mut server = Recording(
        Command::new(env!("CARGO_BIN_EXE_dara-trace"))
            .args(["-o", out.to_str().unwrap(), "--", script.to_str().unwrap(), &port, "serve"])
            .env("TMPDIR", &out)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    wait_for_listener(port.parse().unwrap(), Duration::from_secs(30), "haproxy under dara-trace");
    for n in [1, 2, 3, 1] {
        let url = format!("http://127.0.0.1:{port}/{n}.html");
        let curl = Command::new("curl").args(["-s", "-f", "-m", "30", &url]).output().expect("curl (run ./scripts/install-deps.sh)");
        assert!(curl.status.success(), "fetch {url}: {curl:?}");
        assert_eq!(String::from_utf8_lossy(&curl.stdout), format!("page {n}\n"));
    }
    let (status, stderr) = ctrl_c(&mut server.0, Duration::from_secs(60));
    let mut stdout = String::new();
    std::io::Read::read_to_string(server.0.stdout.as_mut().unwrap(), &mut stdout).unwrap();
    assert_eq!(status.code(), Some(0), "a Ctrl-C that ends haproxy is no bug: {status:?}\n{stdout}\n{stderr}");
    assert!(stderr.contains("no bug found"), "{stdout}\n{stderr}");
    let trace_path = out.join("trace.bin");
    let trace = dara_scheduler::trace::read_file(&trace_path).unwrap();
    assert!(matches!(trace.outcome, dara_scheduler::Outcome::StoppedBySignal { signal: libc::SIGINT, .. }), "{:?}", trace.outcome);
    let connects = trace.outside.iter().filter(|e| matches!(e.what, OutsideWhat::Connect { .. })).count();
    assert!(connects >= 4, "every fetch was recorded ({connects} connections)");
    let replay = dara_replay(&["--verify", trace_path.to_str().unwrap()], Duration::from_secs(300));
    assert_eq!(replay.code, 0, "{}", replay.text());
    assert!(replay.stdout.contains("stopped by SIGINT") && replay.stdout.contains("(same as recorded)"), "{}", replay.text());
    assert!(processes_with(&["haproxy", &format!("haproxy_test.{port}.")]).is_empty(), "a haproxy survived");
    assert!(dara_shm_files().is_empty(), "{:?}", dara_shm_files());
}

/// Node.js: three worker_threads adding into a SharedArrayBuffer (tests/fixtures/node/workers.js),
/// with V8's platform threads and libuv's pool around them. Recorded, searched, replayed.
#[test]
fn node_worker_threads_record_search_and_replay() {
    let script = private_copy(&repo_root().join("tests/fixtures/node/workers.js"), "node-workers");
    let node = ["node", script.to_str().unwrap()];
    const ANSWER: &str = "workers: total 3000";
    let (trace, printed) = record("node-workers", &node);
    assert!(printed.contains(ANSWER), "{printed}");
    assert!(threads_created(&trace) >= 3, "the workers ran as threads under control");
    replays_identically(&trace);
    let (last, run) = search_clean("node-workers-search", SEARCH_RUNS, &[], &node);
    assert_eq!(run.stdout.matches(ANSWER).count(), SEARCH_RUNS as usize, "{}", run.text());
    replays_identically(&last);
    assert!(processes_with(&["node", script.to_str().unwrap()]).is_empty(), "a node survived");
}

/// openssl's `s_server` and an `s_client` that verifies a certificate made just before the run
/// (tests/fixtures/scripts/tls_test.sh), recorded, searched and replayed. The program's wall clock
/// starts at the real time dara-trace started; with the fixed 2024 epoch dara used before, the
/// client said "certificate is not yet valid" and the script failed: a false bug. `--epoch`
/// still sets the old clock, and then the verification fails as it would on a machine set to 2024.
#[test]
fn openssl_tls_with_a_fresh_certificate_records_searches_and_replays() {
    let dir = out_dir("tls-cert");
    let made = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2", "-subj", "/CN=localhost"])
        .arg("-keyout")
        .arg(dir.join("key.pem"))
        .arg("-out")
        .arg(dir.join("cert.pem"))
        .output()
        .unwrap();
    assert!(made.status.success(), "openssl req: {}", String::from_utf8_lossy(&made.stderr));
    let script = repo_root().join("tests/fixtures/scripts/tls_test.sh");
    let (script, dir) = (script.to_str().unwrap(), dir.to_str().unwrap());
    let port = free_ports(3);
    let (trace, said) = record_with("tls", &["--closed"], &[script, &port.to_string(), dir]);
    assert!(said.contains("tls_test: verified page"), "{said}");
    replays_identically(&trace);
    let (last, run) = search_clean("tls-search", SEARCH_RUNS, &[], &[script, &(port + 1).to_string(), dir]);
    assert_eq!(run.stdout.matches("tls_test: verified page").count() as u64, SEARCH_RUNS, "{}", run.text());
    replays_identically(&last);
    let out = out_dir("tls-2024");
    let old = dara_trace(&["-q", "--closed", "--epoch", "1704067200", "-o", out.to_str().unwrap(), "--", script, &(port + 2).to_string(), dir], Duration::from_secs(180));
    assert!(old.code == 1 && old.stdout.contains("certificate is not yet valid"), "{}", old.text());
    // This run's servers only (their certificate is in this test's own directory): a second
    // suite running at the same time has servers of its own.
    assert!(processes_with(&["openssl", "s_server", dir]).is_empty(), "an openssl server survived");
}

/// gpg makes an RSA key through gpg-agent (libgcrypt, npth threads), recorded, searched with 5
/// executions and replayed. Two things stopped it before 2026-11-29: libgcrypt mixes `rdrand`
/// into its pool at every draw, so every run (and every replay) made other primes, and its
/// progress callbacks (an npth `sem_post`/`sem_wait` pair each) ran a different number of times:
/// dara now makes `cpuid` fault and hides RDRAND and RDSEED (where the CPU can fault on `cpuid`;
/// elsewhere the replay diverges and says the CPU is why). And gpg-agent calibrates its
/// passphrase hashing by CPU time (`times()`), which under dara does not move while it hashes, so
/// the calibration doubles its work forever: the recording and search give the count
/// (`s2k-count`, gpg-agent's own option), and without it dara stops the run as uncontrolled and
/// names CPU time, not as a hang of gpg.
#[test]
fn gpg_key_generation_records_searches_and_replays() {
    installed("gpg-agent", "gnupg");
    let home = out_dir("gpg-home");
    let home = home.to_str().unwrap();
    let setup = |conf: &str| format!("rm -rf {home}; mkdir -m 700 {home}; {conf}");
    let given = setup(&format!("echo 's2k-count 65536' > {home}/gpg-agent.conf"));
    let keygen = format!("gpg --batch --homedir {home} --passphrase x --quick-gen-key t@e && gpgconf --homedir {home} --kill gpg-agent");
    let command = ["sh", "-c", keygen.as_str()];
    let (trace, said) = record_with("gpg", &["--setup", &given], &command);
    assert!(said.contains("revocation certificate stored"), "{said}");
    replays_identically_or_blames_the_cpu(&trace);
    let (last, run) = search_clean("gpg-search", 5, &["--setup", &given], &command);
    assert_eq!(run.text().matches("revocation certificate stored").count(), 5, "{}", run.text());
    replays_identically_or_blames_the_cpu(&last);
    let out = out_dir("gpg-calibrating");
    let calibrating = setup("true");
    let args = ["-q", "--busy-limit", "10", "--setup", &calibrating, "-o", out.to_str().unwrap(), "--", "sh", "-c", &keygen];
    let stopped = dara_trace(&args, Duration::from_secs(180));
    assert_eq!(stopped.code, 2, "gpg-agent's calibration is dara's limit, not gpg's bug\n{}", stopped.text());
    assert!(stopped.text().contains("waits for its CPU time to grow"), "{}", stopped.text());
    assert!(processes_with(&["gpg-agent", home]).is_empty(), "a gpg-agent survived");
}

/// GCC's OpenMP runtime (libgomp): regions of four threads with a reduction, a critical section
/// and a barrier, searched (20 executions, twice with one seed) and replayed, with libgomp told
/// to sleep at its waits (dara sets `OMP_WAIT_POLICY=PASSIVE` when the user did not); the
/// user's own setting is kept. Before, every wait spun 300,000 rounds for a partner that was parked:
/// 100 regions took 9 s under dara (11 ms natively).
#[test]
fn openmp_regions_on_libgomp_search_clean_and_replay() {
    let program = private_copy(&fixture_with("openmp_regions", &["-fopenmp"]), "openmp");
    let exe = program.to_str().unwrap();
    let (last, run) = search_clean("openmp-search", SEARCH_RUNS, &[], &[exe, "50"]);
    assert_eq!(run.stdout.matches("openmp: 50 regions, sum 24975000, 200 criticals, wait policy PASSIVE").count() as u64, SEARCH_RUNS, "{}", run.text());
    replays_identically(&last);
    let (again, _) = search_clean("openmp-search-again", SEARCH_RUNS, &[], &[exe, "50"]);
    same_decisions(&last, &again);
    // (`active` would spin for good: dara stops that as a thread computing without a
    // scheduling point, after --busy-limit.)
    let (_, said) = record("openmp-user-policy", &["/usr/bin/env", "OMP_WAIT_POLICY=passive", exe, "2"]);
    assert!(said.contains("openmp: 2 regions, sum 999000, 8 criticals, wait policy passive"), "{said}");
    assert_no_survivors(&program);
}
