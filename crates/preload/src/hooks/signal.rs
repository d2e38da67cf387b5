//! Keeping the syscall trap alive. A seccomp trap whose SIGSYS is blocked or has a foreign handler
//! kills the process, so once the trap is installed the program may neither block SIGSYS (it is
//! silently left out of any mask it sets; servers commonly block "all" signals in worker threads)
//! nor replace its handler (the call succeeds and changes nothing).
use libc::{c_int, sigset_t};

use super::Obj;
use crate::{real, trap};

/// `set` without SIGSYS, if it needed changing.
fn without_sigsys(how: c_int, set: Obj<sigset_t>) -> Option<sigset_t> {
    let set = set.get()?;
    if how == libc::SIG_UNBLOCK || !trap::installed() {
        return None;
    }
    let mut copy = *set;
    // SAFETY: `copy` is a valid sigset_t and SIGSYS a valid signal number.
    unsafe { libc::sigdelset(&mut copy, libc::SIGSYS) };
    Some(copy)
}

#[no_mangle]
pub unsafe extern "C" fn sigprocmask(
    how: c_int,
    set: *const sigset_t,
    old: *mut sigset_t,
) -> c_int {
    // SAFETY: the program's own argument.
    let filtered = without_sigsys(how, unsafe { Obj::from_const(set) });
    let set = filtered.as_ref().map_or(set, |s| s as *const sigset_t);
    // SAFETY: the program's arguments, with SIGSYS possibly removed from a local copy of `set`.
    unsafe { real::sigprocmask(how, set, old) }
}

#[no_mangle]
pub unsafe extern "C" fn pthread_sigmask(
    how: c_int,
    set: *const sigset_t,
    old: *mut sigset_t,
) -> c_int {
    // SAFETY: the program's own argument.
    let filtered = without_sigsys(how, unsafe { Obj::from_const(set) });
    let set = filtered.as_ref().map_or(set, |s| s as *const sigset_t);
    // SAFETY: the program's arguments, with SIGSYS possibly removed from a local copy of `set`.
    unsafe { real::pthread_sigmask(how, set, old) }
}

#[no_mangle]
pub unsafe extern "C" fn sigaction(
    sig: c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> c_int {
    if sig == libc::SIGSYS && trap::installed() {
        // Report the default disposition and keep ours.
        // SAFETY: the program's own out-parameter.
        if let Some(old) = unsafe { Obj::new(old) }.get_mut() {
            // SAFETY: all-zero is a valid sigaction (SIG_DFL, empty mask, no flags).
            *old = unsafe { core::mem::zeroed() };
        }
        return 0;
    }
    // SAFETY: the program's own arguments, forwarded unchanged.
    unsafe { real::sigaction(sig, act, old) }
}
