//! `fork` and `vfork`: a traced thread's fork is a scheduling point and the child is traced from
//! its first instruction of user code (see [`crate::process`]). `vfork` runs as a fork: the only
//! things a vfork child may do (exec or `_exit`) behave the same in a forked child.
//!
//! `getppid` and `getsid`: in the replay of a recording made with the host's pids, a process whose
//! parent was dara (the first command, and the orphans dara adopts) sees the pid dara had in the
//! recording, not 0 (its parent is outside the replay's PID namespace) or 1 (the namespace's init
//! adopted it); a process in dara's session (one that did not `setsid`) sees the session id of the
//! recording, not 0 (the session leader is outside the namespace). Process groups need nothing:
//! dara makes the first command the leader of its own, and it has the recorded pid. The raw
//! system calls are trapped and answered the same way ([`trapped_identity`]).
//!
//! `__libc_start_main`: `main` runs inside a wrapper, so that returning from it goes through the
//! `exit` hook. libc's own startup code calls its internal `exit`, which no symbol hook sees, and
//! the scheduler would otherwise learn of the exit only when the process is gone.
use core::sync::atomic::{AtomicUsize, Ordering};

use libc::{c_char, c_int, c_void, pid_t};

use crate::gate::Gated;
use crate::real::MainFn;
use crate::{process, real, region, sys};

/// The program's `main`, handed to [`__libc_start_main`].
static MAIN: AtomicUsize = AtomicUsize::new(0);

#[no_mangle]
pub unsafe extern "C" fn __libc_start_main(
    main: MainFn,
    argc: c_int,
    argv: *mut *mut c_char,
    init: usize,
    fini: usize,
    rtld_fini: usize,
    stack_end: *mut c_void,
) -> c_int {
    MAIN.store(main as usize, Ordering::Relaxed);
    // SAFETY: the arguments _start passed, with `main` replaced by a function of the same type.
    unsafe { real::__libc_start_main(main_then_exit, argc, argv, init, fini, rtld_fini, stack_end) }
}

/// `getppid` or `getsid` (`nr`) with arguments `a`, as the program is shown it (the kernel's
/// answer or `-errno`); `None` for another call. Made for real through the trampoline; async-
/// signal-safe (the SIGSYS handler calls it for a trapped one).
pub fn trapped_identity(nr: libc::c_long, a: [u64; 6]) -> Option<i64> {
    let (hidden_up_to, shown) = match nr {
        // Outside the namespace (0), or adopted by its init (1).
        libc::SYS_getppid => (1, region::header().map_or(0, |h| h.parent_shown.load(Ordering::Relaxed))),
        // A session whose leader is outside the namespace.
        libc::SYS_getsid => (0, region::header().map_or(0, |h| h.session_shown.load(Ordering::Relaxed))),
        _ => return None,
    };
    // SAFETY: getppid takes no arguments; getsid one pid, the program's own.
    let real = unsafe { sys::syscall(nr, &a[..1]) };
    Some(if (0..=hidden_up_to).contains(&real) && shown != 0 { i64::from(shown) } else { real })
}

#[no_mangle]
pub unsafe extern "C" fn getppid() -> pid_t {
    // getppid cannot fail.
    trapped_identity(libc::SYS_getppid, [0; 6]).unwrap_or(0) as pid_t
}

#[no_mangle]
pub unsafe extern "C" fn getsid(pid: pid_t) -> pid_t {
    match trapped_identity(libc::SYS_getsid, [pid as u64, 0, 0, 0, 0, 0]).unwrap_or(0) {
        rc if rc < 0 => {
            super::set_errno(-rc as c_int);
            -1
        }
        rc => rc as pid_t,
    }
}

extern "C" fn main_then_exit(argc: c_int, argv: *mut *mut c_char, envp: *mut *mut c_char) -> c_int {
    // SAFETY: MAIN holds the `main` that `__libc_start_main` received, of type MainFn.
    let main: MainFn = unsafe { core::mem::transmute::<usize, MainFn>(MAIN.load(Ordering::Relaxed)) };
    let status = main(argc, argv, envp);
    // SAFETY: returning `status` from main means exit(status); this is the hooked exit.
    unsafe { crate::hooks::thread::exit(status) }
}

#[no_mangle]
pub unsafe extern "C" fn fork() -> pid_t {
    match Gated::enter() {
        Some(gate) => process::fork(&gate),
        // SAFETY: fork has no preconditions.
        None => unsafe { real::fork() },
    }
}

#[no_mangle]
pub unsafe extern "C" fn vfork() -> pid_t {
    // SAFETY: as for fork.
    unsafe { fork() }
}
