//! Helpers for the integration tests: build fixtures, run the real dara-trace / dara-replay
//! binaries with a time limit, read their traces, and check that nothing was left behind.
#![allow(dead_code)]

pub mod go;
pub mod real;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

static BUILD_LOCK: Mutex<()> = Mutex::new(());

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// Compiles tests/fixtures/NAME.{c,cc,rs} (once per test binary) and returns the executable.
pub fn fixture(name: &str) -> PathBuf {
    fixture_with(name, &[])
}

/// Like `fixture`, with extra compiler flags (e.g. `-static`); the flags are part of the cache key.
pub fn fixture_with(name: &str, flags: &[&str]) -> PathBuf {
    fixture_built_by(name, None, flags)
}

/// The C fixture NAME linked statically against musl (`musl-gcc -static`); a panic saying to run
/// scripts/install-deps.sh when musl-gcc is missing.
pub fn musl_fixture(name: &str) -> PathBuf {
    installed("musl-gcc", "musl-tools");
    fixture_built_by(name, Some("musl-gcc"), &["-static"])
}

/// The path of `program` on PATH, or a panic saying that scripts/install-deps.sh installs it
/// (from Debian's `package`).
pub fn installed(program: &str, package: &str) -> PathBuf {
    let found = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()).map(|d| d.join(program)).find(|p| p.is_file());
    found.unwrap_or_else(|| panic!("{program} is not installed: run scripts/install-deps.sh (as root), which installs Debian's {package}"))
}

/// Like `fixture_with`, compiled by `compiler` (e.g. `clang`) instead of the default for the
/// language; the compiler is part of the cache key.
pub fn fixture_built_by(name: &str, compiler: Option<&str>, flags: &[&str]) -> PathBuf {
    let _guard = BUILD_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let dir_fixtures = repo_root().join("tests/fixtures");
    let src = ["c", "cc", "rs"]
        .iter()
        .map(|ext| dir_fixtures.join(format!("{name}.{ext}")))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("no fixture source for {name}"));
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fixtures");
    std::fs::create_dir_all(&dir).unwrap();
    let mut suffix: String = compiler.into_iter().chain(flags.iter().copied()).map(|f| f.trim_start_matches('-').replace('/', "_")).collect::<Vec<_>>().join("_");
    if suffix.len() > 100 {
        // Long flag lists (library paths) would make file names over the 255-byte limit.
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        suffix.hash(&mut h);
        suffix = format!("{}_{:016x}", compiler.unwrap_or("default"), h.finish());
    }
    let exe = dir.join(if suffix.is_empty() { name.to_string() } else { format!("{name}.{suffix}") });
    let fresh = exe.metadata().and_then(|m| m.modified()).ok() > newest_source(&src);
    if !fresh {
        // Private to this process: two copies of the suite may build the same fixture at once. In
        // a directory of its own, since rustc writes its intermediate objects beside its output
        // under names made from the crate's (two rustcs of one fixture failed on each other's).
        let private = exe.with_extension(format!("tmp{}.d", std::process::id()));
        std::fs::create_dir_all(&private).unwrap();
        let tmp = private.join(name);
        let mut build = match src.extension().and_then(|e| e.to_str()) {
            Some("rs") => {
                let mut c = Command::new(compiler.unwrap_or("rustc"));
                c.args(["-O", "-g"]);
                c
            }
            Some("cc") => {
                let mut c = Command::new(compiler.unwrap_or("c++"));
                c.args(["-O1", "-g", "-pthread", "-Wall"]);
                c
            }
            _ => {
                let mut c = Command::new(compiler.unwrap_or("cc"));
                c.args(["-O1", "-g", "-pthread", "-Wall"]);
                c
            }
        };
        // Flags after the source, so libraries among them (-ldara_cov) resolve its references.
        let status = build.arg("-o").arg(&tmp).arg(&src).args(flags).status().expect("running the compiler");
        assert!(status.success(), "compiling {}", src.display());
        std::fs::rename(&tmp, &exe).unwrap();
        let _ = std::fs::remove_dir_all(&private);
    }
    exe
}

/// Modification time of `src` or of a fixture it includes (`#include "name.c"`: a twin built
/// from its buggy sibling), whichever is newest.
fn newest_source(src: &Path) -> Option<std::time::SystemTime> {
    let text = std::fs::read_to_string(src).unwrap_or_default();
    let included = text.lines().filter_map(|l| l.trim().strip_prefix("#include \"")?.strip_suffix('"')).map(|name| src.with_file_name(name));
    std::iter::once(src.to_path_buf()).chain(included).filter_map(|p| p.metadata().and_then(|m| m.modified()).ok()).max()
}

/// A copy of `program` private to one test, so the test can check afterwards that no process
/// running it survived (other tests run the same fixture concurrently). Private to this test
/// process too: two copies of the suite at once (the check that tests hold on a busy machine)
/// must neither overwrite each other's running copy ("Text file busy") nor see each other's
/// processes as survivors.
pub fn private_copy(program: &Path, test: &str) -> PathBuf {
    let dir = own_tmp("private").join(test);
    std::fs::create_dir_all(&dir).unwrap();
    let copy = dir.join(program.file_name().unwrap());
    copy_executable(program, &copy);
    copy
}

/// Copies the program `from` to `to` (mode 755) in a child process. Written from this process, the
/// copy's descriptor would be inherited by whatever another test thread forks meanwhile, and until
/// that child's exec, running the copy fails with "Text file busy" (it did in CI).
pub fn copy_executable(from: &Path, to: &Path) {
    let status = std::process::Command::new("install").args(["-m", "755"]).arg(from).arg(to).status().expect("install (coreutils)");
    assert!(status.success(), "install {} {}", from.display(), to.display());
}

/// Writes an executable script `path` with `text` (see [`copy_executable`] for why not in place).
#[allow(dead_code)]
pub fn write_script(path: &Path, text: &str) {
    let draft = path.with_extension("draft");
    std::fs::write(&draft, text).unwrap();
    copy_executable(&draft, path);
}

/// Asserts that no process runs `program` any more.
pub fn assert_no_survivors(program: &Path) {
    let left = processes_mentioning(program.to_str().unwrap());
    assert!(left.is_empty(), "processes of {} survived: {left:?}", program.display());
}

/// Directory holding libdara_cov.so for this build (next to the tools, or cargo's deps/).
pub fn cov_lib_dir() -> PathBuf {
    lib_dir("libdara_cov.so")
}

/// Directory holding `lib` (one of dara's link-time libraries) for this build.
fn lib_dir(lib: &str) -> PathBuf {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_dara-trace"));
    let dir = bin.parent().unwrap().to_path_buf();
    [dir.clone(), dir.join("deps")]
        .into_iter()
        .find(|d| d.join(lib).is_file())
        .unwrap_or_else(|| panic!("{lib} not found near {}: build the workspace first (cargo build --release)", dir.display()))
}

/// Builds tests/fixtures/NAME.c with clang's ThreadSanitizer instrumentation, linked against
/// libdara_tsan.so instead of the TSan runtime (the build line of docs/memory-preemption.md):
/// plain loads, stores and atomic operations all reach dara.
#[allow(dead_code)]
pub fn tsan_fixture(name: &str) -> PathBuf {
    let lib = lib_dir("libdara_tsan.so");
    let (dir, rpath) = (lib.to_str().unwrap().to_string(), format!("-Wl,-rpath,{}", lib.display()));
    fixture_built_by(name, Some("clang"), &["-fsanitize=thread", "-mllvm", "-tsan-instrument-read-before-write", "-fno-sanitize-link-runtime", "-L", &dir, "-ldara_tsan", &rpath])
}

/// `CARGO_TARGET_TMPDIR/<kind>/<this test process's pid>`: two copies of the suite at once (the
/// check that tests hold on a busy machine) must not remove or overwrite each other's files. The
/// first call in a process removes the directories of test processes that are gone and were last
/// written more than an hour ago (a failed test's traces stay to be looked at meanwhile).
fn own_tmp(kind: &str) -> PathBuf {
    static SWEPT: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(kind);
    let mut swept = SWEPT.lock().unwrap_or_else(|e| e.into_inner());
    if !swept.iter().any(|k| k == kind) {
        swept.push(kind.to_string());
        for entry in std::fs::read_dir(&base).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let gone = name.parse::<u32>().is_ok_and(|pid| pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists());
            let old = entry.metadata().and_then(|m| m.modified()).ok().and_then(|t| t.elapsed().ok()).is_some_and(|age| age > Duration::from_secs(3600));
            if gone && old {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
    base.join(std::process::id().to_string())
}

/// A fresh output directory for one test.
pub fn out_dir(test: &str) -> PathBuf {
    let dir = own_tmp("out").join(test);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
    pub wall: Duration,
}

impl Run {
    pub fn text(&self) -> String {
        format!("exit {}\n--- stdout\n{}\n--- stderr\n{}", self.code, self.stdout, self.stderr)
    }
}

/// Runs a prepared dara tool command (e.g. with its own environment) with a time limit.
pub fn run_with_limit(mut cmd: Command, limit: Duration) -> Run {
    let start = Instant::now();
    let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawning a dara tool");
    // Drain the pipes on threads so a chatty target cannot block on a full pipe; to the end, also
    // when a target writes bytes that are no UTF-8 (`xz -c`).
    fn drain(mut from: impl std::io::Read + Send + 'static) -> std::thread::JoinHandle<String> {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            from.read_to_end(&mut bytes).ok();
            String::from_utf8_lossy(&bytes).into_owned()
        })
    }
    let out_t = drain(child.stdout.take().unwrap());
    let err_t = drain(child.stderr.take().unwrap());
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let status = child.wait().unwrap();
            let stdout = out_t.join().unwrap();
            panic!("dara tool did not finish within {limit:?} (status {status:?}); stdout so far:\n{stdout}");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    Run { code: status.code().unwrap_or(-1), stdout: out_t.join().unwrap(), stderr: err_t.join().unwrap(), wall: start.elapsed() }
}

pub fn dara_trace(args: &[&str], limit: Duration) -> Run {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dara-trace"));
    cmd.args(args);
    run_with_limit(cmd, limit)
}

pub fn dara_replay(args: &[&str], limit: Duration) -> Run {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dara-replay"));
    cmd.args(args);
    run_with_limit(cmd, limit)
}

/// Runs a search over `fixture` and returns the run.
pub fn search(out: &Path, strategy: &str, seed: u64, runs: u64, program: &Path) -> Run {
    search_with(out, strategy, seed, runs, program, &[])
}

/// The wall-clock start every fixture search gives (`--epoch`): a search repeats with the same
/// seed given the same epoch, and a fixture may seed `rand` from `time(NULL)` (random_draw.c).
/// Without it dara takes the real time it started (docs/time.md).
pub const SEARCH_EPOCH: &str = "1790000000";

/// Like [`search`], with more dara-trace options (`--faults pause`, `--timers any`, ...).
pub fn search_with(out: &Path, strategy: &str, seed: u64, runs: u64, program: &Path, options: &[&str]) -> Run {
    let seed = seed.to_string();
    let runs = runs.to_string();
    let mut args = vec!["-q", "-o", out.to_str().unwrap(), "--strategy", strategy, "--seed", &seed, "--runs", &runs, "--epoch", SEARCH_EPOCH];
    args.extend_from_slice(options);
    args.extend(["--", program.to_str().unwrap()]);
    dara_trace(&args, Duration::from_secs(300))
}

/// Processes still alive whose command line mentions `needle` (a fixture path).
pub fn processes_mentioning(needle: &str) -> Vec<u32> {
    processes_with(&[needle])
}

/// Live processes whose command line has every one of `needles` (NUL separators read as spaces).
pub fn processes_with(needles: &[&str]) -> Vec<u32> {
    let me = std::process::id();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| *pid != me)
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            needles.iter().all(|n| cmdline.contains(n))
        })
        .collect()
}

/// Files in /dev/shm that dara could have left.
pub fn dara_shm_files() -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .map(|d| d.flatten().filter_map(|e| e.file_name().into_string().ok()).filter(|n| n.to_lowercase().contains("dara")).collect())
        .unwrap_or_default()
}

/// Two runs of one seed found the bug in the same execution with byte-identical decision lists.
#[allow(dead_code)]
pub fn same_decisions(a: &Path, b: &Path) {
    let ta = dara_scheduler::trace::read_file(a).unwrap();
    let tb = dara_scheduler::trace::read_file(b).unwrap();
    assert_eq!(ta.header.execution, tb.header.execution, "same seed found the bug in a different execution");
    assert!(dara_scheduler::trace::decision_bytes(&ta) == dara_scheduler::trace::decision_bytes(&tb), "decision lists of {} and {} differ", a.display(), b.display());
}

/// `search`, run into the directory it is given, finds a SIGABRT bug whose trace has at least
/// `min_points` memory-level steps; the bug replays ([`replays`]), and the same search again finds
/// it in the same execution with the same decisions. `what` says which search, for messages.
#[allow(dead_code)]
pub fn found_with_memory_points(tag: &str, what: &str, min_points: usize, search: impl Fn(&Path) -> Run) {
    let out = out_dir(tag);
    let run = search(&out);
    assert_eq!(run.code, 1, "expected the bug: {what}\n{}", run.text());
    assert!(run.stderr.contains("SIGABRT"), "{}", run.text());
    let bug = out.join("bug-0001/trace.bin");
    let recorded = dara_scheduler::trace::read_file(&bug).unwrap();
    let points = recorded.steps.iter().filter(|s| matches!(s.choice.op, dara_abi::Op::MemoryRead | dara_abi::Op::MemoryWrite)).count();
    assert!(points >= min_points, "memory accesses were scheduling points ({points} of at least {min_points})");
    replays(&bug, "SIGABRT");
    let again = out_dir(&format!("{tag}-again"));
    let run2 = search(&again);
    assert_eq!(run2.code, 1, "the same seed did not find the bug again: {what}\n{}", run2.text());
    same_decisions(&bug, &again.join("bug-0001/trace.bin"));
}

/// The bug in `bug` replays 20 times in a row showing `shows`, and `--verify` holds.
#[allow(dead_code)]
pub fn replays(bug: &Path, shows: &str) {
    for i in 0..20 {
        let replay = dara_replay(&["-q", bug.to_str().unwrap()], Duration::from_secs(60));
        assert_eq!(replay.code, 1, "replay {i} did not reproduce the bug\n{}", replay.text());
        assert!(replay.stdout.contains(shows), "replay {i} shows a different outcome\n{}", replay.text());
    }
    let verify = dara_replay(&["-q", "--verify", bug.to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(verify.code, 1, "--verify\n{}", verify.text());
    assert!(verify.stdout.contains("verify: 2 more executions identical"), "{}", verify.text());
}


/// A base port whose `count` ports are free now (TCP and UDP), different for every call in this test binary
/// (tests run in parallel) and for concurrent test binaries (by pid). Below the ephemeral range,
/// so no client connection takes one of them between executions.
#[allow(dead_code)]
pub fn free_ports(count: u16) -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let start = 20000 + (std::process::id() % 400) as u16 * 30;
    loop {
        let base = start + NEXT.fetch_add(count, Ordering::Relaxed);
        assert!(base < 32000, "no {count} free ports below 32000");
        if (base..base + count).all(|p| binds_plainly(libc::SOCK_STREAM, p) && binds_plainly(libc::SOCK_DGRAM, p)) && reserve_ports(base, count) {
            return base;
        }
    }
}

/// Whether a socket of `kind` binds 127.0.0.1:`port` without `SO_REUSEADDR`, as most fixtures
/// and many servers bind. (std's `TcpListener::bind` sets `SO_REUSEADDR`, which succeeds while a
/// connection an earlier test made from that port lingers in TIME_WAIT; the server under test
/// then failed to listen and its exit was reported as a bug.)
fn binds_plainly(kind: libc::c_int, port: u16) -> bool {
    // SAFETY: plain socket calls on a descriptor this function owns and closes; `addr` lives
    // across the bind.
    unsafe {
        let fd = libc::socket(libc::AF_INET, kind | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return false;
        }
        let mut addr: libc::sockaddr_in = std::mem::zeroed();
        addr.sin_family = libc::AF_INET as libc::sa_family_t;
        addr.sin_port = port.to_be();
        addr.sin_addr.s_addr = u32::from(std::net::Ipv4Addr::LOCALHOST).to_be();
        let bound = libc::bind(fd, (&addr as *const libc::sockaddr_in).cast(), std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t) == 0;
        libc::close(fd);
        bound
    }
}

/// Reserves ports `base..base + count` for this test process's lifetime against other test
/// processes (another copy of the suite running at once would otherwise pick the same free port
/// for its own server, and a script under dara would reach the other suite's server): one lock
/// file per port, locked and kept open until the process exits.
fn reserve_ports(base: u16, count: u16) -> bool {
    use std::os::fd::AsRawFd;
    static HELD: std::sync::Mutex<Vec<std::fs::File>> = std::sync::Mutex::new(Vec::new());
    let dir = std::env::temp_dir().join("dara-test-ports");
    let _ = std::fs::create_dir_all(&dir);
    let mut taken = Vec::new();
    for port in base..base + count {
        let Ok(file) = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(dir.join(port.to_string())) else { return false };
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            return false;
        }
        taken.push(file);
    }
    HELD.lock().unwrap_or_else(|e| e.into_inner()).extend(taken);
    true
}

/// Sends SIGINT to `child` after `delay` and waits (at most 20 s) for it to exit.
#[allow(dead_code)]
pub fn interrupt_after(child: &mut std::process::Child, delay: Duration) -> std::process::ExitStatus {
    std::thread::sleep(delay);
    // SAFETY: sending a signal to our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    wait_at_most(child, Duration::from_secs(20)).expect("dara-trace did not stop after SIGINT")
}

/// Waits for `child` to exit, at most `limit`; None (the child still running) when it did not.
#[allow(dead_code)]
pub fn wait_at_most(child: &mut std::process::Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return Some(s);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether the machine's CPU has `flag` in /proc/cpuinfo.
pub fn cpu_has(flag: &str) -> bool {
    std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default().lines().filter(|l| l.starts_with("flags")).any(|l| l.split_whitespace().any(|f| f == flag))
}

/// Whether this machine's CPU hands out random numbers (RDRAND) and cannot fault on `cpuid`, so
/// that dara cannot hide them from a program (many AMD hosts and VMs; docs/determinism.md).
pub fn rdrand_cannot_be_hidden() -> bool {
    cpu_has("rdrand") && !cpu_has("cpuid_fault")
}

/// A child process a test started (a server, a CPU hog), killed and reaped when dropped.
pub struct KilledOnDrop(pub std::process::Child);

impl Drop for KilledOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
