//! A PID namespace (and a mount namespace with its own /proc) for each execution, so that the
//! pids, tids and parent pids a program observes are the same in every execution of a schedule.
//!
//! dara clones a tiny *init* into new PID and mount namespaces ([`init`]). It runs in dara's own
//! address space (`CLONE_VM`) on a small stack of its own, making raw system calls only: a fork
//! would copy dara's page tables for every namespace and leave dara a copy-on-write fault on each
//! page it writes while the init lives. The init (pid 1 there) makes its mounts private to the
//! namespace (`MS_SLAVE`), mounts a fresh /proc (so `/proc/self` and `/proc/<pid>` speak
//! namespace pids) and a fresh /dev/shm (what the program leaves there stays in the namespace),
//! and then only reaps the orphans reparented to it. It shares dara's descriptor table
//! (`CLONE_FILES`), so it holds no descriptor of its own. It dies with dara (`PR_SET_PDEATHSIG`)
//! and its death makes the kernel kill everything in the namespace: nothing dara started survives
//! dara. In a search, a namespace whose execution left nothing behind serves a later execution
//! with its pids started over ([`reuse`]).
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

mod init;
mod reuse;

use init::{init_entry, InitArgs, InitStack, INIT_FAILED, INIT_READY, INIT_READY_HOST_SHM};

/// The namespaces an execution runs in (a search may use them again for a later one), entered
/// through descriptors dara holds.
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
    /// `/proc/<init>/task/<init>/children`: the orphans the init adopted (read from offset 0).
    children: OwnedFd,
    /// `/proc/<init>/mounts`: polls `POLLPRI` once the namespace's mounts changed.
    mounts: OwnedFd,
    /// The namespace's own /dev/shm (None: it has the host's).
    shm: Option<OwnedFd>,
    /// The reset pipe: the init's answers, and the write end it answers on.
    reset_done: OwnedFd,
    _reset_done_w: OwnedFd,
    /// The pool to give the namespace back to for another execution ([`reuse`]).
    returns_to: Option<std::sync::mpsc::Sender<PidNamespace>>,
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
        let (reset_done, reset_done_w) = pipe()?;
        let args = InitArgs { ready: ready_w.as_raw_fd(), ns_last_pid: ns_last_pid(), reset_done: reset_done_w.as_raw_fd() };
        let mut stack = InitStack::new(init::init_shared(args))?;
        // CLONE_FILES: the init shares dara's descriptor table rather than copying it. A copy,
        // made while another thread of dara holds a duplicate of a program's pipe or socket (a
        // probe's `pidfd_getfd`), would keep that end open until the init closed it: a reader
        // then saw no end of file, a false deadlock. Sharing the table, it holds nothing.
        let flags = libc::CLONE_VM | libc::CLONE_FILES | libc::CLONE_NEWPID | libc::CLONE_NEWNS | libc::SIGCHLD;
        // SAFETY: `init_entry` makes raw system calls only and exits rather than return; its
        // stack outlives it (released only once it is reaped).
        let pid = match unsafe { stack.clone_process(init_entry, flags) } {
            Ok(pid) => pid,
            Err(clone_error) => {
                stack.release();
                return Err(clone_error);
            }
        };
        let init = pid;
        let Some(init_fd) = crate::procfs::pidfd_open(init) else {
            return Err(abandon(init, &mut stack, std::io::Error::last_os_error()));
        };
        // The write end stays open here (the table is shared): the init's end is told by its
        // pidfd.
        let ready = init_ready(&ready_r, &init_fd);
        drop(ready_w);
        if !matches!(ready, Some(INIT_READY | INIT_READY_HOST_SHM)) {
            return Err(abandon(init, &mut stack, std::io::Error::other("the namespace's init could not mount a private /proc")));
        }
        let opened = (|| {
            let in_proc = |path: String, flags| CString::new(path).map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput)).and_then(|p| open_dir(&p, flags));
            let pid_ns = in_proc(format!("/proc/{init}/ns/pid"), libc::O_RDONLY)?;
            let mnt_ns = in_proc(format!("/proc/{init}/ns/mnt"), libc::O_RDONLY)?;
            let children = in_proc(format!("/proc/{init}/task/{init}/children"), libc::O_RDONLY)?;
            let mounts = in_proc(format!("/proc/{init}/mounts"), libc::O_RDONLY)?;
            let shm = match ready {
                Some(INIT_READY) => Some(in_proc(format!("/proc/{init}/root/dev/shm"), libc::O_PATH | libc::O_DIRECTORY)?),
                _ => None,
            };
            Ok((pid_ns, mnt_ns, children, mounts, shm))
        })();
        let (pid_ns, mnt_ns, children, mounts, shm) = opened.map_err(|e| abandon(init, &mut stack, e))?;
        Ok(PidNamespace { init, init_fd, pid_ns, mnt_ns, own_pid_ns, host_proc, children, mounts, shm, reset_done, _reset_done_w: reset_done_w, returns_to: None, reaped: false, stack, _cloned_by: None })
    }

    /// This namespace, noting that the thread which cloned its init lives while `token` does.
    pub fn kept_alive_by(mut self, token: std::sync::Arc<()>) -> PidNamespace {
        self._cloned_by = Some(token);
        self
    }

    /// This namespace, to be given back to `pool` for another execution ([`PidNamespace::give_back`]).
    pub(crate) fn returning_to(mut self, pool: std::sync::mpsc::Sender<PidNamespace>) -> PidNamespace {
        self.returns_to = Some(pool);
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
        let mut first = [0u8; 1];
        // SAFETY: pread writes at most one byte into the live local (the file lists the init's
        // children's pids; empty: none).
        !self.reaped && unsafe { libc::pread(self.children.as_raw_fd(), first.as_mut_ptr().cast(), 1, 0) } > 0
    }

    /// SIGKILLs the init, and with it (the kernel does it) every process in the namespace.
    pub fn kill(&mut self) {
        crate::procfs::pidfd_kill(&self.init_fd);
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
        crate::procfs::pidfd_exited_within(&self.init_fd, limit)
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
/// The directory is entered again by its path, as the new namespace's mounts reach it. A
/// descriptor opened before the `setns` would keep the old namespace's mount: the kernel's
/// `getcwd` then answers "(unreachable)/dir", and glibc's `getcwd` walks `..` with `opendir`
/// and `malloc` to find the name. That is work a program does only under dara, and a recording
/// made without a namespace (`--host-pids`) did not do it, so its replay allocated differently
/// (redis's jemalloc woke its background thread at another step). The descriptor is the
/// fallback when the path does not lead there.
///
/// # Safety
/// Call only in a single-threaded child between fork and exec: it makes async-signal-safe
/// system calls only.
pub unsafe fn enter_mounts(mnt_ns: i32) -> std::io::Result<()> {
    let mut path = [0u8; libc::PATH_MAX as usize];
    // SAFETY: the raw getcwd writes at most `path.len()` bytes into the live local buffer (the
    // raw call: glibc's falls back to `opendir` and `malloc`).
    let named = unsafe { libc::syscall(libc::SYS_getcwd, path.as_mut_ptr(), path.len()) } > 0 && path[0] == b'/';
    // SAFETY: open of a literal path; the descriptor is closed below.
    let cwd = unsafe { libc::open(c".".as_ptr(), libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) };
    if cwd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: plain descriptors, and the NUL-terminated path the kernel wrote.
    let ok = unsafe { libc::setns(mnt_ns, libc::CLONE_NEWNS) == 0 && ((named && libc::chdir(path.as_ptr().cast()) == 0) || libc::fchdir(cwd) == 0) };
    let err = std::io::Error::last_os_error();
    // SAFETY: the descriptor opened above.
    unsafe { libc::close(cwd) };
    if ok {
        Ok(())
    } else {
        Err(err)
    }
}

/// Waits for the init's byte on `ready` (None: it ended first).
fn init_ready(ready: &OwnedFd, init: &OwnedFd) -> Option<u8> {
    loop {
        let mut fds = [libc::pollfd { fd: ready.as_raw_fd(), events: libc::POLLIN, revents: 0 }, libc::pollfd { fd: init.as_raw_fd(), events: libc::POLLIN, revents: 0 }];
        // SAFETY: poll reads and writes the two live pollfds.
        if unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) } < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return None;
        }
        if fds[0].revents & libc::POLLIN != 0 {
            let mut byte = [INIT_FAILED];
            // SAFETY: read writes at most one byte into the live local.
            let n = unsafe { libc::read(ready.as_raw_fd(), byte.as_mut_ptr().cast(), 1) };
            return (n == 1).then_some(byte[0]);
        }
        if fds[1].revents != 0 {
            return None;
        }
    }
}

/// Kills an init that never became usable, reaps it and frees its stack; returns `error`.
fn abandon(init: u32, stack: &mut InitStack, error: std::io::Error) -> std::io::Error {
    crate::own_stack::kill_and_reap(init);
    stack.release();
    error
}

/// `/proc/sys/kernel/ns_last_pid`, opened for writing once for every init (a write sets the
/// counter of the writer's own PID namespace, whoever opened it); -1 without one.
fn ns_last_pid() -> i32 {
    static NS_LAST_PID: OnceLock<Option<OwnedFd>> = OnceLock::new();
    NS_LAST_PID.get_or_init(|| open_dir(c"/proc/sys/kernel/ns_last_pid", libc::O_WRONLY).ok()).as_ref().map_or(-1, AsRawFd::as_raw_fd)
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
