//! One thread of a target as /proc shows it: its scheduler state, CPU time and the system call it
//! sits in (the watchdog's evidence for "computing" versus "blocked in the kernel outside dara's
//! control"), its pending and caught signals, and waiting for it to exit.
use std::fs;

use super::syscall_name;

/// State letter from `/proc/<pid>/task/<tid>/stat` (`R`, `S`, `D`, `Z`, ...), None if gone.
pub fn thread_state(pid: u32, tid: u32) -> Option<char> {
    let stat = super::read_small(&format!("/proc/{pid}/task/{tid}/stat"))?;
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.chars().next()
}

/// Whether a thread of process `pid` is runnable (state `R`: it waits for a CPU, or runs) or in
/// uninterruptible sleep (`D`: the kernel works for it, as while it releases its memory).
pub fn has_thread_at_work(pid: u32) -> bool {
    thread_ids(pid).into_iter().any(|tid| matches!(thread_state(pid, tid), Some('R' | 'D')))
}

/// The number and first three arguments of the syscall a blocked thread is in, from
/// `/proc/<pid>/task/<tid>/syscall`. None if not in a syscall or unreadable.
pub fn blocked_syscall_raw(pid: u32, tid: u32) -> Option<(i64, [u64; 3])> {
    let text = super::read_small(&format!("/proc/{pid}/task/{tid}/syscall"))?;
    let mut fields = text.split_whitespace();
    let nr: i64 = fields.next()?.parse().ok()?;
    let mut args = [0u64; 3];
    for a in &mut args {
        *a = u64::from_str_radix(fields.next()?.trim_start_matches("0x"), 16).ok()?;
    }
    Some((nr, args))
}

/// The syscall a blocked thread is in, as "name(arg0, arg1, arg2)", from
/// `/proc/<pid>/task/<tid>/syscall`. None if not in a syscall or unreadable.
pub fn blocked_syscall(pid: u32, tid: u32) -> Option<String> {
    let text = super::read_small(&format!("/proc/{pid}/task/{tid}/syscall"))?;
    let mut fields = text.split_whitespace();
    let nr: i64 = fields.next()?.parse().ok()?;
    let args: Vec<&str> = fields.take(3).collect();
    let args: Vec<String> = args.iter().map(|a| shorten_arg(a)).collect();
    Some(format!("{}({})", syscall_name(nr), args.join(", ")))
}

/// Where a sleeping thread sleeps in the kernel, for a person reading a verdict: the kernel
/// function (`wchan`), and when it is in no system call what `/proc/.../syscall` says instead
/// ("-1": blocked outside a system call, e.g. in a page fault; "running").
pub fn sleeping_where(pid: u32, tid: u32) -> String {
    let read = |file: &str| fs::read_to_string(format!("/proc/{pid}/task/{tid}/{file}")).map(|t| t.trim().to_string()).unwrap_or_default();
    let wchan = read("wchan");
    let syscall = read("syscall");
    let mut parts = Vec::new();
    if !wchan.is_empty() && wchan != "0" {
        parts.push(format!("kernel function {wchan}"));
    }
    if blocked_syscall(pid, tid).is_none() && !syscall.is_empty() {
        parts.push(format!("/proc syscall \"{}\"", syscall.split_whitespace().next().unwrap_or("")));
    }
    parts.join(", ")
}

fn shorten_arg(hex: &str) -> String {
    u64::from_str_radix(hex.trim_start_matches("0x"), 16).map(|v| if v < 4096 { v.to_string() } else { format!("{v:#x}") }).unwrap_or_else(|_| hex.to_string())
}

/// What the watchdog reads about a thread: `/proc/<pid>/task/<tid>/stat` and schedstat.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThreadSample {
    /// Scheduler state letter (`R`, `S`, `D`, ...).
    pub state: char,
    /// CPU time the thread has used (user + system).
    pub cpu: std::time::Duration,
    /// Start time (clock ticks after boot): with the tid, the thread's identity, since tids are
    /// reused once pid_max wraps.
    pub start: u64,
    /// How many times the thread has been put on a CPU (schedstat), when the kernel says.
    pub runs: Option<u64>,
}

/// A thread's /proc stat files, opened once and read again at offset 0 for each sample: the
/// watchdog samples the token holder every few milliseconds, and opening the files each time
/// would look the thread's /proc entries up again and again (which also keeps the kernel busy
/// invalidating them when the thread's process is reaped). An open file stays bound to the
/// thread it was opened for: once that thread is gone it reads nothing, even if its tid is
/// reused.
pub struct ThreadFiles {
    stat: fs::File,
    /// Absent on kernels built without scheduler statistics.
    schedstat: Option<fs::File>,
}

impl ThreadFiles {
    /// Opens the files of thread `tid` of process `pid`; None if it is gone.
    pub fn open(pid: u32, tid: u32) -> Option<ThreadFiles> {
        let stat = fs::File::open(format!("/proc/{pid}/task/{tid}/stat")).ok()?;
        let schedstat = fs::File::open(format!("/proc/{pid}/task/{tid}/schedstat")).ok();
        Some(ThreadFiles { stat, schedstat })
    }

    /// Samples the thread; None if it is gone.
    pub fn sample(&self) -> Option<ThreadSample> {
        let stat = read_from_start(&self.stat)?;
        let fields: Vec<&str> = stat[stat.rfind(')')? + 2..].split_whitespace().collect();
        // state, utime, stime and starttime are fields 3, 14, 15 and 22 (1-based), counted from
        // the state (field 3).
        let state = fields.first()?.chars().next()?;
        let utime: u64 = fields.get(11)?.parse().ok()?;
        let stime: u64 = fields.get(12)?.parse().ok()?;
        let start: u64 = fields.get(19)?.parse().ok()?;
        // schedstat: nanoseconds on a CPU, nanoseconds waiting for one, times put on one. Finer
        // than stat's clock ticks.
        let schedstat = self.schedstat.as_ref().and_then(read_from_start);
        let mut sched = schedstat.as_deref().unwrap_or("").split_whitespace().map(|f| f.parse::<u64>().ok());
        let (run_ns, _, runs) = (sched.next().flatten(), sched.next().flatten(), sched.next().flatten());
        let cpu = match run_ns {
            Some(ns) => std::time::Duration::from_nanos(ns),
            None => ticks_to_duration(utime + stime),
        };
        Some(ThreadSample { state, cpu, start, runs })
    }
}

/// The whole text of an open /proc file, read from offset 0 (None if empty or unreadable: its
/// thread is gone).
fn read_from_start(file: &fs::File) -> Option<String> {
    use std::os::unix::fs::FileExt;
    let mut buf = [0u8; 1024];
    let n = file.read_at(&mut buf, 0).ok().filter(|&n| n > 0)?;
    String::from_utf8(buf[..n].to_vec()).ok()
}

/// Samples a thread once; None if it is gone.
pub fn thread_sample(pid: u32, tid: u32) -> Option<ThreadSample> {
    ThreadFiles::open(pid, tid)?.sample()
}

/// Clock ticks as a duration.
fn ticks_to_duration(ticks: u64) -> std::time::Duration {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    std::time::Duration::from_millis(ticks * 1000 / hz)
}

/// Whether the thread still exists.
fn thread_exists(pid: u32, tid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}/task/{tid}")).exists()
}

/// Waits up to `limit` until thread `tid` of process `pid` has exited, without looking its /proc
/// entries up while the kernel tears them down: a pidfd of the thread (`PIDFD_THREAD`) becomes
/// readable when it exits. Looking up `/proc/<pid>/task/<tid>` in a loop as the thread exits
/// made the kernel's invalidation of those entries (`release_task` -> `proc_flush_pid` ->
/// `shrink_dcache_parent`) race with dara's lookups. Kernels without thread pidfds fall back to
/// polling /proc with a growing pause.
///
/// A thread still there after `rescue_after` may finish exiting on any CPU: pinned beside a busy
/// thread, an exiting thread has waited seconds for its CPU (see `placement::let_run_anywhere`).
pub fn wait_thread_exit(pid: u32, tid: u32, rescue_after: std::time::Duration, limit: std::time::Duration) {
    let opened = super::thread_pidfd_open(tid);
    if let Ok(fd) = &opened {
        // An interrupted poll just ends the wait early.
        if !super::pidfd_exited_within(fd, rescue_after.min(limit)) {
            crate::placement::let_thread_run_anywhere(tid);
            super::pidfd_exited_within(fd, limit.saturating_sub(rescue_after));
        }
        return;
    }
    if opened.is_err_and(|e| e.raw_os_error() == Some(libc::ESRCH)) {
        return; // already gone
    }
    let deadline = std::time::Instant::now() + limit;
    let mut pause = std::time::Duration::from_micros(5);
    while thread_exists(pid, tid) && std::time::Instant::now() < deadline {
        std::thread::sleep(pause);
        pause = (pause * 2).min(std::time::Duration::from_millis(1));
    }
}

/// The tids of process `pid`'s threads (`/proc/<pid>/task`); empty when it is gone.
pub fn thread_ids(pid: u32) -> Vec<u32> {
    let Ok(dir) = fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    dir.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect()
}

/// A thread's signals as `/proc/<pid>/task/<tid>/status` shows them (kernel signal-set words).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Signals {
    /// Pending for the thread or its process (`SigPnd | ShdPnd`).
    pub pending: u64,
    /// With a handler (`SigCgt`).
    pub caught: u64,
}

/// The pending and caught signals of thread `tid` of `pid`; None when it is gone.
pub fn signals(pid: u32, tid: u32) -> Option<Signals> {
    let status = super::read_small(&format!("/proc/{pid}/task/{tid}/status"))?;
    let mask = |key: &str| status.lines().find_map(|l| l.strip_prefix(key)).and_then(|v| u64::from_str_radix(v.trim(), 16).ok()).unwrap_or(0);
    Some(Signals { pending: mask("SigPnd:") | mask("ShdPnd:"), caught: mask("SigCgt:") })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_sample_shows_cpu_time_grow_while_it_computes() {
        let (pid, tid) = (std::process::id(), unsafe_gettid());
        let before = thread_sample(pid, tid).expect("this thread exists");
        assert_eq!(before.state, 'R', "a thread reading its own stat is running");
        let mut x = 0u64;
        // Compute until the kernel has charged this thread some CPU time: measured, not timed.
        let after = loop {
            for i in 0..100_000u64 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
            }
            let now = thread_sample(pid, tid).unwrap();
            if now.cpu > before.cpu {
                break now;
            }
        };
        assert_eq!(after.start, before.start, "same thread, same start time");
        assert!(thread_sample(pid, u32::MAX - 1).is_none(), "no such thread");
    }

    #[test]
    fn waiting_for_a_thread_s_exit_returns_once_it_has_exited() {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let worker = std::thread::spawn(move || {
            tid_tx.send(unsafe_gettid()).unwrap();
            let _ = rx.recv();
        });
        let (pid, tid) = (std::process::id(), tid_rx.recv().unwrap());
        // Alive: a zero limit returns at once and the thread is still there.
        wait_thread_exit(pid, tid, std::time::Duration::ZERO, std::time::Duration::ZERO);
        assert!(thread_exists(pid, tid));
        drop(tx);
        // Exited: the wait returns (the limit is only a safety net) and the kernel drops the
        // thread from the task list right after.
        wait_thread_exit(pid, tid, std::time::Duration::from_millis(100), std::time::Duration::from_secs(600));
        worker.join().unwrap();
        let mut gone = false;
        for _ in 0..10_000 {
            gone = !thread_exists(pid, tid);
            if gone {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(gone, "thread {tid} still listed");
        // A thread that is gone: returns at once.
        wait_thread_exit(pid, tid, std::time::Duration::from_millis(100), std::time::Duration::from_secs(600));
    }

    fn unsafe_gettid() -> u32 {
        // SAFETY: gettid has no preconditions.
        unsafe { libc::syscall(libc::SYS_gettid) as u32 }
    }
}
