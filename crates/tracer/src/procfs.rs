//! What /proc says about a target thread: its scheduler state and the syscall it sits in (used by
//! the watchdog to tell "computing" from "blocked in the kernel outside dara's control"), about
//! its process (end, group, signals), and about the UDP ports bound in its network namespace.
use std::fs;

/// State letter from /proc/<pid>/task/<tid>/stat (`R`, `S`, `D`, `Z`, ...), None if gone.
pub fn thread_state(pid: u32, tid: u32) -> Option<char> {
    let stat = fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.chars().next()
}

/// The number and first three arguments of the syscall a blocked thread is in, from
/// /proc/<pid>/task/<tid>/syscall. None if not in a syscall or unreadable.
pub fn blocked_syscall_raw(pid: u32, tid: u32) -> Option<(i64, [u64; 3])> {
    let text = fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall")).ok()?;
    let mut fields = text.split_whitespace();
    let nr: i64 = fields.next()?.parse().ok()?;
    let mut args = [0u64; 3];
    for a in &mut args {
        *a = u64::from_str_radix(fields.next()?.trim_start_matches("0x"), 16).ok()?;
    }
    Some((nr, args))
}

/// Inode of the pipe or socket behind descriptor `fd` of process `pid` (`pipe:[N]`), if any.
pub fn fd_inode(pid: u32, fd: u64) -> Option<u64> {
    let link = fs::read_link(format!("/proc/{pid}/fd/{fd}")).ok()?;
    let link = link.to_str()?;
    let inside = link.strip_prefix("pipe:[").or_else(|| link.strip_prefix("socket:["))?;
    inside.strip_suffix(']')?.parse().ok()
}

/// The syscall a blocked thread is in, as "name(arg0, arg1, arg2)", from
/// /proc/<pid>/task/<tid>/syscall. None if not in a syscall or unreadable.
pub fn blocked_syscall(pid: u32, tid: u32) -> Option<String> {
    let text = fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall")).ok()?;
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

/// The file name of the program process `pid` runs (its executable), None if unreadable.
pub fn program_name(pid: u32) -> Option<String> {
    let exe = fs::read_link(format!("/proc/{pid}/exe")).ok()?;
    Some(exe.file_name().map_or_else(|| exe.display().to_string(), |n| n.to_string_lossy().into_owned()))
}

/// A NUL-terminated string at `addr` in process `pid` (at most 4 KiB), for diagnostics.
pub fn c_string_of(pid: u32, addr: u64) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut mem = fs::File::open(format!("/proc/{pid}/mem")).ok()?;
    mem.seek(SeekFrom::Start(addr)).ok()?;
    let mut buf = vec![0u8; 4096];
    let n = mem.read(&mut buf).ok()?;
    let end = buf[..n].iter().position(|&b| b == 0)?;
    Some(String::from_utf8_lossy(&buf[..end]).into_owned())
}

/// Whether `sig` sent now would terminate process `pid`: not caught, not ignored, not blocked
/// (/proc/<pid>/status), and terminating by default.
pub fn signal_terminates(pid: u32, sig: i32) -> bool {
    if sig == libc::SIGKILL {
        return true;
    }
    if !(1..=64).contains(&sig) || matches!(sig, libc::SIGCHLD | libc::SIGCONT | libc::SIGURG | libc::SIGWINCH | libc::SIGSTOP | libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU) {
        return false;
    }
    let bit = 1u64 << (sig - 1);
    signal_masks(pid, &["SigCgt:", "SigIgn:", "SigBlk:"]).is_some_and(|masks| masks & bit == 0)
}

/// Whether process `pid` has a handler for `sig` (/proc/<pid>/status).
pub fn signal_caught(pid: u32, sig: i32) -> bool {
    (1..=64).contains(&sig) && signal_masks(pid, &["SigCgt:"]).is_some_and(|caught| caught & (1u64 << (sig - 1)) != 0)
}

/// The union of the signal masks named by `keys` in /proc/<pid>/status (None if it is gone).
fn signal_masks(pid: u32, keys: &[&str]) -> Option<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let mask = |key: &str| status.lines().find_map(|l| l.strip_prefix(key)).and_then(|v| u64::from_str_radix(v.trim(), 16).ok()).unwrap_or(0);
    Some(keys.iter().fold(0, |all, key| all | mask(key)))
}

/// A pidfd for `pid` (None if it is already gone).
pub fn pidfd_open(pid: u32) -> Option<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::c_long, 0 as libc::c_long) };
    // SAFETY: a fresh descriptor nothing else owns.
    (fd >= 0).then(|| unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) })
}

/// SIGKILLs the process behind a pidfd (never a recycled pid).
pub fn pidfd_kill(fd: &std::os::fd::OwnedFd) {
    pidfd_signal(fd, libc::SIGKILL);
}

/// Sends `sig` to the process behind a pidfd (never a recycled pid).
pub fn pidfd_signal(fd: &std::os::fd::OwnedFd, sig: i32) {
    use std::os::fd::AsRawFd;
    let info = dara_siginfo(sig);
    // SAFETY: pidfd_send_signal with a live pidfd and a siginfo that lives across the call.
    unsafe { libc::syscall(libc::SYS_pidfd_send_signal, fd.as_raw_fd(), sig, &info as *const libc::siginfo_t, 0u32) };
}

/// Sends `sig` to thread `tid` of process `pid`, marked as dara's like [`pidfd_signal`].
pub fn thread_signal(pid: u32, tid: u32, sig: i32) {
    let info = dara_siginfo(sig);
    // SAFETY: rt_tgsigqueueinfo takes integers and a siginfo that lives across the call.
    unsafe { libc::syscall(libc::SYS_rt_tgsigqueueinfo, pid as libc::c_long, tid as libc::c_long, sig as libc::c_long, &info as *const libc::siginfo_t) };
}

/// A siginfo for a signal of dara's own: `SI_QUEUE` (the only kind the kernel lets one process
/// describe to another) with [`dara_abi::DARA_SIGNAL_VALUE`] as its value.
fn dara_siginfo(sig: i32) -> libc::siginfo_t {
    /// siginfo_t's first fields: si_signo, si_errno, si_code, then (for SI_QUEUE) si_pid and
    /// si_uid at 16 and 20 and the value at 24.
    #[repr(C)]
    struct Queued {
        signo: i32,
        errno: i32,
        code: i32,
        _pad: i32,
        pid: i32,
        uid: u32,
        value: u64,
    }
    const _: () = assert!(std::mem::size_of::<Queued>() <= std::mem::size_of::<libc::siginfo_t>());
    // SAFETY: an all-zero siginfo_t is valid plain data.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    let queued = Queued { signo: sig, errno: 0, code: libc::SI_QUEUE, _pad: 0, pid: 0, uid: 0, value: dara_abi::DARA_SIGNAL_VALUE };
    // SAFETY: `Queued` is a prefix of siginfo_t's layout and fits in it (checked above).
    unsafe { std::ptr::write(&mut info as *mut libc::siginfo_t as *mut Queued, queued) };
    info
}

/// Reaps `pid` if it is an exited child of dara; true when it is reaped or not dara's to reap.
pub fn reap_if_child(pid: u32) -> bool {
    let mut status = 0;
    // SAFETY: waitpid writes the status into a local.
    let rc = unsafe { libc::waitpid(pid as i32, &mut status, libc::WNOHANG | libc::__WALL) };
    rc != 0
}

/// The process group of `pid` as the process itself names it (inside its PID namespace, if it
/// runs in one): the last number of `NSpgid:` in /proc/<pid>/status.
pub fn process_group(pid: u32) -> Option<u32> {
    namespace_ids(pid, "NSpgid:")?.last().copied()
}

/// The process's pid in each PID namespace it is in, outermost (dara's) first: `NSpid:` of
/// /proc/<pid>/status. One number when the process runs in dara's own namespace.
pub fn namespace_pids(pid: u32) -> Option<Vec<u32>> {
    namespace_ids(pid, "NSpid:")
}

fn namespace_ids(pid: u32, field: &str) -> Option<Vec<u32>> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix(field))?;
    line.split_whitespace().map(|n| n.parse().ok()).collect()
}

/// What the watchdog reads about a thread: /proc/<pid>/task/<tid>/stat and schedstat.
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

/// Whether the process behind `pidfd` has ended (its pidfd is readable), whatever /proc now
/// says about the pid.
pub fn pidfd_exited(pidfd: &std::os::fd::OwnedFd) -> bool {
    let mut p = libc::pollfd { fd: std::os::fd::AsRawFd::as_raw_fd(pidfd), events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd, zero timeout.
    unsafe { libc::poll(&mut p, 1, 0) > 0 && p.revents & libc::POLLIN != 0 }
}

/// The wait status of dara's own child behind `pidfd` once it has ended, without reaping it
/// (`waitid(P_PIDFD, WEXITED | WNOHANG | WNOWAIT)`): None while it runs or once it is reaped.
pub fn child_status(pidfd: &std::os::fd::OwnedFd) -> Option<i32> {
    // SAFETY: an all-zero siginfo is a valid value for waitid to fill in.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    let id = std::os::fd::AsRawFd::as_raw_fd(pidfd) as libc::id_t;
    // SAFETY: waitid writes only into the local siginfo.
    let rc = unsafe { libc::waitid(libc::P_PIDFD, id, &mut info, libc::WEXITED | libc::WNOHANG | libc::WNOWAIT | libc::__WALL) };
    // SAFETY: after a successful waitid the siginfo holds a SIGCHLD record (si_pid 0: none yet).
    let (pid, status) = unsafe { (info.si_pid(), info.si_status()) };
    if rc != 0 || pid == 0 {
        return None;
    }
    // Back to the wait(2) encoding the callers decode.
    Some(match info.si_code {
        libc::CLD_EXITED => (status & 0xff) << 8,
        _ => status & 0x7f,
    })
}

/// Clock ticks as a duration.
fn ticks_to_duration(ticks: u64) -> std::time::Duration {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    std::time::Duration::from_millis(ticks * 1000 / hz)
}

/// Whether a process has ended, as /proc tells.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProcessEnd {
    Running,
    /// Dead, not yet reaped: its wait status (`exit_code` of /proc/<pid>/stat).
    Zombie(i32),
    /// No such process (reaped already, or never was).
    Gone,
}

/// Reads /proc/<pid>/stat. A zombie thread-group leader whose other threads still run (its main
/// thread called `pthread_exit`) is a running process.
pub fn process_end(pid: u32) -> ProcessEnd {
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else { return ProcessEnd::Gone };
    let Some(close) = stat.rfind(')') else { return ProcessEnd::Gone };
    // Fields after the command: state is field 3, num_threads 20, exit_code 52 (1-based).
    let fields: Vec<&str> = stat[close + 2..].split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3).copied();
    if field(3) != Some("Z") || field(20).and_then(|t| t.parse::<u32>().ok()).is_some_and(|t| t > 1) {
        return ProcessEnd::Running;
    }
    ProcessEnd::Zombie(field(52).and_then(|c| c.parse().ok()).unwrap_or(0))
}

/// Whether the thread still exists.
fn thread_exists(pid: u32, tid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}/task/{tid}")).exists()
}

/// `pidfd_open` flag for a pidfd of one thread, readable once that thread has exited (Linux 6.9;
/// the value is `O_EXCL`).
const PIDFD_THREAD: libc::c_long = libc::O_EXCL as libc::c_long;

/// Waits up to `limit` until thread `tid` of process `pid` has exited, without looking its /proc
/// entries up while the kernel tears them down: a pidfd of the thread (`PIDFD_THREAD`) becomes
/// readable when it exits. Looking up `/proc/<pid>/task/<tid>` in a loop as the thread exits
/// made the kernel's invalidation of those entries (`release_task` -> `proc_flush_pid` ->
/// `shrink_dcache_parent`) race with dara's lookups. Kernels without thread pidfds fall back to
/// polling /proc with a growing pause.
pub fn wait_thread_exit(pid: u32, tid: u32, limit: std::time::Duration) {
    // SAFETY: pidfd_open takes a tid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, tid as libc::c_long, PIDFD_THREAD) };
    if fd >= 0 {
        use std::os::fd::{AsRawFd, FromRawFd};
        // SAFETY: a fresh descriptor nothing else owns.
        let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) };
        let mut p = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        let ms = limit.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd; an interrupted poll just ends the wait early.
        unsafe { libc::poll(&mut p, 1, ms) };
        return;
    }
    if std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
        return; // already gone
    }
    let deadline = std::time::Instant::now() + limit;
    let mut pause = std::time::Duration::from_micros(5);
    while thread_exists(pid, tid) && std::time::Instant::now() < deadline {
        std::thread::sleep(pause);
        pause = (pause * 2).min(std::time::Duration::from_millis(1));
    }
}

/// The tids of process `pid`'s threads (/proc/<pid>/task); empty when it is gone.
pub fn thread_ids(pid: u32) -> Vec<u32> {
    let Ok(dir) = fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    dir.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect()
}

/// Whether a UDP socket (IPv4 or IPv6) is bound to local `port` in the network namespace of
/// process `pid`, from /proc/<pid>/net/udp and udp6. True when neither table can be read.
pub fn udp_port_bound(pid: u32, port: u16) -> bool {
    let tables: Vec<String> = ["udp", "udp6"].iter().filter_map(|t| fs::read_to_string(format!("/proc/{pid}/net/{t}")).ok()).collect();
    tables.is_empty() || tables.iter().any(|t| udp_table_has_port(t, port))
}

/// Whether a /proc/net/udp{,6} table lists a socket whose local address ("ADDR:PORT", hex) has
/// `port`.
fn udp_table_has_port(table: &str, port: u16) -> bool {
    table.lines().skip(1).filter_map(|l| l.split_whitespace().nth(1)?.rsplit_once(':')).any(|(_, p)| u16::from_str_radix(p, 16) == Ok(port))
}

/// Inodes of the TCP sockets listening on local `port` in the network namespace of process
/// `pid` (/proc/<pid>/net/tcp and tcp6: state 0A, inode in the tenth column).
pub fn tcp_listener_inodes(pid: u32, port: u16) -> Vec<u64> {
    let wanted = format!(":{port:04X}");
    ["tcp", "tcp6"]
        .iter()
        .filter_map(|t| fs::read_to_string(format!("/proc/{pid}/net/{t}")).ok())
        .flat_map(|table| {
            table
                .lines()
                .skip(1)
                .filter_map(|line| {
                    let cols: Vec<&str> = line.split_whitespace().collect();
                    (cols.get(1)?.ends_with(&wanted) && *cols.get(3)? == "0A").then(|| cols.get(9)?.parse().ok())?
                })
                .collect::<Vec<u64>>()
        })
        .collect()
}

/// Whether process `pid` holds a descriptor of the socket with inode `inode`.
pub fn holds_socket(pid: u32, inode: u64) -> bool {
    let wanted = format!("socket:[{inode}]");
    fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|dir| dir.flatten().any(|e| fs::read_link(e.path()).is_ok_and(|l| l.as_os_str() == wanted.as_str())))
}

/// Name of an x86_64 syscall number, for diagnostics.
pub fn syscall_name(nr: i64) -> String {
    let name = match nr {
        0 => "read",
        1 => "write",
        2 => "open",
        7 => "poll",
        17 => "pread64",
        16 => "ioctl",
        19 => "readv",
        20 => "writev",
        23 => "select",
        34 => "pause",
        35 => "nanosleep",
        43 => "accept",
        42 => "connect",
        44 => "sendto",
        45 => "recvfrom",
        46 => "sendmsg",
        47 => "recvmsg",
        56 => "clone",
        57 => "fork",
        58 => "vfork",
        59 => "execve",
        61 => "wait4",
        62 => "kill",
        72 => "fcntl",
        73 => "flock",
        101 => "ptrace",
        130 => "rt_sigsuspend",
        202 => "futex",
        232 => "epoll_wait",
        228 => "clock_gettime",
        230 => "clock_nanosleep",
        247 => "waitid",
        257 => "openat",
        270 => "pselect6",
        271 => "ppoll",
        281 => "epoll_pwait",
        288 => "accept4",
        318 => "getrandom",
        322 => "execveat",
        435 => "clone3",
        449 => "futex_waitv",
        _ => return format!("syscall {nr}"),
    };
    name.to_string()
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
        wait_thread_exit(pid, tid, std::time::Duration::ZERO);
        assert!(thread_exists(pid, tid));
        drop(tx);
        // Exited: the wait returns (the limit is only a safety net) and the kernel drops the
        // thread from the task list right after.
        wait_thread_exit(pid, tid, std::time::Duration::from_secs(600));
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
        wait_thread_exit(pid, tid, std::time::Duration::from_secs(600));
    }

    fn unsafe_gettid() -> u32 {
        // SAFETY: gettid has no preconditions.
        unsafe { libc::syscall(libc::SYS_gettid) as u32 }
    }

    #[test]
    fn a_udp_table_names_its_bound_ports() {
        let table = concat!(
            "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n",
            " 12: 0100007F:5DC1 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 4242 2 0000000000000000 0\n",
        );
        assert!(udp_table_has_port(table, 0x5DC1));
        assert!(!udp_table_has_port(table, 0x5DC2));
        assert!(!udp_table_has_port(table, 0), "the remote port 0 is not a bound one");
    }

    #[test]
    fn a_port_is_bound_while_a_socket_holds_it() {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = socket.local_addr().unwrap().port();
        assert!(udp_port_bound(std::process::id(), port));
        drop(socket);
        assert!(!udp_port_bound(std::process::id(), port));
    }
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
    let status = fs::read_to_string(format!("/proc/{pid}/task/{tid}/status")).ok()?;
    let mask = |key: &str| status.lines().find_map(|l| l.strip_prefix(key)).and_then(|v| u64::from_str_radix(v.trim(), 16).ok()).unwrap_or(0);
    Some(Signals { pending: mask("SigPnd:") | mask("ShdPnd:"), caught: mask("SigCgt:") })
}
