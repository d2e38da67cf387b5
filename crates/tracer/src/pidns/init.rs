//! The namespace's init: the code that runs as pid 1 of an execution's PID namespace, its stack,
//! and the few words it is given.
//!
//! It is cloned into dara's own address space (`CLONE_VM`) and descriptor table (`CLONE_FILES`)
//! and makes raw system calls only: no libc wrapper that could write the cloning thread's
//! `errno`, nothing allocated, nothing of dara's memory touched but its [`InitShared`] and the
//! literals it reads. It makes its mounts private, mounts a fresh /proc and /dev/shm, says so on
//! its ready pipe, and then reaps the orphans reparented to it until it is killed; asked with
//! [`RESET_SIGNAL`], it writes the word dara left in [`InitShared::last_pid`] to `ns_last_pid`
//! (which acts on the writer's own PID namespace: only a process inside can write it), so that the
//! namespace's next pid is one more, and answers on its reset pipe: 1 starts the pids over for
//! another execution ([`super::reuse`]), a recorded pid less one gives a replay's next birth the
//! pid it had in the recording.
use syscalls::{syscall, Sysno};

/// Value written by the init on its ready pipe once /proc and a fresh /dev/shm are mounted.
pub(super) const INIT_READY: u8 = 1;
/// Ready, but /dev/shm is the host's (no tmpfs could be mounted over it).
pub(super) const INIT_READY_HOST_SHM: u8 = 2;
/// Value written by the init when its mount namespace could not be made private or /proc could
/// not be mounted (it then exits).
pub(super) const INIT_FAILED: u8 = 0;

/// The signal that asks the init to set the namespace's last pid to [`InitShared::last_pid`].
pub(super) const RESET_SIGNAL: i32 = libc::SIGUSR1;
/// The init's answers on its reset pipe.
pub(super) const RESET_DONE: u8 = 1;
pub(super) const RESET_FAILED: u8 = 0;

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

/// What the init is given and what dara tells it later, at the top of its stack (the init shares
/// dara's memory).
#[repr(C)]
#[derive(Debug)]
pub(super) struct InitShared {
    pub args: InitArgs,
    /// The value the init writes to `ns_last_pid` when asked with [`RESET_SIGNAL`].
    pub last_pid: std::sync::atomic::AtomicU32,
}

/// The init's stack, with its [`InitShared`] at the top.
pub(super) type InitStack = crate::own_stack::OwnStack<InitShared>;

/// What the init starts with: its descriptors, and 1 as the last pid (a reset's).
pub(super) fn init_shared(args: InitArgs) -> InitShared {
    InitShared { args, last_pid: std::sync::atomic::AtomicU32::new(1) }
}

/// Where the cloned init starts: `arg` points at its [`InitShared`] (on its own stack).
pub(super) extern "C" fn init_entry(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the InitShared `InitStack::new` wrote, which lives as long as the init.
    let shared = unsafe { &*(arg as *const InitShared) };
    // SAFETY: this is the init, cloned as `init_main` requires.
    unsafe { init_main(shared) }
}

/// The init: private mounts, a fresh /proc, then reap orphans (and reset pids when asked) until
/// killed.
///
/// # Safety
/// Runs in a child cloned with `CLONE_VM` on its own stack, every signal blocked: raw system
/// calls only (they write no `errno`, which is the cloning thread's), nothing allocated, nothing
/// of dara's memory touched but the literals it reads.
unsafe fn init_main(shared: &InitShared) -> ! {
    let args = shared.args;
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
                // The next pid is one more than the last.
                let mut digits = [0u8; 10];
                let text = decimal(shared.last_pid.load(std::sync::atomic::Ordering::Acquire), &mut digits);
                let reset = args.ns_last_pid >= 0 && syscall!(Sysno::pwrite64, args.ns_last_pid, text.as_ptr(), text.len(), 0) == Ok(text.len());
                let answer = if reset { RESET_DONE } else { RESET_FAILED };
                let _ = syscall!(Sysno::write, args.reset_done, &answer as *const u8, 1);
            }
        }
    }
}

/// `n` in decimal, written into the end of `buf` (no allocation: the init calls it).
fn decimal(mut n: u32, buf: &mut [u8; 10]) -> &[u8] {
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[at..];
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn decimal_writes_the_digits_of_any_u32() {
        for n in [0u32, 1, 9, 10, 41_309, 4_194_303, u32::MAX] {
            let mut buf = [0u8; 10];
            assert_eq!(super::decimal(n, &mut buf), n.to_string().as_bytes());
        }
    }
}
