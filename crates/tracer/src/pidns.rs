//! A PID namespace (and a mount namespace with its own /proc) per execution, so that the pids,
//! tids and parent pids a program observes are the same in every execution of a schedule.
//!
//! dara clones a tiny *init* into new PID and mount namespaces. It runs in dara's own address
//! space (`CLONE_VM`) on a small stack of its own, making raw system calls only (no libc wrapper
//! that could write the cloning thread's `errno`): a fork would copy dara's page tables for every
//! execution and leave dara a copy-on-write fault on each page it writes while the init lives,
//! which was the largest single cost of an execution. The init (pid 1 there) makes its
//! mounts private to the namespace (`MS_SLAVE`), mounts a fresh /proc (so `/proc/self` and
//! `/proc/<pid>` speak namespace pids) and a fresh /dev/shm (what the program leaves there goes
//! with the namespace), and then only reaps the orphans reparented to it. It shares dara's
//! descriptor table (`CLONE_FILES`), so it holds no descriptor of its own. It dies with dara (`PR_SET_PDEATHSIG`) and its death
//! makes the kernel kill everything in the namespace: nothing dara started survives dara.
//!
//! Commands are started inside with [`PidNamespace::fork_inside`]: the launching thread's
//! children go to the namespace (`setns(CLONE_NEWPID)` sets *pid_for_children* of that thread
//! only) and the child joins the mount namespace before its exec ([`enter_mounts`]).
//! The first command is pid 2, its parent pid is 0 (dara is outside), and since only one thread
//! of the whole system runs at a time every later fork and thread gets the same pid in every run.
//!
//! Creating the namespaces needs CAP_SYS_ADMIN (dara as root); without it [`PidNamespace::create`]
//! fails and dara runs the program with real pids.
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::OnceLock;
use std::time::Duration;

use syscalls::{syscall, Sysno};

/// Value written by the init on its ready pipe once it is set up.
const INIT_READY: u8 = 1;
/// Value written by the init when its mount namespace could not be made private or /proc could
/// not be mounted (it then exits).
const INIT_FAILED: u8 = 0;

/// Bytes of the init's own stack (it calls a handful of system calls in one frame).
const INIT_STACK_BYTES: usize = 64 * 1024;

/// The init's stack: mapped by dara, unmapped only once the init is reaped (never while it may
/// run on it).
#[derive(Debug)]
struct InitStack {
    base: *mut libc::c_void,
}

// SAFETY: the mapping is owned by this value alone; any thread may unmap it.
unsafe impl Send for InitStack {}

impl InitStack {
    fn new() -> std::io::Result<InitStack> {
        // SAFETY: a fresh private anonymous mapping; nothing else is affected.
        let base = unsafe { libc::mmap(std::ptr::null_mut(), INIT_STACK_BYTES, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK, -1, 0) };
        if base == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(InitStack { base })
    }

    /// The top of the stack (it grows down), 16-byte aligned.
    fn top(&self) -> *mut libc::c_void {
        // SAFETY: one past the end of the mapping, which is what clone wants as a stack pointer.
        unsafe { self.base.cast::<u8>().add(INIT_STACK_BYTES).cast() }
    }

    /// Unmaps the stack. Call only once the init is reaped.
    fn release(&mut self) {
        if !self.base.is_null() {
            // SAFETY: the mapping made in `new`, used by no process any more (the caller's
            // contract); unmapped once.
            unsafe { libc::munmap(self.base, INIT_STACK_BYTES) };
            self.base = std::ptr::null_mut();
        }
    }
}

/// The namespaces of one execution, entered through descriptors dara holds.
#[derive(Debug)]
pub struct PidNamespace {
    /// Kernel pid (in dara's namespace) of the init.
    init: u32,
    /// A pidfd of the init: signals reach it and nothing else, even once someone reaped it.
    init_fd: OwnedFd,
    pid_ns: OwnedFd,
    mnt_ns: OwnedFd,
    /// The PID namespace dara's threads live in, to return to after a fork inside.
    own_pid_ns: OwnedFd,
    /// dara's own /proc (host pids), handed to the target as `dara_abi::HOST_PROC_FD`.
    host_proc: OwnedFd,
    /// `/proc/<init>/task/<init>/children`: the orphans the init adopted.
    init_children: String,
    reaped: bool,
    /// The init's stack, released once it is reaped (leaked if it never is).
    stack: InitStack,
    /// Keeps the thread that cloned the init (a [`crate::namespace_pool`] maker) alive while
    /// the namespace is in use: the init dies with that thread.
    _cloned_by: Option<std::sync::Arc<()>>,
}

impl PidNamespace {
    /// Clones the init into new PID and mount namespaces and waits until it is ready.
    pub fn create() -> std::io::Result<PidNamespace> {
        let host_proc = dara_proc()?;
        static OWN_PID_NS: OnceLock<OwnedFd> = OnceLock::new();
        let own_pid_ns = opened_once(&OWN_PID_NS, c"/proc/thread-self/ns/pid", libc::O_RDONLY)?;
        let (ready_r, ready_w) = pipe()?;
        let mut stack = InitStack::new()?;
        // CLONE_FILES: the init shares dara's descriptor table rather than copying it. A copy,
        // made while another thread of dara holds a duplicate of a program's pipe or socket (a
        // probe's `pidfd_getfd`), would keep that end open until the init closed it: a reader
        // then saw no end of file, a false deadlock. Sharing the table, it holds nothing.
        let flags = libc::CLONE_VM | libc::CLONE_FILES | libc::CLONE_NEWPID | libc::CLONE_NEWNS | libc::SIGCHLD;
        // The init starts with every signal blocked (it keeps them so): none of dara's handlers
        // may run on its stack.
        // SAFETY: sigset_t is plain data that sigfillset initializes; pthread_sigmask writes the
        // old mask into a live local.
        let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
        let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        unsafe {
            libc::sigfillset(&mut all);
            libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        }
        // SAFETY: the child runs `init_entry` on its own stack in this address space; it makes raw
        // system calls only (no errno, no allocation, no lock: nothing of this process's state
        // is touched) and exits rather than return. Its stack outlives it (`InitStack`).
        let pid = unsafe { libc::clone(init_entry, stack.top(), flags, ready_w.as_raw_fd() as usize as *mut libc::c_void) };
        let clone_error = std::io::Error::last_os_error();
        // SAFETY: restoring the mask saved above.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
        if pid == -1 {
            stack.release();
            return Err(clone_error);
        }
        let init = pid as u32;
        let Some(init_fd) = pidfd_open(init) else {
            let error = std::io::Error::last_os_error();
            kill_and_reap(init);
            stack.release();
            return Err(error);
        };
        // The write end stays open here (the table is shared): the init's end is told by its
        // pidfd.
        let ready = init_ready(&ready_r, &init_fd);
        drop(ready_w);
        if !ready {
            kill_and_reap(init);
            stack.release();
            return Err(std::io::Error::other("the namespace's init could not mount a private /proc"));
        }
        let namespaces = open_dir(&ns_path(init, "pid")?, libc::O_RDONLY).and_then(|p| Ok((p, open_dir(&ns_path(init, "mnt")?, libc::O_RDONLY)?)));
        let (pid_ns, mnt_ns) = match namespaces {
            Ok(fds) => fds,
            Err(e) => {
                kill_and_reap(init);
                stack.release();
                return Err(e);
            }
        };
        Ok(PidNamespace { init, init_fd, pid_ns, mnt_ns, own_pid_ns, host_proc, init_children: format!("/proc/{init}/task/{init}/children"), reaped: false, stack, _cloned_by: None })
    }

    /// This namespace, noting that the thread which cloned its init lives while `token` does.
    pub fn kept_alive_by(mut self, token: std::sync::Arc<()>) -> PidNamespace {
        self._cloned_by = Some(token);
        self
    }

    /// Kernel pid of the init (in dara's namespace).
    pub fn init_pid(&self) -> u32 {
        self.init
    }

    /// dara's /proc, for the target's `HOST_PROC_FD`.
    pub fn host_proc_fd(&self) -> i32 {
        self.host_proc.as_raw_fd()
    }

    /// The PID namespace descriptor (children of a thread that `setns`es to it are born inside).
    pub fn pid_ns_fd(&self) -> i32 {
        self.pid_ns.as_raw_fd()
    }

    /// The mount namespace descriptor a child joins before its exec ([`enter_mounts`]).
    pub fn mount_ns_fd(&self) -> i32 {
        self.mnt_ns.as_raw_fd()
    }

    /// Runs `fork` (which must create exactly the processes to put inside, from this thread) with
    /// the calling thread's new children placed in the namespace, then returns the thread to
    /// dara's own namespace. The thread cannot create threads in between.
    pub fn fork_inside<T>(&self, fork: impl FnOnce() -> T) -> std::io::Result<T> {
        // SAFETY: setns on a namespace descriptor this value owns; it changes only where this
        // thread's future children go.
        if unsafe { libc::setns(self.pid_ns.as_raw_fd(), libc::CLONE_NEWPID) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let result = fork();
        // SAFETY: as above, back to the namespace the thread itself lives in (always allowed).
        if unsafe { libc::setns(self.own_pid_ns.as_raw_fd(), libc::CLONE_NEWPID) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(result)
    }

    /// Whether processes adopted by the init (orphans) are still alive or unreaped.
    pub fn has_orphans(&self) -> bool {
        !self.reaped && std::fs::read_to_string(&self.init_children).is_ok_and(|c| !c.trim().is_empty())
    }

    /// SIGKILLs the init, and with it (the kernel does it) every process in the namespace.
    pub fn kill(&mut self) {
        // SAFETY: pidfd_send_signal on the init's pidfd with no siginfo; a pidfd never names a
        // recycled pid.
        unsafe { libc::syscall(libc::SYS_pidfd_send_signal, self.init_fd.as_raw_fd(), libc::SIGKILL, std::ptr::null::<libc::siginfo_t>(), 0u32) };
    }

    /// Reaps the init once it has exited (it exits only after every process of the namespace,
    /// including dara's zombie children there, is reaped). Returns whether it is reaped.
    pub fn try_reap(&mut self) -> bool {
        if !self.reaped {
            let mut status = 0;
            // SAFETY: waitpid writes the status into a local.
            let rc = unsafe { libc::waitpid(self.init as i32, &mut status, libc::WNOHANG | libc::__WALL) };
            self.reaped = rc == self.init as i32 || (rc == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ECHILD));
            if self.reaped {
                self.stack.release();
            }
        }
        self.reaped
    }

    /// Waits at most `limit` for the init to end (its pidfd becomes readable); whether it has.
    pub fn wait_ended(&self, limit: Duration) -> bool {
        let mut pfd = libc::pollfd { fd: self.init_fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: poll reads and writes the one live pollfd.
        unsafe { libc::poll(&mut pfd, 1, limit.as_millis().min(i32::MAX as u128) as i32) > 0 }
    }

    /// Notes that someone else (the reaper of the init's process group) reaped the init.
    pub fn reaped_elsewhere(&mut self) {
        self.reaped = true;
        self.stack.release();
    }
}

impl Drop for PidNamespace {
    fn drop(&mut self) {
        // The init was pinned to its execution's CPU; it ends where this thread may run (a
        // search drops ended executions off the executions' CPU).
        if !self.reaped {
            crate::placement::share_own(self.init as libc::pid_t);
        }
        self.kill();
        // Bounded: the init exits as soon as its namespace is empty. (If it never does, its stack
        // stays mapped: it must not vanish under a live process.)
        for _ in 0..5000 {
            if self.try_reap() {
                return;
            }
            self.wait_ended(Duration::from_millis(1));
        }
    }
}

/// Joins the mount namespace `mnt_ns` (with its own /proc) in a forked child before exec, keeping
/// the working directory (setns moves it to the namespace's root).
///
/// # Safety
/// Call only in a single-threaded child between fork and exec: it makes async-signal-safe
/// system calls only.
pub unsafe fn enter_mounts(mnt_ns: i32) -> std::io::Result<()> {
    // SAFETY: open of a literal path; the descriptor is closed below.
    let cwd = unsafe { libc::open(c".".as_ptr(), libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) };
    if cwd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: plain descriptors.
    let ok = unsafe { libc::setns(mnt_ns, libc::CLONE_NEWNS) == 0 && libc::fchdir(cwd) == 0 };
    let err = std::io::Error::last_os_error();
    // SAFETY: the descriptor opened above.
    unsafe { libc::close(cwd) };
    if ok {
        Ok(())
    } else {
        Err(err)
    }
}

/// Where the cloned init starts: `arg` is the ready pipe's write end.
extern "C" fn init_entry(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: this is the init, cloned as `init_main` requires.
    unsafe { init_main(arg as usize as i32) }
}

/// The init: private mounts, a fresh /proc, then reap orphans until killed.
///
/// # Safety
/// Runs in a child cloned with `CLONE_VM` on its own stack, every signal blocked: raw system
/// calls only (they write no `errno`, which is the cloning thread's), nothing allocated, nothing
/// of dara's memory touched but the literals it reads.
unsafe fn init_main(ready: i32) -> ! {
    let null = std::ptr::null::<u8>();
    // SAFETY: every call below takes integers or pointers to literal C strings and live locals.
    unsafe {
        let _ = syscall!(Sysno::prctl, libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        // Its own group: the terminal's Ctrl-C goes to dara's group, and a cluster run's commands
        // join this one (it outlives them all).
        let _ = syscall!(Sysno::setpgid, 0, 0);
        let private = syscall!(Sysno::mount, null, c"/".as_ptr(), null, libc::MS_REC | libc::MS_SLAVE, null).is_ok();
        let proc_mounted = private && syscall!(Sysno::mount, c"proc".as_ptr(), c"/proc".as_ptr(), c"proc".as_ptr(), libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC, null).is_ok();
        // A fresh /dev/shm of the execution's own (best effort: a system without one keeps the
        // host's): POSIX shared memory and named semaphores the program leaves behind (a
        // postgres killed before its cleanup leaves its PostgreSQL.* segments) go with the
        // namespace, and names the seeded program draws in every run (postgres's segment
        // handles) never meet another run's.
        if proc_mounted {
            let _ = syscall!(Sysno::mount, c"tmpfs".as_ptr(), c"/dev/shm".as_ptr(), c"tmpfs".as_ptr(), libc::MS_NOSUID | libc::MS_NODEV, c"mode=1777".as_ptr());
        }
        let byte = if proc_mounted { INIT_READY } else { INIT_FAILED };
        let _ = syscall!(Sysno::write, ready, &byte as *const u8, 1);
        if !proc_mounted {
            let _ = syscall!(Sysno::exit, 1);
        }
        let sigchld: u64 = 1 << (libc::SIGCHLD - 1);
        loop {
            while syscall!(Sysno::wait4, -1i32, null, libc::WNOHANG | libc::__WALL, null).is_ok_and(|pid| pid > 0) {}
            // SIGCHLD is blocked, so one that arrived since the last wait is still pending here.
            let _ = syscall!(Sysno::rt_sigtimedwait, &sigchld as *const u64, null, null, 8);
        }
    }
}

/// Waits for the init's byte on `ready` (true: set up) or its end (false).
fn init_ready(ready: &OwnedFd, init: &OwnedFd) -> bool {
    loop {
        let mut fds = [libc::pollfd { fd: ready.as_raw_fd(), events: libc::POLLIN, revents: 0 }, libc::pollfd { fd: init.as_raw_fd(), events: libc::POLLIN, revents: 0 }];
        // SAFETY: poll reads and writes the two live pollfds.
        if unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) } < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return false;
        }
        if fds[0].revents & libc::POLLIN != 0 {
            let mut byte = [INIT_FAILED];
            // SAFETY: read writes at most one byte into the live local.
            let n = unsafe { libc::read(ready.as_raw_fd(), byte.as_mut_ptr().cast(), 1) };
            return n == 1 && byte[0] == INIT_READY;
        }
        if fds[1].revents != 0 {
            return false;
        }
    }
}

/// `/proc/<init>/ns/<which>` in dara's /proc.
fn ns_path(init: u32, which: &str) -> std::io::Result<CString> {
    CString::new(format!("/proc/{init}/ns/{which}")).map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))
}

fn pidfd_open(pid: u32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0u32) };
    // SAFETY: a descriptor just returned, owned by nobody else.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Kills an init that never became usable and reaps it (it has no other process to wait for).
fn kill_and_reap(init: u32) {
    // SAFETY: plain integers; `init` is dara's unreaped child, so its pid is not recycled.
    unsafe {
        libc::kill(init as i32, libc::SIGKILL);
        libc::waitpid(init as i32, std::ptr::null_mut(), libc::__WALL);
    }
}

/// A descriptor of dara's own /proc (a directory), opened once and duplicated for each caller.
pub fn dara_proc() -> std::io::Result<OwnedFd> {
    static DARA_PROC: OnceLock<OwnedFd> = OnceLock::new();
    opened_once(&DARA_PROC, c"/proc", libc::O_RDONLY | libc::O_DIRECTORY)
}

/// A duplicate of `path` opened with `flags` the first time (a path walk through /proc costs
/// 5-15 µs, a duplicate about 1): for files that name the same thing to every thread of dara.
fn opened_once(cache: &OnceLock<OwnedFd>, path: &std::ffi::CStr, flags: i32) -> std::io::Result<OwnedFd> {
    if let Some(fd) = cache.get() {
        return fd.try_clone();
    }
    let fd = open_dir(path, flags)?;
    let copy = fd.try_clone()?;
    let _ = cache.set(fd);
    Ok(copy)
}

fn open_dir(path: &std::ffi::CStr, flags: i32) -> std::io::Result<OwnedFd> {
    // SAFETY: open of a NUL-terminated path.
    let fd = unsafe { libc::open(path.as_ptr(), flags | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a descriptor just opened, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into the live array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nothing else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}
