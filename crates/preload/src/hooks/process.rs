//! `fork` and `vfork`: a traced thread's fork is a scheduling point and the child is traced from
//! its first instruction of user code (see [`crate::process`]). `vfork` runs as a fork: the only
//! things a vfork child may do (exec or `_exit`) behave the same in a forked child.
//!
//! `getppid`: in the replay of a recording made with the host's pids, a process whose parent was
//! dara (the first command, and the orphans dara adopts) sees the pid dara had in the recording,
//! not 0 (its parent is outside the replay's PID namespace) or 1 (the namespace's init adopted it).
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

#[no_mangle]
pub unsafe extern "C" fn getppid() -> pid_t {
    // SAFETY: getppid takes no arguments and cannot fail.
    let parent = unsafe { sys::syscall(libc::SYS_getppid, &[]) } as pid_t;
    let shown = region::header().map_or(0, |h| h.parent_shown.load(Ordering::Relaxed));
    if parent <= 1 && shown != 0 {
        shown as pid_t
    } else {
        parent
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
