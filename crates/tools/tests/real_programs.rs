//! Real multithreaded programs nobody here wrote, recorded as a user would (`dara-trace -o OUT --
//! CMD`, one run with coarse steps) and replayed with `--verify`: pigz compressing with four
//! threads, `sort --parallel=4`, python3 threads taking turns on the GIL, memcached with four
//! worker threads under memcslap from outside, and nginx (master and two workers) serving curl.
//! Each used to stop with a false "a lock taken without a scheduling point", nginx in its
//! master's `sigsuspend` (issue 14). The programs come from Debian packages that
//! `scripts/install-deps.sh` installs.
mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use dara_abi::Op;
use dara_scheduler::outside::OutsideWhat;

const PYTHON: &str = "/usr/bin/python3";

/// Records `command` in a fresh output directory (`test`), expects a clean exit, and returns the
/// trace and what the program printed.
fn record(test: &str, command: &[&str]) -> (PathBuf, String) {
    let out = out_dir(test);
    let mut args = vec!["-q", "-o", out.to_str().unwrap(), "--"];
    args.extend_from_slice(command);
    let run = dara_trace(&args, Duration::from_secs(120));
    assert_eq!(run.code, 0, "{test}: {}", run.text());
    (out.join("trace.bin"), run.stdout)
}

/// The trace replays with nobody outside, and twice more step for step alike.
fn replays_identically(trace: &Path) {
    let replay = dara_replay(&["-q", "--verify", trace.to_str().unwrap()], Duration::from_secs(180));
    assert_eq!(replay.code, 0, "{}", replay.text());
    assert!(replay.stdout.contains("verify: 2 more executions identical"), "{}", replay.text());
}

/// How many threads the recorded program created.
fn threads_created(trace: &Path) -> usize {
    let t = dara_scheduler::trace::read_file(trace).unwrap();
    t.steps.iter().filter(|s| s.choice.op == Op::ThreadCreate).count()
}

/// `lines` lines of words from a fixed generator: compressible, not trivially so.
fn text(lines: usize) -> String {
    const WORDS: [&str; 8] = ["dara", "records", "one", "schedule", "of", "real", "threads", "exactly"];
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut out = String::new();
    for i in 0..lines {
        for _ in 0..8 {
            state = dara_abi::splitmix64(state);
            out.push_str(WORDS[(state % 8) as usize]);
            out.push(' ');
        }
        out.push_str(&format!("{}\n", state % (i as u64 + 1000)));
    }
    out
}

/// Starts `dara-trace -q -o OUT -- command` for a server that will listen on `port`, and waits
/// until it does.
fn start_recording(out: &Path, command: &[&str], port: &str) -> std::process::Child {
    let server = Command::new(env!("CARGO_BIN_EXE_dara-trace"))
        .args(["-q", "-o", out.to_str().unwrap(), "--"])
        .args(command)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port.parse::<u16>().unwrap())).is_err() {
        assert!(started.elapsed() < Duration::from_secs(30), "{} under dara-trace did not listen", command[0]);
        std::thread::sleep(Duration::from_millis(50));
    }
    server
}

/// One Ctrl-C to the recording `dara-trace` (a second one after a minute): its exit status and
/// what it said.
fn ctrl_c(server: &mut std::process::Child) -> (std::process::ExitStatus, String) {
    // SAFETY: signalling our own child.
    unsafe { libc::kill(server.id() as i32, libc::SIGINT) };
    let status = match wait_at_most(server, Duration::from_secs(60)) {
        Some(status) => status,
        None => interrupt_after(server, Duration::ZERO),
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(server.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    (status, stderr)
}

#[test]
fn pigz_with_four_threads_records_and_replays() {
    let dir = out_dir("pigz-input");
    let input = dir.join("input.txt");
    let original = text(40_000); // about 2.5 MB: 20 of pigz's 128 KiB blocks
    std::fs::write(&input, &original).unwrap();
    let (trace, _) = record("pigz", &["pigz", "-p", "4", "-k", "-f", input.to_str().unwrap()]);
    assert!(threads_created(&trace) >= 4, "pigz -p 4 compressed in threads");
    let unpacked = Command::new("pigz").args(["-d", "-c"]).arg(dir.join("input.txt.gz")).output().unwrap();
    assert!(unpacked.status.success() && unpacked.stdout == original.as_bytes(), "the recorded pigz wrote a faithful .gz");
    replays_identically(&trace);
    assert!(processes_with(&["pigz", input.to_str().unwrap()]).is_empty(), "a pigz survived");
}

#[test]
fn sort_parallel_records_and_replays() {
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
    assert!(processes_with(&["sort", input.to_str().unwrap()]).is_empty(), "a sort survived");
}

/// Four threads computing on the GIL (its 5 ms timed condition waits hand it over), then a
/// producer and three consumers through a `queue.Queue` whose gets time out.
#[test]
fn python_threads_on_the_gil_record_and_replay() {
    let script = out_dir("python-script").join("threads.py");
    std::fs::write(
        &script,
        r#"import queue, threading, time
def work(n, out, i):
    out[i] = sum(k * k % 7 for k in range(n))
out = [0] * 4
ts = [threading.Thread(target=work, args=(100000, out, i)) for i in range(4)]
for t in ts: t.start()
for t in ts: t.join()
q, got, lock = queue.Queue(maxsize=8), [0], threading.Lock()
def producer():
    for i in range(500):
        q.put(i)
        if i % 100 == 0: time.sleep(0.001)
    for _ in range(3): q.put(None)
def consumer():
    while True:
        try: item = q.get(timeout=0.005)
        except queue.Empty: continue
        if item is None: return
        with lock: got[0] += item
ts = [threading.Thread(target=consumer) for _ in range(3)] + [threading.Thread(target=producer)]
for t in ts: t.start()
for t in ts: t.join()
print("sums", sum(out), got[0])
"#,
    )
    .unwrap();
    let (trace, stdout) = record("python", &[PYTHON, script.to_str().unwrap()]);
    let expected = 4 * (0..100_000u64).map(|k| k * k % 7).sum::<u64>();
    assert!(stdout.contains(&format!("sums {expected} {}", (0..500).sum::<u64>())), "{stdout}");
    assert!(threads_created(&trace) >= 8);
    replays_identically(&trace);
    assert!(processes_with(&[PYTHON, script.to_str().unwrap()]).is_empty(), "a python3 survived");
}

/// memcached with four worker threads, recorded while memcslap's four client threads set and get
/// keys from outside, then stopped with one Ctrl-C to dara, which passes it on: memcached's main
/// thread takes it (its workers block SIGINT) and memcached exits 0, and so does dara.
#[test]
fn memcached_under_memcslap_records_and_replays() {
    let port = free_ports(1).to_string();
    let out = out_dir("memcached");
    let mut server = start_recording(&out, &["memcached", "-u", "root", "-t", "4", "-U", "0", "-l", "127.0.0.1", "-p", &port], &port);
    let server_arg = format!("127.0.0.1:{port}");
    for test in ["set", "get"] {
        let slap = Command::new("memcslap").args(["-s", &server_arg, "-c", "4", "-e", "300", "-t", test]).output().expect("memcslap (run ./scripts/install-deps.sh)");
        let said = format!("{}{}", String::from_utf8_lossy(&slap.stdout), String::from_utf8_lossy(&slap.stderr));
        assert!(slap.status.success() && !said.contains("error") && !said.contains("FAILURE"), "memcslap -t {test}: {said}");
    }
    let (status, stderr) = ctrl_c(&mut server);
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

/// nginx with a master and two workers (tests/fixtures/nginx.conf.in), recorded while curl fetches
/// a page 20 times from outside, then stopped with one Ctrl-C to dara: the workers, parked in
/// `epoll_wait` with no timer, and the master, parked in `sigsuspend`, are interrupted by the
/// signal dara passes on (Interrupt choices); the workers exit, their SIGCHLD ends the master's
/// next `sigsuspend`, nginx exits 0 and so does dara. nginx listens twice on its socket: one
/// listener is relayed. The trace replays with `--verify`.
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
    let (status, stderr) = ctrl_c(&mut server);
    let log = std::fs::read_to_string(&error_log).unwrap_or_default();
    assert_eq!(status.code(), Some(0), "one Ctrl-C stops nginx, and dara with its exit: {status:?} {stderr}\n{log}");
    assert!(log.contains("signal 2 (SIGINT) received") && log.contains("exit"), "nginx saw the Ctrl-C and exited: {log}");

    let trace_path = out.join("trace.bin");
    let trace = dara_scheduler::trace::read_file(&trace_path).unwrap();
    let connects = trace.outside.iter().filter(|e| matches!(e.what, OutsideWhat::Connect { .. })).count();
    assert_eq!(connects, FETCHES + 1, "every fetch was recorded, and the probe that waited for the listener");
    let interrupted = |op: Op| trace.steps.iter().filter(|s| s.choice.kind == ChoiceKind::Interrupt && s.choice.op == op).count();
    assert_eq!(interrupted(Op::NetEpollWait), 2, "the Ctrl-C ends each worker's epoll_wait");
    assert!(interrupted(Op::SigSuspend) >= 2, "the Ctrl-C and the workers' SIGCHLD end the master's sigsuspend");
    assert_eq!(trace.steps.iter().filter(|s| s.choice.op == Op::NetListen).count(), 1, "nginx's second listen() splits nothing");
    std::fs::remove_file(dir.join("nginx.pid")).ok(); // nginx removes it; a replay starts afresh
    replays_identically(&trace_path);
    assert!(processes_with(&["nginx", conf.to_str().unwrap()]).is_empty(), "an nginx survived");
    assert!(dara_shm_files().is_empty(), "{:?}", dara_shm_files());
}
