//! Real servers of the corpus (docs/real-programs.md), each recorded with clients outside dara and
//! replayed with `--verify`, and searched in a closed-world test script that starts it and its
//! clients: a libuv echo server of our own (tests/fixtures/uv_echo.c: uv_loop, uv_timer,
//! uv_async, the thread pool) and Debian's PostgreSQL 15 (initdb, the postmaster and its
//! processes, psql), Apache httpd 2.4 (the event MPM: a child with a listener thread and
//! worker threads), unbound 1.17 (two threads sharing the DNS port) and Varnish Cache 7.1 (a
//! manager that compiles its VCL with cc, a cache process with worker threads) in front of
//! python3's http.server (searched in its script, and recorded with the backend left outside
//! dara: dara dials it for varnishd and plays it in the replay). postgres refuses to run as root, so it runs as `nobody` through `runuser`
//! (the test chowns its directory to that user). memcached, nginx and redis are in
//! real_programs.rs and redis*.rs.
mod common;

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::real::*;
use common::*;
use dara_scheduler::outside::OutsideWhat;

/// Debian's PostgreSQL 15 programs (scripts/install-deps.sh installs them).
const PG_BIN: &str = "/usr/lib/postgresql/15/bin";
/// The unprivileged user postgres runs as.
const PG_USER: &str = "nobody";
/// Executions of the postgres test script's search (the corpus rule: 20 without a false bug):
/// each is about 30,000 steps (initdb's processes, the server's start, six psql sessions, a fast
/// shutdown), 4.5 s on an idle machine.
const PG_SEARCH_RUNS: u64 = 20;
/// Address space of a postgres replay. A replay of a program with shared anonymous mappings
/// read `/dev/zero` whole for its symbols (branch replay-mem fixes it); bounded here so that it
/// fails alone rather than take the shared test machine's memory.
const REPLAY_ADDRESS_SPACE: libc::rlim_t = 4 << 30;

/// Executions of the varnish test script's search: each is about 13,500 to 17,500 steps (cc
/// compiling the VCL, the manager, the cache process's threads, the backend, six curl fetches),
/// about 1.6 s at load 5.
const VARNISH_SEARCH_RUNS: u64 = 10;

/// Lines each outside client of the recorded echo server sends.
const UV_LINES: &str = "30";

/// The echo server recorded while two clients and the quit request come from outside (the same
/// binary, run natively, after a probe connection that finds it listening); the recording serves every line right and replays with nobody outside.
#[test]
fn uv_echo_server_records_with_outside_clients_and_replays() {
    let program = private_copy(&fixture_with("uv_echo", &["-luv"]), "uv_echo_record");
    let port = free_ports(1).to_string();
    let out = out_dir("uv_echo_record");
    let server = Command::new(env!("CARGO_BIN_EXE_dara-trace"))
        .args(["-q", "-o", out.to_str().unwrap(), "--", program.to_str().unwrap(), "server", &port])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_listener(port.parse().unwrap(), Duration::from_secs(60), "uv_echo under dara-trace");
    let clients: Vec<_> = ["1", "2"].iter().map(|id| Command::new(&program).args(["client", &port, id, UV_LINES]).stdout(Stdio::null()).spawn().unwrap()).collect();
    for mut client in clients {
        assert!(client.wait().unwrap().success(), "an outside client got a wrong answer");
    }
    assert!(Command::new(&program).args(["quit", &port]).status().unwrap().success());
    let run = server.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert_eq!(run.status.code(), Some(0), "{stdout}{}", String::from_utf8_lossy(&run.stderr));
    assert!(stdout.contains("uv_echo: 4 connections, 60 jobs, 60 done"), "{stdout}");

    let trace = out.join("trace.bin");
    let t = dara_scheduler::trace::read_file(&trace).unwrap();
    let connects = t.outside.iter().filter(|e| matches!(e.what, OutsideWhat::Connect { .. })).count();
    assert_eq!(connects, 4, "the probe, the two clients and the quit request were recorded");
    assert!(threads_created(&trace) >= 1, "libuv's thread pool ran under control");
    replays_identically(&trace);
    assert_no_survivors(&program);
}

/// The echo server, two clients and the quit request in one test script, searched.
#[test]
fn uv_echo_test_script_searches_clean_and_replays() {
    let program = private_copy(&fixture_with("uv_echo", &["-luv"]), "uv_echo_search");
    let script = repo_root().join("tests/fixtures/scripts/uv_echo_test.sh");
    let port = free_ports(1).to_string();
    let command = [script.to_str().unwrap(), program.to_str().unwrap(), &port];
    let (last, run) = search_clean("uv_echo-search", SEARCH_RUNS, &[], &command);
    assert_eq!(run.stdout.matches("uv_echo_test: every answer was right").count() as u64, SEARCH_RUNS, "{}", run.text());
    assert!(threads_created(&last) >= 1, "libuv's thread pool ran under control");
    replays_identically(&last);
    let (again, _) = search_clean("uv_echo-search-again", SEARCH_RUNS, &[], &command);
    same_decisions(&last, &again);
    assert_no_survivors(&program);
    assert!(dara_shm_files().is_empty(), "{:?}", dara_shm_files());
}

/// Apache httpd under curl from outside: ten fetches of a page, then one Ctrl-C, which stops it
/// (exit 0). Apache sets `TCP_DEFER_ACCEPT` on its listener: before dara took it off, the first
/// fetch never reached the accept queue and the recording stopped as uncontrolled. The trace
/// replays with nobody outside.
#[test]
fn apache_under_curl_from_outside_records_and_replays() {
    const FETCHES: usize = 10;
    let port = free_ports(1).to_string();
    let out = out_dir("apache");
    let dir = out_dir("apache-data").join("apache");
    std::fs::create_dir_all(dir.join("html")).unwrap();
    std::fs::write(dir.join("html/index.html"), "served under dara\n").unwrap();
    // The child runs as www-data.
    for d in [dir.parent().unwrap(), &dir, &dir.join("html")] {
        std::fs::set_permissions(d, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    let template = std::fs::read_to_string(repo_root().join("tests/fixtures/apache.conf.in")).unwrap();
    let conf = dir.join("httpd.conf");
    std::fs::write(&conf, template.replace("@DIR@", dir.to_str().unwrap()).replace("@PORT@", &port)).unwrap();
    let apache = installed("apache2", "apache2");
    let mut server = Command::new(env!("CARGO_BIN_EXE_dara-trace"))
        .args(["-q", "-o", out.to_str().unwrap(), "--", apache.to_str().unwrap(), "-f", conf.to_str().unwrap(), "-D", "FOREGROUND"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_listener(port.parse().unwrap(), Duration::from_secs(30), "apache2 under dara-trace");
    let url = format!("http://127.0.0.1:{port}/");
    for fetch in 0..FETCHES {
        let curl = Command::new("curl").args(["-s", "-f", "-m", "30", &url]).output().expect("curl (run ./scripts/install-deps.sh)");
        assert!(curl.status.success(), "fetch {fetch}: {curl:?}");
        assert_eq!(String::from_utf8_lossy(&curl.stdout), "served under dara\n", "fetch {fetch}");
    }
    let (status, stderr) = ctrl_c(&mut server, Duration::from_secs(60));
    let log = std::fs::read_to_string(dir.join("error.log")).unwrap_or_default();
    assert_eq!(status.code(), Some(0), "one Ctrl-C stops apache2, and dara with its exit: {status:?} {stderr}\n{log}");
    assert!(log.contains("shutting down"), "apache2 saw the Ctrl-C: {log}");

    let trace = out.join("trace.bin");
    let t = dara_scheduler::trace::read_file(&trace).unwrap();
    let connects = t.outside.iter().filter(|e| matches!(e.what, OutsideWhat::Connect { .. })).count();
    assert_eq!(connects, FETCHES + 1, "every fetch was recorded, and the probe that waited for the listener");
    assert!(steps_with(&trace, dara_abi::Op::NetAccept) >= FETCHES, "the listener thread accepted every fetch");
    assert!(threads_created(&trace) >= 4, "the child's threads ran under control");
    std::fs::remove_file(dir.join("httpd.pid")).ok(); // a replay starts afresh
    replays_identically(&trace);
    assert!(processes_with(&["apache2", conf.to_str().unwrap()]).is_empty(), "an apache2 survived");
}

/// The test script `script` (in tests/fixtures/scripts/) with a free port, searched clean twice
/// with the same seed, each execution printing `shows`: the last trace, which replays identically
/// and whose decisions the second search repeated. No `program` process of this run survives.
fn script_searched_clean_twice(test: &str, script: &str, program: &str, shows: &str) -> PathBuf {
    script_searched_clean_twice_on(test, script, 1, SEARCH_RUNS, program, shows).0
}

/// Like [`script_searched_clean_twice`], with `ports` free ports from the one the script is given
/// and `runs` executions a search; also returns that port.
fn script_searched_clean_twice_on(test: &str, script: &str, ports: u16, runs: u64, program: &str, shows: &str) -> (PathBuf, String) {
    let script = repo_root().join("tests/fixtures/scripts").join(script);
    let port = free_ports(ports).to_string();
    let command = [script.to_str().unwrap(), &port];
    let (last, run) = search_clean(&format!("{test}-search"), runs, &[], &command);
    assert_eq!(run.stdout.matches(shows).count() as u64, runs, "{}", run.text());
    replays_identically(&last);
    let (again, _) = search_clean(&format!("{test}-search-again"), runs, &[], &command);
    same_decisions(&last, &again);
    assert!(processes_with(&[program, &format!("{test}_test.{port}.")]).is_empty(), "a {program} survived");
    assert!(dara_shm_files().is_empty(), "{:?}", dara_shm_files());
    (last, port)
}

/// Apache httpd in a closed-world test script (tests/fixtures/scripts/apache_test.sh: three pages
/// and a missing one fetched by curl, every body checked, SIGTERM), searched; the last execution
/// replays and the same seed gives the same decisions.
#[test]
fn apache_test_script_searches_clean_and_replays() {
    installed("apache2", "apache2");
    let last = script_searched_clean_twice("apache", "apache_test.sh", "apache2", "apache_test: every page was right");
    assert!(steps_with(&last, dara_abi::Op::NetAccept) >= 5, "the listener thread accepted curl's five connections");
}

/// Varnish Cache 7.1 in front of python3's http.server, both in a closed-world test script
/// (tests/fixtures/scripts/varnish_test.sh: two pages fetched twice through varnish by curl, the
/// second fetch a cache hit, a missing page, every body checked, SIGTERM to both), searched with
/// [`VARNISH_SEARCH_RUNS`] executions; the last execution replays and the same seed gives the
/// same decisions. varnishd's manager compiles its VCL with cc before it forks the cache process.
#[test]
fn varnish_in_front_of_python_searches_clean_and_replays() {
    installed("varnishd", "varnish");
    let (last, port) = script_searched_clean_twice_on("varnish", "varnish_test.sh", 2, VARNISH_SEARCH_RUNS, "varnishd", "varnish_test: every answer was right");
    assert!(threads_created(&last) >= 5, "the cache process's worker threads ran under control");
    assert!(steps_with(&last, dara_abi::Op::NetAccept) >= 8, "varnish and the backend accepted curl's and varnish's connections under control");
    assert!(processes_with(&["http.server", &format!("varnish_test.{port}.")]).is_empty(), "a python3 http.server survived");
}

/// A python3 http.server serving `dir` on `port`, outside dara (killed when dropped).
fn outside_backend(dir: &Path, port: u16) -> KilledOnDrop {
    // Debian's python3 (the one on PATH may be a pyenv shim).
    let child = Command::new("/usr/bin/python3").args(["-m", "http.server", &port.to_string(), "--bind", "127.0.0.1"]).current_dir(dir).stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("/usr/bin/python3");
    let backend = KilledOnDrop(child);
    wait_for_listener(port, Duration::from_secs(30), "python3's http.server");
    backend
}

/// Varnish recorded with its backend left outside dara (python3's http.server, started by the
/// test), under curl from outside: varnishd's connects to the backend are dialled by dara
/// (docs/outside.md, "Outside servers"), the backend's answers recorded; a page fetched twice is a
/// miss, then a hit; SIGINT to the manager stops varnishd (exit 0). The backend is then
/// stopped and the trace replays identically: dara plays the backend from the recording. Before,
/// the recording stopped at varnishd's first connect to its backend ("a server outside dara").
#[test]
fn varnish_with_its_backend_outside_dara_records_and_replays_without_it() {
    let varnishd = installed("varnishd", "varnish");
    let port = free_ports(2);
    let backend_port = port + 1;
    let data = out_dir("varnish-outside-backend-data");
    std::fs::create_dir_all(data.join("www")).unwrap();
    std::fs::write(data.join("www/index.html"), "served by the backend\n").unwrap();
    let backend = outside_backend(&data.join("www"), backend_port);
    let out = out_dir("varnish-outside-backend");
    let workdir = data.join("varnish");
    let mut server = Command::new(env!("CARGO_BIN_EXE_dara-trace"))
        .args(["-q", "-o", out.to_str().unwrap(), "--", varnishd.to_str().unwrap(), "-F", "-a", &format!("127.0.0.1:{port}"), "-b", &format!("127.0.0.1:{backend_port}")])
        .args(["-n", workdir.to_str().unwrap(), "-s", "malloc,16m", "-p", "thread_pools=1", "-p", "thread_pool_min=5"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_listener(port, Duration::from_secs(60), "varnishd under dara-trace");
    let url = format!("http://127.0.0.1:{port}/index.html");
    let mut cache_ids = Vec::new();
    for fetch in 0..2 {
        let curl = Command::new("curl").args(["-s", "-f", "-m", "30", "-D", "-", &url]).output().expect("curl (run ./scripts/install-deps.sh)");
        let text = String::from_utf8_lossy(&curl.stdout).to_string();
        assert!(curl.status.success() && text.ends_with("served by the backend\n"), "fetch {fetch}: {curl:?}");
        let ids = text.lines().find(|l| l.to_ascii_lowercase().starts_with("x-varnish:")).map(|l| l.split_whitespace().count() - 1).unwrap_or(0);
        cache_ids.push(ids);
    }
    assert_eq!(cache_ids, [1, 2], "the first fetch went to the backend, the second was a cache hit (X-Varnish ids)");
    // SIGINT to the manager alone (`kill <pid>` from outside, recorded): it stops the cache
    // process and exits 0. (A Ctrl-C reaches the cache process too, as a terminal's does; the
    // manager's poll may then see it die before it takes its own SIGINT, a choice dara makes, and
    // it restarts it and exits 64: "Manager got SIGINT".)
    let comm = |pid: u32| std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    // (dara-trace's own command line names varnishd too.)
    let ours: Vec<u32> = processes_with(&["varnishd", workdir.to_str().unwrap()]).into_iter().filter(|&pid| comm(pid).trim() != "dara-trace").collect();
    let parent = |pid: u32| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok().and_then(|s| s.rsplit(')').next()?.split_whitespace().nth(1)?.parse::<u32>().ok());
    let manager = *ours.iter().find(|&&pid| parent(pid).is_some_and(|p| !ours.contains(&p))).expect("varnishd's manager");
    // SAFETY: signalling a process this test started (through dara).
    unsafe { libc::kill(manager as i32, libc::SIGINT) };
    let status = wait_at_most(&mut server, Duration::from_secs(60)).expect("dara-trace ends with varnishd");
    let mut stderr = String::new();
    std::io::Read::read_to_string(server.stderr.as_mut().unwrap(), &mut stderr).ok();
    assert_eq!(status.code(), Some(0), "SIGINT stops varnishd's manager, and dara with its exit: {status:?} {stderr}");
    assert!(stderr.contains("manager dies"), "{stderr}");
    drop(backend);
    assert!(std::net::TcpStream::connect(("127.0.0.1", backend_port)).is_err(), "the backend still listens");

    let trace = out.join("trace.bin");
    let t = dara_scheduler::trace::read_file(&trace).unwrap();
    let backend_addr: std::net::SocketAddr = ([127, 0, 0, 1], backend_port).into();
    let dials = t.outside.iter().filter(|e| e.what == OutsideWhat::Dial { server: backend_addr, refused: false }).count();
    assert!(dials >= 1, "varnishd's connections to the backend were dialled by dara: {:?}", t.outside.iter().filter(|e| matches!(e.what, OutsideWhat::Dial { .. })).collect::<Vec<_>>());
    let from_backend: Vec<u8> = t.outside.iter().filter(|e| matches!(e.what, OutsideWhat::Data(_))).filter_map(|e| if let OutsideWhat::Data(b) = &e.what { Some(b.clone()) } else { None }).flatten().collect();
    assert!(String::from_utf8_lossy(&from_backend).contains("served by the backend"), "the backend's answer is recorded input");
    std::fs::remove_dir_all(&workdir).ok(); // a replay starts afresh
    replays_identically(&trace);
    assert!(processes_with(&["varnishd", workdir.to_str().unwrap()]).is_empty(), "a varnishd survived");
}

/// unbound (two threads sharing the port) under dig from outside: two queries over UDP and one
/// over TCP, each answered, then one Ctrl-C, which stops it (exit 0); the trace replays with
/// nobody outside. Before, its replay diverged at the first query ("expected recv e6, offered recv
/// e5"; 5 of 5 recordings): dara named the endpoints of an epoll set's interest list when a look
/// found something owed to them, which the recording's look did (the datagram from outside had
/// just been passed on) and the replay's did not.
#[test]
fn unbound_under_dig_from_outside_records_and_replays() {
    let unbound = installed("unbound", "unbound");
    installed("dig", "dnsutils");
    let port = free_ports(1).to_string();
    let out = out_dir("unbound");
    let dir = out_dir("unbound-data").join("unbound");
    std::fs::create_dir_all(&dir).unwrap();
    let template = std::fs::read_to_string(repo_root().join("tests/fixtures/unbound.conf.in")).unwrap();
    let conf = dir.join("unbound.conf");
    std::fs::write(&conf, template.replace("@DIR@", dir.to_str().unwrap()).replace("@PORT@", &port)).unwrap();
    let mut server = Command::new(env!("CARGO_BIN_EXE_dara-trace"))
        .args(["-q", "-o", out.to_str().unwrap(), "--", unbound.to_str().unwrap(), "-c", conf.to_str().unwrap()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Not `wait_for_listener`: a first connection from outside names the endpoints of unbound's
    // epoll sets in an order that hid the bug; its log says when it serves.
    let log = dir.join("unbound.log");
    let started = std::time::Instant::now();
    while !std::fs::read_to_string(&log).unwrap_or_default().contains("start of service") {
        assert!(started.elapsed() < Duration::from_secs(60), "unbound did not start under dara-trace");
        std::thread::sleep(Duration::from_millis(20));
    }
    for (name, answer, transport) in [("alpha", "10.1.2.3", "+notcp"), ("beta", "10.1.2.4", "+notcp"), ("gamma", "10.1.2.5", "+tcp")] {
        let dig = Command::new("dig").args(["+short", "+time=20", "+tries=1", transport, "-p", &port, "@127.0.0.1", &format!("{name}.dara.test")]).output().unwrap();
        assert_eq!(String::from_utf8_lossy(&dig.stdout).trim(), answer, "{name} over {transport}: {dig:?}");
    }
    let (status, stderr) = ctrl_c(&mut server, Duration::from_secs(60));
    let log = std::fs::read_to_string(dir.join("unbound.log")).unwrap_or_default();
    assert_eq!(status.code(), Some(0), "one Ctrl-C stops unbound, and dara with its exit: {status:?} {stderr}\n{log}");
    let trace = out.join("trace.bin");
    let t = dara_scheduler::trace::read_file(&trace).unwrap();
    let datagrams = t.outside.iter().filter(|e| matches!(e.what, OutsideWhat::Datagram(_))).count();
    assert_eq!(datagrams, 2, "both queries over UDP were recorded");
    replays_identically(&trace);
    assert!(processes_with(&["unbound", conf.to_str().unwrap()]).is_empty(), "an unbound survived");
}

/// unbound with two threads in a closed-world test script (tests/fixtures/scripts/unbound_test.sh:
/// a static local zone, two queries over UDP and one over TCP by dig, every answer checked,
/// SIGTERM), searched; the last execution replays and the same seed gives the same decisions.
/// Each thread binds its own UDP and TCP socket to the port (SO_REUSEPORT): before dara settled
/// deliveries to such a group, the first query stopped every execution after 2 s.
#[test]
fn unbound_test_script_searches_clean_and_replays() {
    installed("unbound", "unbound");
    let last = script_searched_clean_twice("unbound", "unbound_test.sh", "unbound", "unbound_test: every answer was right");
    assert!(threads_created(&last) >= 2, "unbound's threads ran under control");
}

/// A fresh directory owned by [`PG_USER`] (not an output directory: dara empties those).
fn postgres_dir(test: &str) -> PathBuf {
    let dir = out_dir(&format!("{test}-data")).join("pg");
    std::fs::create_dir_all(&dir).unwrap();
    let chown = Command::new("chown").arg(PG_USER).arg(&dir).status().unwrap();
    assert!(chown.success(), "chown {PG_USER} {}", dir.display());
    dir
}

/// `dara-replay --verify` of a postgres trace with its address space bounded.
fn postgres_replays_identically(trace: &Path) {
    let mut replay = Command::new(env!("CARGO_BIN_EXE_dara-replay"));
    replay.args(["-q", "--verify", trace.to_str().unwrap()]);
    // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        replay.pre_exec(|| {
            let limit = libc::rlimit { rlim_cur: REPLAY_ADDRESS_SPACE, rlim_max: REPLAY_ADDRESS_SPACE };
            if libc::setrlimit(libc::RLIMIT_AS, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    };
    let run = run_with_limit(replay, Duration::from_secs(400));
    assert_eq!(run.code, 0, "{}", run.text());
    assert!(run.stdout.contains("verify: 2 more executions identical"), "{}", run.text());
}

/// initdb, pg_ctl start, six checked psql commands and pg_ctl stop, all under dara
/// (tests/fixtures/scripts/postgres_test.sh), searched; the data directory is emptied before
/// every execution (`--setup`).
#[test]
fn postgres_test_script_searches_clean_and_replays() {
    let dir = postgres_dir("postgres-search");
    let script = repo_root().join("tests/fixtures/scripts/postgres_test.sh");
    let port = free_ports(1).to_string();
    let setup = format!("rm -rf {0}/data {0}/*.log {0}/.s.PGSQL.*", dir.display());
    let command = ["runuser", "-u", PG_USER, "--", script.to_str().unwrap(), dir.to_str().unwrap(), &port];
    let (last, run) = search_clean("postgres-search", PG_SEARCH_RUNS, &["--setup", &setup], &command);
    assert_eq!(run.stdout.matches("postgres_test: every answer was right").count() as u64, PG_SEARCH_RUNS, "{}", run.text());
    postgres_replays_identically(&last);
    assert!(processes_with(&["postgres", dir.to_str().unwrap()]).is_empty(), "a postgres survived");
    assert!(dara_shm_files().is_empty(), "{:?}", dara_shm_files());
}

/// The postmaster recorded while psql runs from outside over loopback TCP, then stopped by one
/// Ctrl-C to dara: the signal ends the postmaster's wait (an `Interrupt` choice), postgres runs
/// its fast shutdown to the end and exits 0, and so does dara. The recorded setup restores the
/// initdb'd directory before every replay.
#[test]
fn postgres_server_records_psql_from_outside_and_replays() {
    let dir = postgres_dir("postgres-record");
    let pristine = dir.join("pristine");
    let initdb = Command::new("runuser")
        .args(["-u", PG_USER, "--", &format!("{PG_BIN}/initdb"), "-D", pristine.to_str().unwrap(), "-A", "trust", "-U", "postgres", "--no-sync"])
        .output()
        .expect("runuser (util-linux)");
    assert!(initdb.status.success(), "initdb: {}", String::from_utf8_lossy(&initdb.stderr));
    let data = dir.join("data");
    let setup = format!("rm -rf {1} && cp -a {0} {1}", pristine.display(), data.display());
    let port = free_ports(1);
    let out = out_dir("postgres-record-out");
    let postgres = format!("{PG_BIN}/postgres");
    let mut server = Command::new(env!("CARGO_BIN_EXE_dara-trace"))
        .args(["-q", "-o", out.to_str().unwrap(), "--setup", &setup, "--", "runuser", "-u", PG_USER, "--", &postgres])
        .args(["-D", data.to_str().unwrap(), "-k", "", "-p", &port.to_string(), "-c", "listen_addresses=127.0.0.1"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_listener(port, Duration::from_secs(60), "postgres under dara-trace");
    let psql = Command::new("psql")
        .args(["-X", "-q", "-A", "-t", "-h", "127.0.0.1", "-p", &port.to_string(), "-U", "postgres", "-d", "postgres"])
        .args(["-c", "create table t(a int primary key, b text)", "-c", "insert into t select g, md5(g::text) from generate_series(1, 1000) g", "-c", "select count(*), sum(a) from t"])
        .output()
        .expect("psql (run ./scripts/install-deps.sh)");
    assert_eq!(String::from_utf8_lossy(&psql.stdout).trim(), "1000|500500", "{}", String::from_utf8_lossy(&psql.stderr));
    let (status, stderr) = ctrl_c(&mut server, Duration::from_secs(120));
    assert_eq!(status.code(), Some(0), "one Ctrl-C stops postgres, and dara with its exit: {stderr}");
    assert!(stderr.contains("received fast shutdown request") && stderr.contains("database system is shut down"), "postgres shut down on the first Ctrl-C: {stderr}");

    let trace = out.join("trace.bin");
    let t = dara_scheduler::trace::read_file(&trace).unwrap();
    let connects = t.outside.iter().filter(|e| matches!(e.what, OutsideWhat::Connect { .. })).count();
    assert!(connects >= 1, "psql's connection was recorded");
    postgres_replays_identically(&trace);
    assert!(processes_with(&["postgres", data.to_str().unwrap()]).is_empty(), "a postgres survived");
    assert!(dara_shm_files().is_empty(), "{:?}", dara_shm_files());
}

/// One HTTP/1.0 GET of `/` from 127.0.0.1:`port`: the whole answer (empty if refused).
fn http_get(port: u16) -> String {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) else { return String::new() };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
    let _ = stream.write_all(b"GET / HTTP/1.0\r\nHost: localhost\r\n\r\n");
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer
}

/// python3's http.server recorded while a client fetches a page again and again, stopped by a
/// SIGINT sent straight to python (`kill -INT <pid>`) while it serves: the signal lands while the
/// interpreter runs or while it waits, and either way it is recorded at a step (held back to the
/// next one when it runs: docs/outside.md), python's KeyboardInterrupt path ends it with status
/// 0, and the replay, which sends the signal at that step, verifies.
#[test]
fn python_http_server_stopped_by_a_sigint_while_serving_replays() {
    let port = free_ports(1);
    let www = out_dir("stopped-while-serving-www");
    std::fs::write(www.join("index.html"), "stopped while serving\n").unwrap();
    let out = out_dir("stopped-while-serving");
    let mut server = Command::new(env!("CARGO_BIN_EXE_dara-trace"))
        .args(["-q", "-o", out.to_str().unwrap(), "--", "/usr/bin/python3", "-m", "http.server", &port.to_string(), "--bind", "127.0.0.1"])
        .current_dir(&www)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_listener(port, Duration::from_secs(60), "python3's http.server under dara-trace");
    let client = std::thread::spawn(move || (0..200).take_while(|_| http_get(port).contains("stopped while serving")).count());
    std::thread::sleep(Duration::from_millis(300));
    let python = processes_with(&["http.server", &port.to_string()]).into_iter().filter(|p| std::fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default().trim().starts_with("python3")).collect::<Vec<_>>();
    assert_eq!(python.len(), 1, "{python:?}");
    // SAFETY: signalling the server this test started (through dara-trace).
    unsafe { libc::kill(python[0] as i32, libc::SIGINT) };
    let status = wait_at_most(&mut server, Duration::from_secs(60)).expect("dara-trace ends with the server");
    let served = client.join().unwrap();
    let (mut stdout, mut stderr) = (String::new(), String::new());
    std::io::Read::read_to_string(server.stdout.as_mut().unwrap(), &mut stdout).unwrap();
    std::io::Read::read_to_string(server.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(0), "{stdout} {stderr}");
    assert!(served >= 1 && stdout.contains("Keyboard interrupt received"), "{served} pages served; {stdout} {stderr}");
    let trace_path = out.join("trace.bin");
    let recorded = dara_scheduler::trace::read_file(&trace_path).unwrap();
    assert!(matches!(recorded.outcome, dara_scheduler::Outcome::Exited { code: 0, .. }), "{:?}", recorded.outcome);
    replays_identically(&trace_path);
    assert!(processes_with(&["http.server", &port.to_string()]).is_empty(), "a python3 survived");
    assert!(dara_shm_files().is_empty(), "{:?}", dara_shm_files());
}
