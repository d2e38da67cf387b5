//! The in-process syscall trap: a seccomp filter that sends interesting syscalls made from
//! anywhere but the preload's trampoline to a SIGSYS handler, which emulates them.
//!
//! Symbol hooks cannot see libc-internal calls (glibc's own futex waits, `arc4random`'s
//! `getrandom`) or raw `syscall` instructions; the trap does. The filter
//! lets everything from [`sys::return_address`] through, traps the calls listed in [`TRAPPED`]
//! (and `read`/`readv` of descriptor 0,
//! `write`/`writev` of descriptor 1, and
//! `close` of or `dup2`/`dup3` onto dara's region descriptor), and allows the rest.
//!
//! This module is the mechanism: the filter, its installation with the handler it is given, and
//! what emulations share (the real call, [`RESTART`], the program's pointers). What the handler
//! does with each call is [`crate::trapped`]'s, at the top of the preload's layers with the hooks
//! it shares code with.
use core::sync::atomic::{AtomicBool, Ordering};

use libc::{c_int, c_long, c_void, siginfo_t, sock_filter, sock_fprog};

use crate::{real, sys};

const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;

/// Syscalls trapped whatever their arguments. `rt_sigprocmask` so that libc's own masks never
/// block SIGSYS (see [`crate::sigmask`]): a trap whose SIGSYS is blocked kills the process.
/// `clone` whatever its flags: a new process is posted as a fork, and a new thread is made by the
/// handler so that it starts at its barrier wherever it was created ([`crate::thread_start`]).
/// `clone3` because its flags sit in memory the filter cannot read: glibc's own thread creation
/// gets ENOSYS and falls back to `clone`; a raw `clone3` the program makes is refused
/// ([`crate::trapped`]).
///
/// `open`/`openat` are not trapped (random devices are caught by the `open`/`fopen` symbol
/// hooks instead): the filter outlives `execve`, and the dynamic loader of the new program opens
/// its libraries before the preload can install the SIGSYS handler again. `sched_getaffinity`
/// is not trapped for the same reason: jemalloc (redis-server) issues it while the libraries
/// load, before the preload's constructor, and a trap there kills the process.
///
/// `exit` (of one thread; a process ends with `exit_group`) so that a thread's exit is posted
/// after glibc's teardown of it, destructors included ([`crate::thread_end`]).
///
/// `tgkill` (`raise`, `pthread_kill`, `abort`, raw calls) so that a SIGKILL a program sends
/// itself or one of its threads is known as its own ([`crate::hooks::signal::trapped_tgkill`]).
///
/// The `timerfd` calls, so that a raw one also gets a timer on the virtual clock
/// ([`crate::hooks::timerfd`]); glibc's functions are plain system calls, hooked as symbols too.
///
/// `sendfile`, `splice` and `tee`, so that a raw one on a socket or pipe is a receive and a send
/// as the hooked wrapper's is ([`crate::hooks::transfer`]).
///
/// `sendmmsg` and `recvmmsg`, so that a raw batch (libuv 1.44 makes them with `syscall(2)`) is a
/// send or receive per message as the hooked wrapper's is ([`crate::hooks::mmsg`]).
///
/// `io_uring_setup` and `io_setup`, refused with ENOSYS as by a kernel built without io_uring
/// and native AIO: their requests run in the kernel, where dara can neither order nor see them,
/// and programs that use them (MariaDB's InnoDB, liburing and libaio users) fall back to the
/// system calls dara controls (docs/limits.md, "Asynchronous I/O in the kernel").
///
/// `seccomp`, so that a program's own filter is refused (`hooks::sandbox`): stacked on dara's, it
/// would judge the trap handler's own calls.
///
/// `sysinfo`, so that a raw one, and glibc's own (`get_phys_pages`, `sysconf(_SC_PHYS_PAGES)`),
/// shows the virtual uptime and the run's memory snapshot ([`crate::timecalls`]). `getppid` and
/// `getsid`, so that a raw one shows the recorded parent and session in the replay of a
/// `--host-pids` recording ([`crate::hooks::process`]). Like every trapped call, one made by a
/// new image after `execve` before the preload's constructor (the dynamic loader, a statically
/// linked allocator's start-up) would kill the process: none is known to.
const TRAPPED: [c_long; 40] = [
    libc::SYS_futex,
    libc::SYS_futex_waitv,
    libc::SYS_sched_yield,
    libc::SYS_nanosleep,
    libc::SYS_clock_nanosleep,
    libc::SYS_clock_gettime,
    libc::SYS_gettimeofday,
    libc::SYS_time,
    libc::SYS_clock_getres,
    libc::SYS_times,
    libc::SYS_getrusage,
    libc::SYS_getcpu,
    libc::SYS_sysinfo,
    libc::SYS_getppid,
    libc::SYS_getsid,
    libc::SYS_getrandom,
    libc::SYS_pause,
    libc::SYS_fork,
    libc::SYS_vfork,
    libc::SYS_execve,
    libc::SYS_execveat,
    libc::SYS_wait4,
    libc::SYS_waitid,
    libc::SYS_rt_sigprocmask,
    libc::SYS_close_range,
    libc::SYS_clone,
    libc::SYS_clone3,
    libc::SYS_exit,
    libc::SYS_tgkill,
    libc::SYS_timerfd_create,
    libc::SYS_timerfd_settime,
    libc::SYS_timerfd_gettime,
    libc::SYS_sendfile,
    libc::SYS_splice,
    libc::SYS_tee,
    libc::SYS_sendmmsg,
    libc::SYS_recvmmsg,
    libc::SYS_io_uring_setup,
    libc::SYS_io_setup,
    libc::SYS_seccomp,
];

/// Set once the filter is installed (the signal-mask hooks keep SIGSYS deliverable from then on).
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// Whether the trap is active in this process.
pub fn installed() -> bool {
    INSTALLED.load(Ordering::Relaxed)
}

// Offsets into `struct seccomp_data`.
const DATA_NR: u32 = 0;
const DATA_ARCH: u32 = 4;
const DATA_IP_LO: u32 = 8;
const DATA_IP_HI: u32 = 12;
const DATA_ARG0_LO: u32 = 16;
const DATA_ARG1_LO: u32 = 24;

const fn stmt(code: u32, k: u32) -> sock_filter {
    sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    }
}

const fn jump(code: u32, k: u32, jt: u8, jf: u8) -> sock_filter {
    sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    }
}

const PROGRAM_LEN: usize = TRAPPED.len() + 27;

/// The BPF program; see the module doc. Jump offsets are relative to the next instruction.
fn program(allowed_ip: u64) -> [sock_filter; PROGRAM_LEN] {
    use libc::{BPF_ABS, BPF_ALU, BPF_JEQ, BPF_JGT, BPF_JMP, BPF_K, BPF_LD, BPF_RET, BPF_SUB, BPF_W};
    let ld = BPF_LD | BPF_W | BPF_ABS;
    let jeq = BPF_JMP | BPF_JEQ | BPF_K;
    let n = TRAPPED.len();
    // Fixed positions of the argument checks and the shared tails.
    let (read_fd, write_fd, close_fd, dup_target) = (n + 15, n + 17, n + 19, n + 22);
    let trap_at = n + 25;
    let allow_at = n + 26;
    let to = |from: usize, target: usize| (target - from - 1) as u8;
    // dara's descriptors, kept whatever the program closes (see `fdguard`): `fd - first` is at
    // most `last - first` exactly for them (below `first` it wraps around to a large number).
    let (first_kept, kept_span) = (crate::fdguard::FIRST_KEPT as u32, (crate::fdguard::LAST_KEPT - crate::fdguard::FIRST_KEPT) as u32);

    let mut p = [stmt(0, 0); PROGRAM_LEN];
    p[0] = stmt(ld, DATA_ARCH);
    p[1] = jump(jeq, AUDIT_ARCH_X86_64, 1, 0);
    p[2] = stmt(BPF_RET | BPF_K, libc::SECCOMP_RET_KILL_PROCESS);
    p[3] = stmt(ld, DATA_IP_LO);
    p[4] = jump(jeq, allowed_ip as u32, 0, 2);
    p[5] = stmt(ld, DATA_IP_HI);
    p[6] = jump(jeq, (allowed_ip >> 32) as u32, to(6, allow_at), 0);
    p[7] = stmt(ld, DATA_NR);
    for (i, &nr) in TRAPPED.iter().enumerate() {
        p[8 + i] = jump(jeq, nr as u32, to(8 + i, trap_at), 0);
    }
    // read/readv of descriptor 0 (a pipeline's stdin, read by stdio inside libc where no symbol
    // hook sees it). Only descriptor 0: the dynamic loader of an exec'd program reads its
    // libraries (other descriptors) before the SIGSYS handler exists again.
    p[8 + n] = jump(jeq, libc::SYS_read as u32, to(8 + n, read_fd), 0);
    p[9 + n] = jump(jeq, libc::SYS_readv as u32, to(9 + n, read_fd), 0);
    // write/writev of descriptor 1, for the same reason: stdio's writes (bash's `printf ... >&3`
    // points descriptor 1 at a socket and sends through stdio).
    p[10 + n] = jump(jeq, libc::SYS_write as u32, to(10 + n, write_fd), 0);
    p[11 + n] = jump(jeq, libc::SYS_writev as u32, to(11 + n, write_fd), 0);
    // close of dara's descriptors, dup2/dup3 onto them (see `fdguard`).
    p[12 + n] = jump(jeq, libc::SYS_close as u32, to(12 + n, close_fd), 0);
    p[13 + n] = jump(jeq, libc::SYS_dup2 as u32, to(13 + n, dup_target), 0);
    p[14 + n] = jump(jeq, libc::SYS_dup3 as u32, to(14 + n, dup_target), to(14 + n, allow_at));
    for (at, fd) in [(read_fd, 0), (write_fd, 1)] {
        p[at] = stmt(ld, DATA_ARG0_LO);
        p[at + 1] = jump(jeq, fd, to(at + 1, trap_at), to(at + 1, allow_at));
    }
    for (at, arg) in [(close_fd, DATA_ARG0_LO), (dup_target, DATA_ARG1_LO)] {
        p[at] = stmt(ld, arg);
        p[at + 1] = stmt(BPF_ALU | BPF_SUB | BPF_K, first_kept);
        p[at + 2] = jump(BPF_JMP | BPF_JGT | BPF_K, kept_span, to(at + 2, allow_at), to(at + 2, trap_at));
    }
    p[trap_at] = stmt(BPF_RET | BPF_K, libc::SECCOMP_RET_TRAP);
    p[allow_at] = stmt(BPF_RET | BPF_K, libc::SECCOMP_RET_ALLOW);
    p
}

/// Why the trap could not be installed.
pub enum InstallError {
    Handler,
    NoNewPrivs,
    Filter,
}

/// A SIGSYS handler: signal number, the kernel's siginfo, its `ucontext_t`.
pub type Handler = extern "C" fn(c_int, *mut siginfo_t, *mut c_void);

/// Installs `handler` for SIGSYS (the one in [`crate::trapped`]), then the filter (for every
/// thread of the process).
pub fn install(handler: Handler) -> Result<(), InstallError> {
    // SAFETY: a zeroed sigaction is a valid "no flags, empty mask" value.
    let mut action: libc::sigaction = unsafe { core::mem::zeroed() };
    action.sa_sigaction = handler as usize;
    action.sa_flags = libc::SA_SIGINFO;
    // SAFETY: installing a handler with a valid sigaction; the old action is not wanted.
    if unsafe { real::sigaction(libc::SIGSYS, &action, core::ptr::null_mut()) } != 0 {
        return Err(InstallError::Handler);
    }
    // SAFETY: PR_SET_NO_NEW_PRIVS takes plain integers.
    if unsafe {
        sys::syscall(
            libc::SYS_prctl,
            &[libc::PR_SET_NO_NEW_PRIVS as u64, 1, 0, 0, 0],
        )
    } != 0
    {
        return Err(InstallError::NoNewPrivs);
    }
    let filter = program(sys::return_address());
    let fprog = sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_ptr() as *mut sock_filter,
    };
    let args = [
        libc::SECCOMP_SET_MODE_FILTER as u64,
        libc::SECCOMP_FILTER_FLAG_TSYNC,
        &fprog as *const _ as u64,
    ];
    // SAFETY: `fprog` points to a well-formed program that outlives the call (the kernel copies it).
    if unsafe { sys::syscall(libc::SYS_seccomp, &args) } != 0 {
        return Err(InstallError::Filter);
    }
    INSTALLED.store(true, Ordering::Relaxed);
    // A program image started by an `execve` that dara ran from inside this handler inherits
    // the handler's signal mask, SIGSYS blocked: a trap would then kill it.
    let sigsys: u64 = 1 << (libc::SIGSYS - 1);
    // SAFETY: rt_sigprocmask reads one 8-byte signal set from a live local.
    unsafe { sys::syscall(libc::SYS_rt_sigprocmask, &[libc::SIG_UNBLOCK as u64, &sigsys as *const u64 as u64, 0, 8]) };
    Ok(())
}

/// What an emulated call answers to be made again once the pending signal's handler has run
/// (the kernel's own `-ERESTARTSYS`, which never reaches a program).
pub(crate) const RESTART: i64 = -512;

/// Performs the trapped syscall for real, through the trampoline.
pub(crate) fn passthrough(nr: c_long, args: [u64; 6]) -> i64 {
    // SAFETY: the exact syscall the program attempted, with its own arguments.
    unsafe { sys::syscall6(nr, args) }
}

/// A shared reference to a user-supplied pointer, `None` if null.
///
/// # Safety
/// A non-null `addr` must point to a valid, aligned `T` that stays alive and unaliased by
/// writes for the duration of the emulated call (the contract of the syscall the program made).
pub unsafe fn user_ref<'a, T>(addr: u64) -> Option<&'a T> {
    // SAFETY: see the function contract.
    unsafe { (addr as *const T).as_ref() }
}

/// A mutable reference to a user-supplied pointer, `None` if null.
///
/// # Safety
/// As for [`user_ref`], and the program gave the kernel the right to write it.
pub unsafe fn user_mut<'a, T>(addr: u64) -> Option<&'a mut T> {
    // SAFETY: see the function contract.
    unsafe { (addr as *mut T).as_mut() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_jumps_stay_in_bounds() {
        let p = program(0x1234_5678_9abc_def0);
        for (i, ins) in p.iter().enumerate() {
            if ins.code as u32 & 0x07 == libc::BPF_JMP {
                assert!(i + 1 + (ins.jt as usize) < p.len());
                assert!(i + 1 + (ins.jf as usize) < p.len());
            }
        }
        assert_eq!(p[PROGRAM_LEN - 1].k, libc::SECCOMP_RET_ALLOW);
        assert_eq!(p[PROGRAM_LEN - 2].k, libc::SECCOMP_RET_TRAP);
    }
}
