//! Process identity: the pids, tids and parent pids a program observes repeat in every execution
//! of a schedule (dara runs each execution in a PID namespace of its own when it runs as root, as
//! the test suite does), a recording sees the host's pids and its replay the same ones, nothing dara started survives a SIGKILL
//! of dara-trace, and a thread parked for over a second inside the namespace is not taken for an
//! orphan of a dead dara.
mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// The identity lines of `proc_identity`'s output, in order.
fn identity_lines(stdout: &str) -> Vec<String> {
    stdout.lines().filter(|l| l.contains(": pid ") || l.starts_with("children: ")).map(str::to_string).collect()
}

#[test]
fn pids_tids_and_parent_pids_repeat_across_runs_and_in_the_replay() {
    let program = private_copy(&fixture("proc_identity"), "proc_identity");
    let p = program.to_str().unwrap();
    let mut seen = Vec::new();
    for round in 0..2 {
        let out = out_dir(&format!("proc-identity-{round}"));
        let run = dara_trace(&["-o", out.to_str().unwrap(), "--seed", "3", "--", p], Duration::from_secs(120));
        assert_eq!(run.code, 0, "{}", run.text());
        let lines = identity_lines(&run.stdout);
        assert_eq!(lines.len(), 6, "five identities and the children's pids\n{}", run.text());
        seen.push((out, lines));
    }
    let (out, lines) = &seen[0];
    assert_eq!(lines, &seen[1].1, "two runs of one seed printed different identities");
    // In its namespace the program is pid 2 (the init is 1); dara, its parent, is outside (0).
    assert!(lines[0].starts_with("main: pid 2 ppid 0 tid 2 stat 2 self 2 "), "{lines:?}");
    assert!(lines.iter().all(|l| !l.contains("ppid ") || l.contains("self ")), "{lines:?}");
    let trace = out.join("trace.bin");
    let replay = dara_replay(&[trace.to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(replay.code, 0, "{}", replay.text());
    assert_eq!(&identity_lines(&replay.stdout), lines, "the replay saw other identities\n{}", replay.text());
    let verify = dara_replay(&["-q", "--verify", trace.to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(verify.code, 0, "{}", verify.text());
    assert!(verify.stdout.contains("verify: 2 more executions identical"), "{}", verify.text());
    same_decisions(&trace, &seen[1].0.join("trace.bin"));
    assert_no_survivors(&program);
    assert!(dara_shm_files().is_empty(), "{:?}", dara_shm_files());
}

/// Waits for `dara` (spawned with piped stdout and stderr) and asserts it exited 0; its stdout
/// and stderr.
fn succeeded(mut dara: std::process::Child) -> (String, String) {
    let (stdout, stderr) = (dara.stdout.take().unwrap(), dara.stderr.take().unwrap());
    let err = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap_or_default());
    let stdout = std::io::read_to_string(stdout).unwrap_or_default();
    let status = dara.wait().unwrap();
    let stderr = err.join().unwrap();
    assert!(status.success(), "{stdout}\n{stderr}");
    (stdout, stderr)
}

/// The pid in `line` after `field ` (e.g. "ppid").
fn field(line: &str, field: &str) -> u32 {
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = words.iter().position(|w| *w == field).unwrap_or_else(|| panic!("no {field} in {line}"));
    words[at + 1].parse().unwrap_or_else(|_| panic!("{line}"))
}

#[test]
fn a_recording_sees_the_host_s_pids_and_its_replay_the_same() {
    let program = private_copy(&fixture("proc_identity"), "proc_identity");
    let out = out_dir("proc-identity-recorded");
    let dara = Command::new(env!("CARGO_BIN_EXE_dara-trace"))
        .args(["-o", out.to_str().unwrap(), "--host-pids", "--seed", "3", "--", program.to_str().unwrap()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let dara_pid = dara.id();
    let (stdout, stderr) = succeeded(dara);
    let lines = identity_lines(&stdout);
    assert_eq!(lines.len(), 6, "{stdout}\n{stderr}");
    // The host's pids: the program is no pid 2, and its parent is dara-trace itself, as outside
    // tools see them.
    let main_pid = field(&lines[0], "pid");
    assert!(main_pid > 2, "{lines:?}");
    assert_eq!(field(&lines[0], "ppid"), dara_pid, "the recorded program's parent is dara-trace: {lines:?}");
    assert_eq!(field(&lines[0], "stat"), main_pid, "{lines:?}");
    assert_eq!(field(&lines[2], "ppid"), main_pid, "the forked child's parent is the program: {lines:?}");
    // The replay runs in a PID namespace whose births get the recorded pids, and shows dara's
    // recorded pid as the first command's parent.
    let trace = out.join("trace.bin");
    let replay = dara_replay(&[trace.to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(replay.code, 0, "{}", replay.text());
    assert_eq!(identity_lines(&replay.stdout), lines, "the replay saw other identities\n{}", replay.text());
    let verify = dara_replay(&["-q", "--verify", trace.to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(verify.code, 0, "{}", verify.text());
    assert!(verify.stdout.contains("verify: 2 more executions identical"), "{}", verify.text());
    assert_no_survivors(&program);
}

#[test]
fn killing_dara_trace_kills_an_orphaned_grandchild_that_computes() {
    // In a PID namespace its init's death takes the grandchild; with the host's pids the tree's
    // keeper kills it.
    for (name, pids) in [("proc-orphan-spin", None), ("proc-orphan-spin-host", Some("--host-pids"))] {
        let program = private_copy(&fixture("proc_orphan_spin"), name);
        let out = out_dir(name);
        let log = out.join("stdout.txt");
        let mut args = vec!["-o", out.to_str().unwrap(), "--busy-limit", "3600"];
        args.extend(pids);
        args.extend(["--", program.to_str().unwrap()]);
        let mut dara = Command::new(env!("CARGO_BIN_EXE_dara-trace")).args(&args).stdin(Stdio::null()).stdout(std::fs::File::create(&log).unwrap()).stderr(Stdio::null()).spawn().unwrap();
        // Bounded waits only: the grandchild announces itself, then computes until killed.
        let deadline = Instant::now() + Duration::from_secs(120);
        while !std::fs::read_to_string(&log).unwrap_or_default().contains("spinning") {
            assert!(Instant::now() < deadline, "the grandchild never started: {}", std::fs::read_to_string(&log).unwrap_or_default());
            assert!(dara.try_wait().unwrap().is_none(), "dara-trace ended early: {}", std::fs::read_to_string(&log).unwrap_or_default());
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!processes_mentioning(program.to_str().unwrap()).is_empty(), "the target runs");
        dara.kill().unwrap();
        dara.wait().unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while !processes_mentioning(program.to_str().unwrap()).is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_no_survivors(&program);
    }
}

#[test]
fn a_thread_parked_over_a_second_in_the_namespace_keeps_its_process() {
    let program = private_copy(&fixture("proc_parked_long"), "proc_parked_long");
    let trace_of = |name: &str| {
        let out = out_dir(name);
        let run = dara_trace(&["-o", out.to_str().unwrap(), "--busy-limit", "3600", "--", program.to_str().unwrap()], Duration::from_secs(120));
        assert_eq!(run.code, 0, "a correct program was reported (status 137: its parked thread took dara for dead)\n{}", run.text());
        assert!(run.stdout.contains("parked: main done"), "{}", run.text());
        out.join("trace.bin")
    };
    let (first, second) = (trace_of("proc-parked-long"), trace_of("proc-parked-long-again"));
    same_decisions(&first, &second);
    let verify = dara_replay(&["-q", "--verify", first.to_str().unwrap()], Duration::from_secs(120));
    assert_eq!(verify.code, 0, "{}", verify.text());
    assert!(verify.stdout.contains("verify: 2 more executions identical"), "{}", verify.text());
    assert_no_survivors(&program);
}

/// The namespaces made, from a search's closing table.
fn namespaces_made(stdout: &str) -> u64 {
    let line = stdout.lines().find(|l| l.starts_with("namespaces ")).unwrap_or_else(|| panic!("no namespace line\n{stdout}"));
    line.split_whitespace().nth(1).and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("{line}"))
}

#[test]
fn a_namespace_serves_again_only_when_its_execution_left_nothing_behind() {
    let program = private_copy(&fixture("ns_leftovers"), "ns_leftovers");
    let p = program.to_str().unwrap();
    let search = |name: &str, args: &[&str]| {
        let out = out_dir(name);
        let mut words = vec!["-o", out.to_str().unwrap(), "--runs", "24", "--seed", "5", "--", p];
        words.extend_from_slice(args);
        let run = dara_trace(&words, Duration::from_secs(180));
        assert_eq!(run.code, 0, "an execution did not start as in a new namespace\n{}", run.text());
        (out, run)
    };
    // Leaving nothing behind, namespaces take turns (three suffice; more are made only when one
    // comes back after the next execution's program was launched).
    let (out, clean) = search("ns-leftovers-none", &[]);
    assert!(namespaces_made(&clean.stderr) < 24, "no namespace was used again\n{}", clean.text());
    let trace = out.join("trace.bin");
    let verify = dara_replay(&["-q", "--verify", trace.to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(verify.code, 0, "{}", verify.text());
    // A /dev/shm object or a mount left behind: a new namespace for every execution.
    let (_, shm) = search("ns-leftovers-shm", &["shm"]);
    assert!(namespaces_made(&shm.stderr) >= 24, "{}", shm.text());
    let dir = out_dir("ns-leftovers-mount-point");
    let (_, mounted) = search("ns-leftovers-mount", &["mount", dir.to_str().unwrap()]);
    assert!(namespaces_made(&mounted.stderr) >= 24, "{}", mounted.text());
    assert_no_survivors(&program);
}

#[test]
fn a_recorded_daemon_s_pid_file_names_it_for_outside_tools_and_a_stale_one_does_not_stop_it() {
    let program = private_copy(&fixture("pidfile_daemon"), "pidfile_daemon");
    let out = out_dir("pidfile-daemon");
    let pidfile = out.join("daemon.pid");
    let stale = out.join("stale.pid");
    // A first recording leaves its pid file behind, as a daemon killed before its cleanup does.
    let first = dara_trace(&["-o", out.join("first").to_str().unwrap(), "--host-pids", "--", program.to_str().unwrap(), pidfile.to_str().unwrap()], Duration::from_secs(120));
    assert_eq!(first.code, 0, "{}", first.text());
    let stale_pid: u32 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
    assert!(first.stdout.contains(&format!("started: pid {stale_pid}\n")), "{}", first.text());
    std::fs::copy(&pidfile, &stale).unwrap();
    // The second recording finds it (its --setup puts it back for every replay too), and starts:
    // the pid it names is a dead host process, not the daemon itself.
    let setup = format!("cp {} {}", stale.display(), pidfile.display());
    std::fs::remove_file(&pidfile).unwrap();
    let second = out.join("second");
    let mut dara = Command::new(env!("CARGO_BIN_EXE_dara-trace"))
        .args(["-o", second.to_str().unwrap(), "--host-pids", "--setup", &setup, "--", program.to_str().unwrap(), pidfile.to_str().unwrap(), "wait"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Outside, as an operator would: the pid file names the daemon, and a SIGHUP sent to that
    // pid reaches it (it then reloads and exits).
    let deadline = Instant::now() + Duration::from_secs(120);
    let daemon = loop {
        let named = std::fs::read_to_string(&pidfile).ok().and_then(|s| s.trim().parse::<u32>().ok()).filter(|&p| p != stale_pid);
        if let Some(pid) = named {
            break pid;
        }
        assert!(dara.try_wait().unwrap().is_none(), "dara-trace ended before the daemon wrote its pid: {}", std::io::read_to_string(dara.stdout.take().unwrap()).unwrap_or_default());
        assert!(Instant::now() < deadline, "the daemon never wrote its pid file");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(daemon > 2, "the daemon's pid file names pid {daemon}, a namespace's pid");
    let cmdline = std::fs::read(format!("/proc/{daemon}/cmdline")).unwrap_or_default();
    assert!(String::from_utf8_lossy(&cmdline).contains("pidfile_daemon"), "pid {daemon} is not the daemon: {:?}", String::from_utf8_lossy(&cmdline));
    // SAFETY: kill takes two integers; the pid is the daemon's, checked above.
    assert_eq!(unsafe { libc::kill(daemon as i32, libc::SIGHUP) }, 0);
    let (stdout, stderr) = succeeded(dara);
    assert_eq!(stdout, format!("started: pid {daemon}\nreloaded\n"), "{stderr}");
    // The replay: the same pid, the stale file put back by the setup, the SIGHUP fed back.
    let trace = second.join("trace.bin");
    let replay = dara_replay(&[trace.to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(replay.code, 0, "{}", replay.text());
    assert!(replay.stdout.contains(&format!("\nstarted: pid {daemon}\nreloaded\n")), "{}", replay.text());
    let verify = dara_replay(&["-q", "--verify", trace.to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(verify.code, 0, "{}", verify.text());
    assert_no_survivors(&program);
}

/// The working directory a program starts in is reachable from the execution's mount namespace:
/// the kernel's `getcwd` names it as outside, in a recording (launched directly), in a search
/// (copied from the fork server) and in a replay. Before, both launches entered it through a
/// descriptor from dara's own namespace and the kernel answered "(unreachable)/dir"; glibc's
/// `getcwd` then walked `..` with `opendir` and `malloc`, so a `--host-pids` recording of redis
/// (no namespace, no walk) and its replay (in one) allocated differently and diverged.
#[test]
fn the_working_directory_is_reachable_inside_the_namespace() {
    let program = private_copy(&fixture("raw_getcwd"), "raw_getcwd");
    let here = std::env::current_dir().unwrap().canonicalize().unwrap();
    let expected = format!("raw getcwd {}\n", here.display());
    let out = out_dir("raw-getcwd");
    let run = dara_trace(&["-o", out.to_str().unwrap(), "--", program.to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(run.code, 0, "{}", run.text());
    assert!(run.stdout.contains(&expected), "{}", run.text());
    let search = dara_trace(&["--runs", "3", "-o", out_dir("raw-getcwd-search").to_str().unwrap(), "--", program.to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(search.code, 0, "{}", search.text());
    assert_eq!(search.stdout.matches(&expected).count(), 3, "{}", search.text());
    let replay = dara_replay(&[out.join("trace.bin").to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(replay.code, 0, "{}", replay.text());
    assert!(replay.stdout.contains(&expected), "{}", replay.text());
    assert_no_survivors(&program);
}

/// The lines of `sysinfo_identity`'s output that show sysinfo, the clock, the pages and the
/// identities, in order.
fn sysinfo_lines(stdout: &str) -> Vec<String> {
    let shown = ["sysinfo: ", "boottime: ", "pages: ", "main: ", "child: "];
    stdout.lines().filter(|l| shown.iter().any(|s| l.contains(s))).map(str::to_string).collect()
}

/// The number after `name ` in `line`.
fn number(line: &str, name: &str) -> i64 {
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = words.iter().position(|w| *w == name).unwrap_or_else(|| panic!("no {name} in {line}"));
    words[at + 1].parse().unwrap_or_else(|_| panic!("{line}"))
}

/// The line of `lines` that starts with `prefix`.
fn line<'a>(lines: &'a [String], prefix: &str) -> &'a str {
    lines.iter().find(|l| l.starts_with(prefix)).unwrap_or_else(|| panic!("no line {prefix:?} in {lines:#?}"))
}

/// The host's memory in bytes, as /proc/meminfo's `MemTotal` says (sysinfo's `totalram` is the
/// same page count).
fn host_memory_bytes() -> i64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    let kb: i64 = meminfo.lines().find(|l| l.starts_with("MemTotal:")).and_then(|l| l.split_whitespace().nth(1)).and_then(|n| n.parse().ok()).unwrap();
    kb * 1024
}

#[test]
fn sysinfo_is_virtual_the_same_in_every_execution_and_in_the_replay() {
    let program = private_copy(&fixture("sysinfo_identity"), "sysinfo_identity");
    let p = program.to_str().unwrap();
    // Two searches of one seed, three executions each: every execution prints the same lines.
    let mut seen = Vec::new();
    for round in 0..2 {
        let out = out_dir(&format!("sysinfo-identity-{round}"));
        let run = dara_trace(&["-o", out.to_str().unwrap(), "--seed", "3", "--runs", "3", "--", p], Duration::from_secs(180));
        assert_eq!(run.code, 0, "{}", run.text());
        let lines = sysinfo_lines(&run.stdout);
        assert_eq!(lines.len(), 3 * 9, "nine lines from each of three executions\n{}", run.text());
        assert!(lines.chunks(9).all(|c| c == &lines[..9]), "the executions of one search printed different lines\n{lines:#?}");
        seen.push((out, lines[..9].to_vec()));
    }
    let lines = &seen[0].1;
    assert_eq!(lines, &seen[1].1, "two searches of one seed printed different lines");
    let start = line(lines, "start sysinfo: ");
    // The raw system call gets the answer the libc function gets.
    assert_eq!(line(lines, "start raw sysinfo: ").replacen("raw ", "", 1), start, "{lines:#?}");
    assert_eq!(line(lines, "after sleep raw sysinfo: ").replacen("raw ", "", 1), line(lines, "after sleep sysinfo: "), "{lines:#?}");
    // Uptime is the boot-time clock in whole seconds rounded up: 3600 s and a little virtual time.
    let boot_secs = |prefix: &str| -> i64 {
        let boot = line(lines, prefix);
        boot.rsplit(' ').next().and_then(|t| t.split('.').next()).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("{boot}"))
    };
    assert_eq!(boot_secs("start boottime: "), 3600, "{lines:#?}");
    let uptime = number(start, "uptime");
    assert!((3600..=3602).contains(&uptime), "{start}");
    // The sleep of 600 s passed in virtual time (the test would have timed out in real time).
    let later = line(lines, "after sleep sysinfo: ");
    assert!(number(later, "uptime") >= uptime + 600, "{later}");
    let later_boot = boot_secs("after sleep boottime: ");
    assert!((later_boot..=later_boot + 2).contains(&number(later, "uptime")), "uptime follows the clock ({later_boot} s): {later}");
    // No load, a fixed process count, the host's memory total, half of it free, all swap free.
    for shown in [start, later] {
        assert!(shown.contains(" loads 0 0 0 ") && shown.contains(" procs 100 "), "{shown}");
        assert!(shown.contains(" sharedram 0 bufferram 0 ") && shown.contains(" totalhigh 0 freehigh 0 "), "{shown}");
        let unit = number(shown, "mem_unit");
        assert_eq!(number(shown, "totalram") * unit, host_memory_bytes(), "{shown}");
        assert_eq!(number(shown, "freeram"), number(shown, "totalram") / 2, "{shown}");
        assert_eq!(number(shown, "freeswap"), number(shown, "totalswap"), "{shown}");
    }
    // glibc's page counts come from sysinfo too.
    let pages = line(lines, "pages: ");
    let page = number(pages, "page");
    assert_eq!(number(pages, "phys") * page, number(start, "totalram") * number(start, "mem_unit"), "{pages}");
    assert_eq!(number(pages, "avphys"), number(pages, "phys") / 2, "{pages}");
    // The replay shows the recorded answers, and --verify holds.
    let trace = seen[0].0.join("trace.bin");
    let replay = dara_replay(&[trace.to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(replay.code, 0, "{}", replay.text());
    assert_eq!(&sysinfo_lines(&replay.stdout), lines, "the replay saw another machine\n{}", replay.text());
    let verify = dara_replay(&["-q", "--verify", trace.to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(verify.code, 0, "{}", verify.text());
    assert!(verify.stdout.contains("verify: 2 more executions identical"), "{}", verify.text());
    assert_no_survivors(&program);
}

#[test]
fn a_host_pids_recording_s_replay_shows_the_recorded_session_and_memory() {
    let program = private_copy(&fixture("sysinfo_identity"), "sysinfo_identity_host");
    let out = out_dir("sysinfo-identity-recorded");
    let run = dara_trace(&["-o", out.to_str().unwrap(), "--host-pids", "--", program.to_str().unwrap()], Duration::from_secs(120));
    assert_eq!(run.code, 0, "{}", run.text());
    let lines = sysinfo_lines(&run.stdout);
    assert_eq!(lines.len(), 9, "{}", run.text());
    // The recording runs in dara-trace's session, which is this test's; its process group is its
    // own (dara makes the first command a group leader), the child's the same.
    // SAFETY: getsid(0) asks about the calling process.
    let session = i64::from(unsafe { libc::getsid(0) });
    let (main, child) = (line(&lines, "main: "), line(&lines, "child: "));
    for shown in [main, child] {
        assert_eq!((number(shown, "sid"), number(shown, "raw_sid")), (session, session), "{shown}");
        assert_eq!(number(shown, "ppid"), number(shown, "raw_ppid"), "{shown}");
        assert_eq!(number(shown, "pgrp"), number(shown, "pgid"), "{shown}");
        assert_eq!(number(shown, "pgrp"), number(main, "pgrp"), "{shown}");
    }
    // The replay runs in a PID namespace, whose session leader is outside it (the kernel says 0):
    // it shows the recorded session, and every other line as recorded.
    let trace = out.join("trace.bin");
    let replay = dara_replay(&[trace.to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(replay.code, 0, "{}", replay.text());
    assert_eq!(sysinfo_lines(&replay.stdout), lines, "the replay saw another session, group or machine\n{}", replay.text());
    let verify = dara_replay(&["-q", "--verify", trace.to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(verify.code, 0, "{}", verify.text());
    assert_no_survivors(&program);
}

/// A program that bounds its own address space to 200 MB reads back 200 MB, maps 64 KiB and is
/// refused 300 MB, in every execution and in the replay: dara's region does not count against
/// it. Before, the 64 KiB mapping failed ("BUG: exited with status 1"; vsftpd: "500 OOPS: mmap").
#[test]
fn an_address_space_limit_counts_the_program_s_own_mappings_only() {
    let program = private_copy(&fixture("address_limit"), "address_limit");
    let out = out_dir("address-limit");
    let run = dara_trace(&["-o", out.to_str().unwrap(), "--runs", "3", "--", program.to_str().unwrap()], Duration::from_secs(120));
    assert_eq!(run.code, 0, "{}", run.text());
    assert_eq!(run.stdout.matches("limit: 200 MiB (prlimit: 200 MiB)").count(), 3, "{}", run.text());
    assert_eq!(run.stdout.matches("64 KiB: mapped; 300 MB: refused").count(), 3, "{}", run.text());
    let verify = dara_replay(&["--verify", out.join("trace.bin").to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(verify.code, 0, "{}", verify.text());
    assert!(verify.stdout.contains("64 KiB: mapped; 300 MB: refused"), "{}", verify.text());
    assert_no_survivors(&program);
}
