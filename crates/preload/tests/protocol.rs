//! The preload's side of the handoff protocol, against a minimal stand-in scheduler.
//!
//! The stand-in maps a region like `dara-trace` does, launches a small C program with the
//! preload, and grants posts one at a time (lowest posted slot first; a join waits for its target
//! to exit; no decision while a slot is STARTING). It answers every op with 0 except clock reads
//! (a fixed virtual time) and sleeps (the clock jumps to the deadline). That is enough for a
//! program with two threads and no contention; the real scheduler's integration tests cover the
//! rest.
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use dara_abi::handoff::{self, Answer, Futex, Waited};
use dara_abi::{
    splitmix64, state, Deadline, FutexMatch, Header, MutexKind, Op, Request, Slot, StartKind, Unsupported, MAGIC, MAX_SLOTS,
    MONOTONIC_BASE_NS, REALTIME_EPOCH_NS, REGION_SIZE, VERSION,
};

/// The virtual time the stand-in scheduler starts at.
const START_NS: u64 = 5_000_000_123;
const CPUS: u32 = 3;

fn preload_path() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().unwrap().parent().unwrap();
    for dir in [profile_dir, &profile_dir.join("deps")] {
        let candidate = dir.join("libdara_preload.so");
        if candidate.exists() {
            return candidate;
        }
    }
    panic!("libdara_preload.so not found next to {}", exe.display());
}

/// Compiles the target program; `tag` keeps the tests, which run in parallel, apart.
fn build_target(tag: &str) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/protocol_target.c");
    let out = std::env::temp_dir().join(format!("dara-preload-{tag}-{}", std::process::id()));
    let status = Command::new("cc")
        .args(["-O1", "-pthread", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .unwrap();
    assert!(status.success(), "cc failed");
    out
}

/// A region mapped in this process, shared with the child through /proc/<pid>/fd/<n>.
struct Region {
    fd: i32,
    base: *mut u8,
}

impl Region {
    fn new(seed: u64, version: u32) -> Region {
        // SAFETY: plain libc calls on a fresh memfd; the mapping is REGION_SIZE bytes.
        unsafe {
            let fd = libc::memfd_create(c"dara-test".as_ptr(), 0);
            assert!(fd >= 0);
            assert_eq!(libc::ftruncate(fd, REGION_SIZE as i64), 0);
            let base = libc::mmap(
                std::ptr::null_mut(),
                REGION_SIZE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            );
            assert_ne!(base, libc::MAP_FAILED);
            let header = base as *mut Header;
            (*header).magic = MAGIC;
            (*header).version = version;
            (*header).nslots = MAX_SLOTS as u32;
            (*header).cpus = CPUS;
            (*header).random_seed = seed;
            (*header).scheduler_pid = std::process::id();
            Region {
                fd,
                base: base as *mut u8,
            }
        }
    }

    fn path(&self) -> String {
        format!("/proc/{}/fd/{}", std::process::id(), self.fd)
    }

    fn header(&self) -> &Header {
        // SAFETY: the mapping is live for self's lifetime and starts with a Header.
        unsafe { &*(self.base as *const Header) }
    }

    fn slot(&self, i: u32) -> &Slot {
        // SAFETY: i < MAX_SLOTS, so the slot lies inside the mapping.
        unsafe { &*(self.base.add(dara_abi::slot_offset(i as usize)) as *const Slot) }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: unmapping and closing what `new` created.
        unsafe {
            libc::munmap(self.base as *mut libc::c_void, REGION_SIZE);
            libc::close(self.fd);
        }
    }
}

/// The kernel's futex (the stand-in only wakes: it polls the slots instead of sleeping).
struct Kernel;

impl Futex<std::sync::atomic::AtomicU32> for Kernel {
    fn wait(&self, word: &std::sync::atomic::AtomicU32, expected: u32) -> Waited {
        let timeout = libc::timespec { tv_sec: 0, tv_nsec: 50_000 };
        // SAFETY: FUTEX_WAIT reads a live atomic and a live timespec.
        let r = unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAIT, expected, &timeout as *const libc::timespec) };
        if r == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ETIMEDOUT) {
            Waited::TimedOut
        } else {
            Waited::Woken
        }
    }

    fn wake(&self, word: &std::sync::atomic::AtomicU32, count: u32) {
        // SAFETY: FUTEX_WAKE on a live atomic.
        unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, count) };
    }
}

/// One granted post, as the stand-in saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Seen {
    slot: u32,
    op: Op,
    /// The post, decoded as the scheduler decodes it.
    request: Request,
}

/// The request a posted slot carries (every post of the preload must decode).
fn decode(slot: &Slot) -> Request {
    let op = Op::from_u32(slot.op.load(Ordering::Relaxed)).expect("unknown op");
    let args: [u64; 4] = std::array::from_fn(|k| slot.args[k].load(Ordering::Relaxed));
    Request::decode(op, args).unwrap_or_else(|e| panic!("{e}"))
}

/// Runs `target` under the preload and the stand-in scheduler.
fn run(target: &Path, seed: u64, args: &[&str]) -> (Output, Vec<Seen>) {
    let region = Region::new(seed, VERSION);
    let mut child = Command::new(target)
        .args(args)
        .env("LD_PRELOAD", preload_path())
        .env("DARA_SHM", region.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let header = region.header();
    let mut seen = Vec::new();
    let mut now = START_NS;
    let mut holder: Option<u32> = None;
    let started = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if started.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!(
                "target hung; last ops: {:?}",
                &seen[seen.len().saturating_sub(20)..]
            );
        }
        let claimed = header
            .next_slot
            .load(Ordering::Acquire)
            .min(MAX_SLOTS as u32);
        let states: Vec<u32> = (0..claimed)
            .map(|i| region.slot(i).state.load(Ordering::Acquire))
            .collect();
        if let Some(h) = holder {
            if matches!(states[h as usize], state::RUNNING | state::GRANTED) {
                std::thread::yield_now();
                continue;
            }
            holder = None;
        }
        if states.contains(&state::STARTING) {
            std::thread::yield_now();
            continue;
        }
        let pick = (0..claimed).find(|&i| {
            let slot = region.slot(i);
            if states[i as usize] != state::POSTED {
                return false;
            }
            match decode(slot) {
                Request::ThreadJoin { target } => states.get(target as usize) == Some(&state::EXITED),
                _ => true,
            }
        });
        let Some(i) = pick else {
            std::thread::sleep(Duration::from_micros(50));
            continue;
        };
        let slot = region.slot(i);
        let request = decode(slot);
        let op = request.op();
        seen.push(Seen { slot: i, op, request });
        let result: i64 = match request {
            Request::ProcessStart { .. } => {
                let p = slot.process.load(Ordering::Relaxed) as usize;
                header.processes[p]
                    .random_seed
                    .store(splitmix64(seed ^ p as u64), Ordering::Release);
                0
            }
            Request::Sleep { deadline } => {
                now = now.max(deadline.to_ns());
                0
            }
            Request::CondWait { deadline, .. } => {
                // Time out at once: the deadline must be exactly the one the program asked for.
                now = now.max(deadline.to_ns());
                libc::ETIMEDOUT as i64
            }
            // A trylock on a held lock, a semaphore without units, a futex word that changed.
            Request::MutexTryLock { .. } => libc::EBUSY as i64,
            Request::SemTryWait { .. } => libc::EAGAIN as i64,
            Request::FutexWait { .. } => -(libc::EAGAIN as i64),
            Request::OnceBegin { .. } => !seen
                .iter()
                .rev()
                .skip(1)
                .any(|s: &Seen| s.request == request)
                as i64,
            Request::Unsupported(_) => {
                // Never granted: end the execution; the parked thread notices within a second.
                header.shutdown.store(1, Ordering::Release);
                let status = child.wait().unwrap();
                assert!(
                    started.elapsed() < Duration::from_secs(5),
                    "parked thread did not notice the shutdown"
                );
                let _ = status;
                break;
            }
            _ => 0,
        };
        handoff::grant(slot, Answer { result: result as u64, now_ns: now }, &Kernel);
        holder = if op == Op::ThreadExit { None } else { Some(i) };
    }
    let output = child.wait_with_output().unwrap();
    (output, seen)
}

fn line<'a>(stdout: &'a str, key: &str) -> &'a str {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix(key).and_then(|rest| rest.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("no `{key}` line in:\n{stdout}"))
}

fn timespec_line(ns: u64) -> String {
    format!("{} {:09}", ns / 1_000_000_000, ns % 1_000_000_000)
}

#[test]
fn protocol_threads_clocks_and_randomness() {
    let target = build_target("protocol");
    let (output, seen) = run(&target, 7, &[]);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(
        output.status.code(),
        Some(3),
        "stdout:\n{stdout}\nstderr:\n{stderr}\nops: {seen:?}"
    );

    // What the program saw.
    assert_eq!(
        line(&stdout, "realtime"),
        timespec_line(REALTIME_EPOCH_NS + START_NS)
    );
    assert_eq!(
        line(&stdout, "worker-monotonic"),
        timespec_line(MONOTONIC_BASE_NS + START_NS)
    );
    let slept = START_NS + 2_000_000_500;
    assert_eq!(
        line(&stdout, "after-sleep"),
        timespec_line(MONOTONIC_BASE_NS + slept)
    );
    assert_eq!(
        line(&stdout, "raw-realtime"),
        timespec_line(REALTIME_EPOCH_NS + slept),
        "trapped clock_gettime"
    );
    assert_eq!(line(&stdout, "joined"), "50");
    assert_eq!(line(&stdout, "futex-wake"), "0");
    assert_eq!(line(&stdout, "nprocs"), CPUS.to_string());
    assert_eq!(line(&stdout, "srand-repeats"), "1");
    assert_eq!(
        line(&stdout, "cond-timedwait"),
        "1 relock 1",
        "timed out, and holds the mutex again"
    );
    assert_eq!(line(&stdout, "once-runs"), "1");
    assert_eq!(line(&stdout, "sem"), "0 -1 1");
    assert_eq!(line(&stdout, "futex-wait"), "-1 1");

    // The ops, in order (clock reads included). After the join the main thread is alone again
    // (crates/preload/src/solo.rs): its private locks take no post of their own. The mutex it
    // took before the condition wait is handed to the model before the wait's first post (the
    // `Held` just before it); the trylock of the mutex it holds fails without a post and asks
    // the model (EBUSY); the rwlock is taken and released without a post; the second pthread_once finds
    // the object done and returns without a post.
    let ops: Vec<(u32, Op)> = seen.iter().map(|s| (s.slot, s.op)).collect();
    use Op::*;
    assert_eq!(
        ops,
        vec![
            (0, ProcessStart),
            (0, ClockRead),
            (0, ThreadCreate),
            (1, ThreadStart),
            (1, MutexLock),
            (1, MutexUnlock),
            (1, ClockRead),
            (1, ThreadExit),
            (0, ThreadJoin),
            (0, Sleep),
            (0, ClockRead),
            (0, ClockRead),
            (0, Held),
            (0, ClockRead),
            (0, CondWait),
            (0, MutexTryLock),
            (0, MutexUnlock),
            (0, OnceBegin),
            (0, OnceDone),
            (0, SemInit),
            (0, SemWait),
            (0, SemTryWait),
            (0, FutexWait),
            (0, FutexWake),
            (0, Yield),
            (0, ProcessExit),
        ]
    );
    let find = |op: Op| seen.iter().find(|s| s.op == op).unwrap().request;
    assert_eq!(find(ProcessStart), Request::ProcessStart { parent: None, kind: StartKind::Launched });
    assert_eq!(
        find(ThreadCreate),
        Request::ThreadCreate,
        "ThreadCreate carries no arguments: the child's slot is claimed after the grant"
    );
    assert_eq!(
        find(ThreadStart),
        Request::ThreadStart { creator: 0 },
        "ThreadStart names the creator's slot"
    );
    assert_eq!(find(ThreadJoin), Request::ThreadJoin { target: 1 });
    let Request::MutexUnlock { mutex, .. } = find(MutexUnlock) else { unreachable!() };
    assert_eq!(find(MutexLock), Request::MutexLock { mutex, kind: MutexKind::Normal, deadline: Deadline::Never });
    assert_eq!(find(Sleep), Request::Sleep { deadline: Deadline::At(slept) });
    assert!(matches!(find(FutexWake), Request::FutexWake { count: 1, .. }));
    let Request::CondWait { mutex: waited_with, deadline, .. } = find(CondWait) else { unreachable!() };
    assert_eq!(waited_with, mutex, "CondWait names the mutex");
    assert_eq!(
        deadline,
        Deadline::At(slept + 1_000_000_000),
        "CLOCK_REALTIME abstime -> virtual deadline"
    );
    assert!(matches!(find(SemWait), Request::SemWait { deadline: Deadline::Never, .. }));
    assert!(matches!(find(SemInit), Request::SemInit { value: 1, .. }));
    assert!(matches!(
        find(FutexWait),
        Request::FutexWait { expected: 1, deadline: Deadline::Never, matching: FutexMatch { bitset: u32::MAX, shared: false }, .. }
    ));
    assert_eq!(find(ProcessExit), Request::ProcessExit { status: 3 });

    // Randomness is a function of the seed.
    let (again, _) = run(&target, 7, &[]);
    let (other, _) = run(&target, 8, &[]);
    let again = String::from_utf8_lossy(&again.stdout).into_owned();
    let other = String::from_utf8_lossy(&other.stdout).into_owned();
    for key in ["getrandom", "raw-getrandom", "urandom", "at-random"] {
        assert_eq!(
            line(&stdout, key),
            line(&again, key),
            "{key} differs between runs with one seed"
        );
        assert_ne!(
            line(&stdout, key),
            line(&other, key),
            "{key} ignores the seed"
        );
    }
    assert_ne!(line(&stdout, "getrandom"), line(&stdout, "raw-getrandom"));
    std::fs::remove_file(&target).ok();
}

#[test]
fn raw_clone_is_reported_unsupported_and_shutdown_ends_the_process() {
    let target = build_target("clone");
    let (output, seen) = run(&target, 1, &["clone"]);
    assert_eq!(
        output.status.code(),
        Some(137),
        "stderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.stdout.is_empty(), "no process was created");
    let last = seen.last().unwrap();
    let Request::Unsupported(Unsupported::Syscall { nr, args: [flags, ..] }) = last.request else {
        panic!("the last post is no unsupported syscall: {:?}", last.request)
    };
    assert_eq!(nr, libc::SYS_clone as u64, "a clone without CLONE_THREAD that shares memory on a stack of its own");
    assert_eq!(flags & libc::CLONE_THREAD as u64, 0);
    assert_ne!(flags & libc::CLONE_VM as u64, 0);
    std::fs::remove_file(&target).ok();
}

#[test]
fn inert_without_dara_shm() {
    let target = build_target("inert");
    let output = Command::new(&target)
        .env("LD_PRELOAD", preload_path())
        .env_remove("DARA_SHM")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert_eq!(
        output.status.code(),
        Some(3),
        "stdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(line(&stdout, "joined"), "50");
    assert_eq!(line(&stdout, "srand-repeats"), "1");
    // Real time: after 2024-01-01 and far from dara's fixed epoch + a few seconds.
    let secs: u64 = line(&stdout, "realtime")
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(secs > REALTIME_EPOCH_NS / 1_000_000_000 + 86_400);
    let nprocs: i64 = line(&stdout, "nprocs").parse().unwrap();
    // SAFETY: plain sysconf query.
    assert_eq!(nprocs, unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) });
    std::fs::remove_file(&target).ok();
}

#[test]
fn version_mismatch_exits_125() {
    let target = build_target("version");
    let region = Region::new(1, VERSION + 1);
    let output = Command::new(&target)
        .env("LD_PRELOAD", preload_path())
        .env("DARA_SHM", region.path())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(125));
    assert_eq!(
        String::from_utf8_lossy(&output.stderr),
        "dara: preload/scheduler version mismatch\n"
    );
    assert!(output.stdout.is_empty());
    std::fs::remove_file(&target).ok();
}
