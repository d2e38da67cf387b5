//! The ptrace agent's socket, pipe, process and wait calls end to end (docs/ptrace.md): programs
//! dara's preload cannot enter talk over loopback TCP and pipes, start children with `execve`
//! and wait for them, each through the same requests the preload posts. Each bug is found,
//! replayed, found again the same way with the same seed; each clean run replays identically.
mod common;

use std::path::Path;
use std::time::Duration;

use common::go;
use common::real::{replays_identically, steps_with};
use common::*;
use dara_abi::Op;

/// The static kv store's search: seed 2 finds the stale read in execution 141. Seed 1 found it
/// within 100 until 2026-12-01, when bash's start-up `sysinfo` became a clock-read step (the
/// script's shell is dynamic): the random walk draws differently, and seed 1 finds none in 300.
const KV_SEED: &str = "2";
const KV_RUNS: &str = "200";

const STALE_READ: &str = "client: stale read: the backup answered \"NONE\" after the primary acknowledged x=1";

/// `dara-trace` searching `runs` random executions (seed `seed`) of `args`; the output directory.
fn search(name: &str, seed: &str, runs: &str, args: &[&str]) -> (Run, std::path::PathBuf) {
    let out = out_dir(name);
    let mut all = vec!["-q", "-o", out.to_str().unwrap(), "--seed", seed, "--runs", runs, "--epoch", SEARCH_EPOCH, "--no-minimize", "--"];
    all.extend_from_slice(args);
    (dara_trace(&all, Duration::from_secs(600)), out)
}

/// tests/fixtures/kv_node.c built statically, so the agent runs its nodes: single-threaded
/// `poll` loops with blocking `accept`, `recv`, `send` and `connect` on TCP. Its stale read
/// needs the backup's `poll` to report the client's GET before the primary's forward: the
/// grant's choice of one ready entry, which the agent shows the program as the preload does.
#[test]
fn a_static_c_stale_read_is_found_through_poll_and_blocking_sockets() {
    let script = repo_root().join("tests/fixtures/scripts/kv_test.sh");
    let base = free_ports(3).to_string();
    let kv = private_copy(&fixture_with("kv_node", &["-static"]), "ptrace-static-kv");
    let args = |program: &Path| [script.to_str().unwrap().to_owned(), program.to_str().unwrap().to_owned(), base.clone()];
    let kv_args = args(&kv);
    let kv_args: Vec<&str> = kv_args.iter().map(String::as_str).collect();
    let (run, out) = search("ptrace-static-kv", KV_SEED, KV_RUNS, &kv_args);
    assert_eq!(run.code, 1, "the stale read was not found in {KV_RUNS} executions (seed {KV_SEED})\n{}", run.text());
    assert!(run.stdout.contains(STALE_READ), "found as something else\n{}", run.text());
    let bug = out.join("bug-0001/trace.bin");
    // Only the static nodes poll; their traffic was scheduled.
    for op in [Op::NetPoll, Op::NetAccept, Op::NetConnect, Op::NetRecv, Op::NetSend] {
        assert!(steps_with(&bug, op) > 0, "no {} step in the bug's trace", op.name());
    }
    replays(&bug, STALE_READ);
    let (again, again_out) = search("ptrace-static-kv-again", KV_SEED, KV_RUNS, &kv_args);
    assert_eq!(again.code, 1, "{}", again.text());
    same_decisions(&bug, &again_out.join("bug-0001/trace.bin"));

    let twin = private_copy(&fixture_with("kv_node_ok", &["-static"]), "ptrace-static-kv-ok");
    let twin_args = args(&twin);
    let twin_args: Vec<&str> = twin_args.iter().map(String::as_str).collect();
    let (run, out) = search("ptrace-static-kv-ok", "1", "30", &twin_args);
    assert_eq!(run.code, 0, "a false bug in the twin\n{}", run.text());
    replays_identically(&out.join("trace.bin"));
    assert_no_survivors(&kv);
    assert_no_survivors(&twin);
}

/// A Go program that runs itself twice with `os/exec` from two goroutines (fork, the child's
/// `execve`, the exec-status pipe, the output pipe, `waitid` and `wait4`): both children's
/// output and exit statuses reach the parent in every execution; the same seed gives the same
/// executions; the last one replays identically.
#[test]
fn a_go_program_running_children_with_os_exec_is_followed_and_replayed() {
    let spawn = private_copy(&go::go_fixture("spawn"), "ptrace-go-spawn");
    let (run, out) = search("ptrace-go-spawn", "1", "10", &[spawn.to_str().unwrap()]);
    assert_eq!(run.code, 0, "{}", run.text());
    for i in 1..=2 {
        let line = format!("parent: child {i} said \"child {i}\\n\", exit status {i}");
        assert_eq!(run.stdout.matches(&line).count(), 10, "child {i} in every execution\n{}", run.text());
    }
    let trace = out.join("trace.bin");
    assert_eq!(steps_with(&trace, Op::ProcessExec), 2, "both children's execs followed");
    assert!(steps_with(&trace, Op::ProcessWait) >= 2, "the parent's waits are scheduling points");
    assert_eq!(steps_with(&trace, Op::ProcessStart), 5, "the parent, two children, two new images");
    replays_identically(&trace);
    let (again, again_out) = search("ptrace-go-spawn-again", "1", "10", &[spawn.to_str().unwrap()]);
    assert_eq!(again.code, 0, "{}", again.text());
    same_decisions(&trace, &again_out.join("trace.bin"));
    assert_no_survivors(&spawn);
}

/// A Go program that runs `/bin/sh -c` (Go's `os/exec` of a dynamically linked program, which
/// runs another): the agent follows both, started by dara and started from a bash test script
/// (bash runs under the preload, the Go program and its shell under the agent, with the preload's
/// inherited filter). Every execution prints what the shell said; the last replays identically;
/// the same seed decides alike.
#[test]
fn a_go_program_running_a_dynamically_linked_shell_is_followed_and_replayed() {
    let spawn = private_copy(&go::go_fixture("spawn"), "ptrace-go-spawn-dynamic");
    const SAID: &str = "parent: /bin/sh said \"sh says hi\\ntrue ran\\n\", err <nil>";
    let direct = [spawn.to_str().unwrap(), "dynamic"];
    let line = format!("{} dynamic", spawn.display());
    let from_bash = ["/bin/bash", "-c", line.as_str()];
    for (name, args) in [("direct", &direct[..]), ("from-bash", &from_bash[..])] {
        let (run, out) = search(&format!("ptrace-go-sh-{name}"), "1", "5", args);
        assert_eq!(run.code, 0, "{name}: {}", run.text());
        assert_eq!(run.stdout.matches(SAID).count(), 5, "{name}: the shell ran in every execution\n{}", run.text());
        let trace = out.join("trace.bin");
        assert!(steps_with(&trace, Op::ProcessExec) >= 2, "{name}: sh's exec and true's followed");
        replays_identically(&trace);
        let (again, again_out) = search(&format!("ptrace-go-sh-{name}-again"), "1", "5", args);
        assert_eq!(again.code, 0, "{name}: {}", again.text());
        same_decisions(&trace, &again_out.join("trace.bin"));
    }
    assert_no_survivors(&spawn);
}

/// A Go server on port 0 (tests/fixtures/go/echo0), recorded with two clients from outside: the
/// agent splits its listener as the preload does, so the port it prints (its listener's
/// `getsockname`) is the public one dara keeps, both clients are relayed and recorded, and the
/// recording replays with nobody outside. One client asks for a 4 MiB answer, which Go writes in
/// one non-blocking `write`: each grant moves at most `STREAM_SEND_MOST` bytes to dara's relay
/// (before, the call moved what the socket's autotuned buffers took, and the replay diverged).
#[test]
fn a_go_server_on_port_0_is_recorded_with_clients_from_outside_and_replays() {
    use std::io::{BufRead, BufReader, Write};
    let echo = private_copy(&go::go_fixture("echo0"), "ptrace-echo0");
    let out = out_dir("ptrace-echo0-outside");
    let log = out.join("run.log");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_dara-trace"))
        .args(["-o", out.to_str().unwrap(), "--"])
        .arg(&echo)
        .stdin(std::process::Stdio::null())
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .unwrap();
    let port = (0..2400).find_map(|_| {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let port = text.lines().find_map(|l| l.strip_prefix("echo0: listening on ")).and_then(|p| p.trim().parse::<u16>().ok());
        if port.is_none() {
            std::thread::sleep(Duration::from_millis(50));
        }
        port
    });
    let talk = |port: u16, line: &str| -> String {
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        writeln!(stream, "{line}").unwrap();
        let mut answer = String::new();
        BufReader::new(stream).read_line(&mut answer).unwrap();
        answer.trim().to_string()
    };
    let big = |port: u16| -> bool {
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        writeln!(stream, "big").unwrap();
        let mut answer = vec![0u8; (4 << 20) + 1];
        std::io::Read::read_exact(&mut stream, &mut answer).unwrap();
        answer[4 << 20] == b'\n' && answer[..4 << 20] == common::real::big_body(4 << 20)[..]
    };
    let answers = port.map(|p| [talk(p, "hello"), big(p).to_string(), talk(p, "dara"), talk(p, "quit")]);
    let status = wait_at_most(&mut child, Duration::from_secs(120));
    if status.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(port.is_some(), "echo0 never said its port\n{text}");
    assert_eq!(answers.unwrap(), ["HELLO", "true", "DARA", "BYE"], "{text}");
    assert_eq!(status.and_then(|s| s.code()), Some(0), "{text}");
    let trace = dara_scheduler::trace::read_file(&out.join("trace.bin")).unwrap();
    let connects = trace.outside.iter().filter(|e| matches!(e.what, dara_scheduler::outside::OutsideWhat::Connect { .. })).count();
    assert_eq!(connects, 4, "every client was relayed and recorded");
    replays_identically(&out.join("trace.bin"));
    assert_no_survivors(&echo);
}

/// The lines tests/fixtures/static_urandom.c printed (its three reads, in hex).
fn random_lines(text: &str) -> Vec<String> {
    text.lines().filter(|l| l.starts_with("urandom ") || l.starts_with("random ")).map(str::to_owned).collect()
}

/// A static program (glibc and musl) reading /dev/urandom with `read` and `readv`, and
/// /dev/random: natively two runs print different bytes; under dara the bytes come from the
/// run's seed (the agent answers the reads as it answers `getrandom`), so the same seed prints
/// the same bytes, another seed others, and the recording replays identically.
#[test]
fn a_static_program_reading_dev_urandom_gets_the_seeded_stream() {
    for (build, program) in [("glibc", fixture_with("static_urandom", &["-static"])), ("musl", musl_fixture("static_urandom"))] {
        let program = program.to_str().unwrap();
        let native = |_| random_lines(&String::from_utf8_lossy(&std::process::Command::new(program).output().expect("run natively").stdout));
        let (first, second) = (native(0), native(1));
        assert_eq!(first.len(), 3, "{build}: natively: {first:?}");
        assert_ne!(first, second, "{build}: two native runs read the same bytes: the fixture does not read the device");
        let recorded = |test: &str, seed: &str| {
            let (trace, text) = common::real::record_with(&format!("ptrace-urandom-{build}-{test}"), &["--seed", seed], &[program]);
            (trace, random_lines(&text))
        };
        let (trace, a) = recorded("a", "3");
        let (_, b) = recorded("b", "3");
        let (_, other) = recorded("other", "4");
        assert_eq!(a.len(), 3, "{build}: {a:?}");
        assert!(a.iter().all(|l| l.ends_with(" (16)")), "{build}: a short read: {a:?}");
        assert_eq!(a, b, "{build}: the same seed read different bytes");
        assert_ne!(a, other, "{build}: another seed read the same bytes");
        replays_identically(&trace);
    }
}

/// `select` (musl's call) and `pselect6` (glibc's `select` and `pselect`, and musl's `pselect`)
/// in a static program, each posted as the poll of its sets: a thread's byte written after a
/// sleep wakes main's wait with no timeout; a `pselect` under the thread's own mask times out
/// (virtual time), then waits in a loop for the byte. Recorded, searched clean, replayed.
#[test]
fn a_static_program_waiting_in_select_and_pselect_is_scheduled_and_replays() {
    for (build, program) in [("glibc", fixture_with("static_select", &["-static", "-pthread"])), ("musl", musl_fixture("static_select"))] {
        let program = program.to_str().unwrap();
        for mode in ["select", "pselect"] {
            let test = format!("ptrace-select-{build}-{mode}");
            let (trace, text) = common::real::record(&test, &[program, mode]);
            let (again, _) = common::real::record(&format!("{test}-again"), &[program, mode]);
            same_decisions(&trace, &again);
            assert!(text.contains(&format!("{mode}: fd ready, read x")), "{test}: {text}");
            assert_eq!(text.contains("pselect: timed out"), mode == "pselect", "{test}: {text}");
            assert!(steps_with(&trace, Op::NetPoll) > 0, "{test}: no poll step in the trace");
            replays_identically(&trace);
            let (last, _) = common::real::search_clean(&format!("{test}-search"), 5, &[], &[program, mode]);
            replays_identically(&last);
        }
        // A wait under another mask than the thread's: the mask is the wait's (a signal it lets
        // through would end it, docs/ptrace.md), and its timeout fires on the virtual clock.
        let (trace, text) = common::real::record(&format!("ptrace-select-{build}-othermask"), &[program, "othermask"]);
        assert!(text.contains("othermask: returned 0"), "{build}: {text}");
        replays_identically(&trace);
    }
}

/// `SO_RCVTIMEO` read by the agent (tests/fixtures/static_rcvtimeo.c, static) and by the preload
/// (the same fixture linked dynamically): a blocking recv and an accept with a 100 ms timeout and
/// nothing coming fail with EAGAIN after 100 ms of virtual time, as the kernel's; a recv whose byte
/// comes 10 ms later gets it. Recorded twice (same decisions), searched clean, replayed.
#[test]
fn a_static_program_s_receive_timeout_fires_or_receives_and_replays() {
    for (build, flags) in [("static", &["-static", "-pthread"][..]), ("dynamic", &["-pthread"][..])] {
        let program = fixture_with("static_rcvtimeo", flags);
        receive_timeouts(build, program.to_str().unwrap());
    }
}

fn receive_timeouts(build: &str, program: &str) {
    for (mode, lines) in [
        ("fires", &["fires: recv -1 EAGAIN after >= 100 ms: 1", "fires: accept -1 EAGAIN after >= 100 ms: 1"][..]),
        ("receives", &["receives: recv 1 'x'"][..]),
    ] {
        let test = format!("ptrace-rcvtimeo-{build}-{mode}");
        let (trace, text) = common::real::record(&test, &[program, mode]);
        let (again, _) = common::real::record(&format!("{test}-again"), &[program, mode]);
        same_decisions(&trace, &again);
        for line in lines {
            assert!(text.contains(line), "{test}: no {line:?} in {text}");
        }
        assert!(steps_with(&trace, Op::NetRecv) > 0, "{test}: no receive step in the trace");
        replays_identically(&trace);
        let (last, _) = common::real::search_clean(&format!("{test}-search"), 5, &[], &[program, mode]);
        replays_identically(&last);
    }
}

/// sendfile, splice and tee on streams (tests/fixtures/sendfile_stream.c), static (the agent) and
/// dynamic (the preload): a 4 MiB sendfile to a loopback TCP peer that reads 64 KiB per 1 ms, and
/// a pipe a thread fills spliced into a second connection. Natively the sendfile is one call that
/// sleeps in the kernel until the reader has most of it; under dara it is a send step that moves
/// 1 MiB, then further steps as the reader reads. Every byte arrives (the reader's checksum);
/// recorded twice with the same decisions, replayed with `--verify`, searched clean.
#[test]
fn sendfile_and_splice_to_a_slow_reader_move_every_byte_and_replay() {
    for (build, flags) in [("static", &["-static", "-pthread"][..]), ("dynamic", &["-pthread"][..])] {
        let program = fixture_with("sendfile_stream", flags);
        let program = program.to_str().unwrap();
        let test = format!("transfer-{build}");
        // Closed: the reader is a traced client of the program's own listener (see docs/outside.md).
        let (trace, text) = common::real::record_with(&test, &["--closed"], &[program]);
        let (again, _) = common::real::record_with(&format!("{test}-again"), &["--closed"], &[program]);
        same_decisions(&trace, &again);
        for line in ["sendfile: 4194304 bytes, sum 08089dc5 ok", "splice: 262144 bytes, sum 8bdcfdc5 ok", "tee: ok"] {
            assert!(text.contains(line), "{test}: no {line:?} in {text}");
        }
        // The sendfile, each splice and the tee are sends; the splices and the tee receive first.
        // A blocking send to the traced reader has room for 1 MiB less what it has not read
        // (docs/networking.md, "When a blocking send to a traced peer has room"): the 4 MiB go
        // in steps of at most that, however much the kernel's buffers would take.
        assert!(steps_with(&trace, Op::NetSend) >= 6, "{test}: too few send steps");
        assert_eq!(common::real::largest_result(&trace, Op::NetSend), 1 << 20, "{test}: a send to the traced reader not cut to its room");
        assert!(steps_with(&trace, Op::NetRecv) >= 64, "{test}: too few receive steps");
        replays_identically(&trace);
        let (last, _) = common::real::search_clean(&format!("{test}-search"), 5, &[], &[program]);
        replays_identically(&last);
        // Recorded as a user would (not closed): the reader connects to the public port dara
        // holds, so the relay carries the 4 MiB to a traced client. Every byte arrives; before
        // 2026-11-29 the run stalled for good once the reader's queue filled. (Its replay may
        // diverge: docs/networking.md, "Not yet".)
        let (_, open) = common::real::record_with(&format!("{test}-open"), &[], &[program]);
        for line in ["sendfile: 4194304 bytes, sum 08089dc5 ok", "splice: 262144 bytes, sum 8bdcfdc5 ok", "tee: ok"] {
            assert!(open.contains(line), "{test}, recorded: no {line:?} in {open}");
        }
    }
}

/// `busybox httpd` (busybox-static, through the agent) recorded serving a 4 MiB file twice to curl
/// outside dara, then stopped by one Ctrl-C. Each connection's child sends the file with
/// `sendfile` to a socket that holds far less; before, that call slept in the kernel with the run
/// token and the watchdog stopped the run as uncontrolled. Now each fetch is a few send steps, the
/// bytes arrive intact, the relay records every byte the program sent as the client's output, the
/// Ctrl-C (busybox has no SIGINT handler; its parent waits in `accept`) ends it as at a terminal,
/// and the replay, with nobody outside, sends the same bytes (`--verify`).
#[test]
fn busybox_httpd_sends_a_big_file_to_an_outside_client_and_replays() {
    use dara_scheduler::outside::OutsideWhat;
    use std::process::{Command, Stdio};
    const FILE_BYTES: usize = 4 << 20;
    let busybox = installed("busybox", "busybox-static");
    let port = free_ports(1).to_string();
    let out = out_dir("busybox-httpd");
    let www = out.join("www");
    std::fs::create_dir_all(&www).unwrap();
    let body = common::real::big_body(FILE_BYTES);
    std::fs::write(www.join("big.bin"), &body).unwrap();
    let listen = format!("127.0.0.1:{port}");
    let httpd = [busybox.to_str().unwrap(), "httpd", "-f", "-p", &listen, "-h", www.to_str().unwrap()];
    let mut server = common::real::Recording(Command::new(env!("CARGO_BIN_EXE_dara-trace")).args(["-q", "-o", out.to_str().unwrap(), "--"]).args(httpd).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap());
    common::real::wait_for_listener(port.parse().unwrap(), Duration::from_secs(30), "busybox httpd under dara-trace");
    common::real::fetch_intact(&format!("http://{listen}/big.bin"), &out, 2, &body, "busybox httpd");
    let (status, stderr) = common::real::ctrl_c(&mut server.0, Duration::from_secs(60));
    assert_eq!(status.code(), Some(0), "one Ctrl-C stops busybox httpd, and dara with its exit: {status:?} {stderr}");
    let trace_path = out.join("trace.bin");
    let trace = dara_scheduler::trace::read_file(&trace_path).unwrap();
    assert!(matches!(trace.outcome, dara_scheduler::Outcome::StoppedBySignal { signal: libc::SIGINT, .. }), "{:?}", trace.outcome);
    let output: usize = trace.outside.iter().map(|e| if let OutsideWhat::Output(bytes) = &e.what { bytes.len() } else { 0 }).sum();
    assert!(output > 2 * FILE_BYTES && output < 2 * FILE_BYTES + 1024, "the relay recorded {output} bytes of output: two files and their headers");
    assert!(steps_with(&trace_path, Op::NetSend) >= 4, "each fetch's header and file are send steps");
    replays_identically(&trace_path);
    assert!(processes_with(&["httpd", &listen]).is_empty(), "a busybox httpd survived");
    assert!(dara_shm_files().is_empty(), "{:?}", dara_shm_files());
}

/// Debian's busybox-static: its shell runs applets (`sleep`, `seq`, `sort`, `od`, `date`) by
/// exec'ing `/proc/self/exe`, which the agent must read as the shell's executable, not its own.
/// A pipeline, a sleep on the virtual clock, seeded random bytes and the virtual wall clock:
/// recorded twice with one seed (the same output), replayed with `--verify`, searched clean.
#[test]
fn busybox_s_shell_runs_its_applets_under_the_agent_and_replays() {
    let busybox = installed("busybox", "busybox-static");
    let busybox = busybox.to_str().unwrap();
    // Applets, and Debian's dynamically linked coreutils (run through the agent too): `sort`
    // with two threads on a few hundred thousand lines, and `date`, on the run's clock.
    let script = "sleep 0.2; seq 5 | sort -r | head -n 2; od -An -N4 -tx1 /dev/urandom; date +%s; seq 200000 | /usr/bin/sort -n -r --parallel=2 -S 1M | /usr/bin/head -n 1; /usr/bin/date +%s; echo done";
    let command = [busybox, "sh", "-c", script];
    let mut printed = Vec::new();
    for attempt in ["busybox", "busybox-again"] {
        let out = out_dir(attempt);
        let mut args = vec!["-q", "-o", out.to_str().unwrap(), "--seed", "5", "--epoch", SEARCH_EPOCH, "--"];
        args.extend_from_slice(&command);
        let run = dara_trace(&args, Duration::from_secs(180));
        assert_eq!(run.code, 0, "{}", run.text());
        assert!(run.stdout.starts_with("5\n4\n") && run.stdout.contains(&format!("{SEARCH_EPOCH}\n200000\n{SEARCH_EPOCH}\ndone\n")), "{}", run.text());
        replays_identically(&out.join("trace.bin"));
        // The program's own lines (dara's summary names the output directory).
        printed.push(run.stderr.split("no bug found").next().unwrap_or_default().to_owned());
    }
    assert_eq!(printed[0], printed[1], "one seed, one output");
    let (run, out) = search("busybox-search", "1", "5", &command);
    assert_eq!(run.code, 0, "{}", run.text());
    assert_eq!(run.stdout.matches("done\n").count(), 5, "{}", run.text());
    replays_identically(&out.join("trace.bin"));
}
