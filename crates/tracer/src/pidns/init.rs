//! The namespace's init: the code that runs as pid 1 of an execution's PID namespace, its stack,
//! and the few words it is given.
//!
//! It is cloned into dara's own address space (`CLONE_VM`) and descriptor table (`CLONE_FILES`)
//! and makes raw system calls only: no libc wrapper that could write the cloning thread's
//! `errno`, nothing allocated, nothing of dara's memory touched but its [`InitArgs`] and the
//! literals it reads. It makes its mounts private, mounts a fresh /proc and /dev/shm, says so on
//! its ready pipe, and then reaps the orphans reparented to it until it is killed; asked with
//! [`RESET_SIGNAL`], it makes the namespace's next pid 2 again (`ns_last_pid`, which acts on the
//! writer's own PID namespace: only a process inside can write it) and answers on its reset pipe
//! ([`super::reuse`]).
use syscalls::{syscall, Sysno};

/// Value written by the init on its ready pipe once /proc and a fresh /dev/shm are mounted.
pub(super) const INIT_READY: u8 = 1;
/// Ready, but /dev/shm is the host's (no tmpfs could be mounted over it).
pub(super) const INIT_READY_HOST_SHM: u8 = 2;
/// Value written by the init when its mount namespace could not be made private or /proc could
/// not be mounted (it then exits).
pub(super) const INIT_FAILED: u8 = 0;

/// The signal that asks the init to reset the namespace's pids for another execution.
pub(super) const RESET_SIGNAL: i32 = libc::SIGUSR1;
/// The init's answers on its reset pipe.
pub(super) const RESET_DONE: u8 = 1;
pub(super) const RESET_FAILED: u8 = 0;

/// Bytes of the init's own stack (it calls a handful of system calls in one frame).
const INIT_STACK_BYTES: usize = 64 * 1024;

/// What the init is given: descriptor numbers in the table it shares with dara, which keeps them
/// open while the init lives.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(super) struct InitArgs {
    /// The ready pipe's write end.
    pub ready: i32,
    /// `/proc/sys/kernel/ns_last_pid` opened for writing (-1: not available; resets fail).
    pub ns_last_pid: i32,
    /// The reset pipe's write end.
    pub reset_done: i32,
}

/// The init's stack: mapped by dara, unmapped only once the init is reaped (never while it may
/// run on it). Its top holds the init's [`InitArgs`].
#[derive(Debug)]
pub(super) struct InitStack {
    base: *mut libc::c_void,
}

// SAFETY: the mapping is owned by this value alone; any thread may unmap it.
unsafe impl Send for InitStack {}

impl InitStack {
    /// A stack with `args` at its top.
    pub(super) fn new(args: InitArgs) -> std::io::Result<InitStack> {
        // SAFETY: a fresh private anonymous mapping; nothing else is affected.
        let base = unsafe { libc::mmap(std::ptr::null_mut(), INIT_STACK_BYTES, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK, -1, 0) };
        if base == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let stack = InitStack { base };
        // SAFETY: the args' place lies inside the fresh mapping, aligned (see `args`).
        unsafe { stack.args().write(args) };
        Ok(stack)
    }

    /// Where the init's [`InitArgs`] live: the last 64 bytes of the mapping.
    fn args(&self) -> *mut InitArgs {
        const _: () = assert!(std::mem::size_of::<InitArgs>() <= 64);
        // SAFETY: 64 bytes before the end of the mapping, which is page-aligned.
        unsafe { self.base.cast::<u8>().add(INIT_STACK_BYTES - 64).cast() }
    }

    /// The top of the stack proper (it grows down, below the args), 16-byte aligned.
    pub(super) fn top(&self) -> *mut libc::c_void {
        self.args().cast()
    }

    /// The argument `clone` passes to [`init_entry`].
    pub(super) fn entry_arg(&self) -> *mut libc::c_void {
        self.args().cast()
    }

    /// Unmaps the stack. Call only once the init is reaped.
    pub(super) fn release(&mut self) {
        if !self.base.is_null() {
            // SAFETY: the mapping made in `new`, used by no process any more (the caller's
            // contract); unmapped once.
            unsafe { libc::munmap(self.base, INIT_STACK_BYTES) };
            self.base = std::ptr::null_mut();
        }
    }
}

/// Where the cloned init starts: `arg` points at its [`InitArgs`] (on its own stack).
pub(super) extern "C" fn init_entry(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the InitArgs `InitStack::new` wrote, which lives as long as the init.
    let args = unsafe { *(arg as *const InitArgs) };
    // SAFETY: this is the init, cloned as `init_main` requires.
    unsafe { init_main(args) }
}

/// The init: private mounts, a fresh /proc, then reap orphans (and reset pids when asked) until
/// killed.
///
/// # Safety
/// Runs in a child cloned with `CLONE_VM` on its own stack, every signal blocked: raw system
/// calls only (they write no `errno`, which is the cloning thread's), nothing allocated, nothing
/// of dara's memory touched but the literals it reads.
unsafe fn init_main(args: InitArgs) -> ! {
    let null = std::ptr::null::<u8>();
    // SAFETY: every call below takes integers or pointers to literal C strings and live locals.
    unsafe {
        let _ = syscall!(Sysno::prctl, libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        // Its own group: the terminal's Ctrl-C goes to dara's group, and a cluster run's commands
        // join this one (it outlives them all).
        let _ = syscall!(Sysno::setpgid, 0, 0);
        let private = syscall!(Sysno::mount, null, c"/".as_ptr(), null, libc::MS_REC | libc::MS_SLAVE, null).is_ok();
        let proc_mounted = private && syscall!(Sysno::mount, c"proc".as_ptr(), c"/proc".as_ptr(), c"proc".as_ptr(), libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC, null).is_ok();
        // A fresh /dev/shm of the namespace's own (best effort: a system without one keeps the
        // host's): POSIX shared memory and named semaphores the program leaves behind (a
        // postgres killed before its cleanup leaves its PostgreSQL.* segments) go with the
        // namespace, and names the seeded program draws in every run (postgres's segment
        // handles) never meet another run's.
        let shm_mounted = proc_mounted && syscall!(Sysno::mount, c"tmpfs".as_ptr(), c"/dev/shm".as_ptr(), c"tmpfs".as_ptr(), libc::MS_NOSUID | libc::MS_NODEV, c"mode=1777".as_ptr()).is_ok();
        let byte = match (proc_mounted, shm_mounted) {
            (false, _) => INIT_FAILED,
            (true, true) => INIT_READY,
            (true, false) => INIT_READY_HOST_SHM,
        };
        let _ = syscall!(Sysno::write, args.ready, &byte as *const u8, 1);
        if !proc_mounted {
            let _ = syscall!(Sysno::exit, 1);
        }
        let waited: u64 = (1 << (libc::SIGCHLD - 1)) | (1 << (RESET_SIGNAL - 1));
        loop {
            while syscall!(Sysno::wait4, -1i32, null, libc::WNOHANG | libc::__WALL, null).is_ok_and(|pid| pid > 0) {}
            // Both signals are blocked, so one that arrived since the last wait is pending here.
            let signal = syscall!(Sysno::rt_sigtimedwait, &waited as *const u64, null, null, 8);
            if signal == Ok(RESET_SIGNAL as usize) {
                while syscall!(Sysno::wait4, -1i32, null, libc::WNOHANG | libc::__WALL, null).is_ok_and(|pid| pid > 0) {}
                // The next pid is one more than the last: 2, the first command's.
                let reset = args.ns_last_pid >= 0 && syscall!(Sysno::pwrite64, args.ns_last_pid, c"1".as_ptr(), 1, 0) == Ok(1);
                let answer = if reset { RESET_DONE } else { RESET_FAILED };
                let _ = syscall!(Sysno::write, args.reset_done, &answer as *const u8, 1);
            }
        }
    }
}
