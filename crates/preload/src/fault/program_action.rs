//! The program's own SIGSEGV action, kept here while dara's handler stays installed (the
//! time-stamp counter faults with SIGSEGV, see [`crate::tsc`]).
//!
//! The `sigaction` and `signal` hooks read and write it instead of the kernel's, so the program
//! sees exactly the action it set; [`deliver`] runs it for a fault that is not a counter read,
//! the way the kernel would have: its mask (and the signal itself, unless `SA_NODEFER`) blocked
//! during the call, `SA_RESETHAND` honoured, `SA_SIGINFO` handlers given the kernel's siginfo and
//! context. What differs: the handler runs on the alternate stack whenever the thread has one,
//! SIGSYS and SIGSEGV are never blocked while it runs (see [`deliver`]),
//! and a raw `rt_sigaction` system call (bypassing libc) replaces dara's handler for good.
//!
//! Atomics only: read in a signal handler, written by the hooks.
use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use libc::{sigaction, siginfo_t, sigset_t};

use crate::sys;

/// Whether dara's handler holds SIGSEGV (and this store is the program's action).
static OWNED: AtomicBool = AtomicBool::new(false);
static HANDLER: AtomicUsize = AtomicUsize::new(libc::SIG_DFL);
static FLAGS: AtomicU64 = AtomicU64::new(0);
/// The first 64 signals of the action's mask (all the kernel has).
static MASK: AtomicU64 = AtomicU64::new(0);

/// Whether the program's SIGSEGV action lives here.
pub fn owned() -> bool {
    OWNED.load(Ordering::Relaxed)
}

/// The first 64 signals of `set` as a kernel signal word (bit `sig - 1`).
pub fn mask_word(set: &sigset_t) -> u64 {
    // SAFETY: glibc's sigset_t is an array of unsigned longs whose first word holds signals 1-64.
    unsafe { *(set as *const sigset_t as *const u64) }
}

fn mask_set(word: u64) -> sigset_t {
    // SAFETY: an all-zero sigset_t is the empty set.
    let mut set: sigset_t = unsafe { core::mem::zeroed() };
    // SAFETY: as in `mask_word`.
    unsafe { *(&mut set as *mut sigset_t as *mut u64) = word };
    set
}

/// Takes `old` (the action before dara's handler went in) as the program's.
pub fn adopt(old: &sigaction) {
    set(old);
    OWNED.store(true, Ordering::Relaxed);
}

/// The program's action.
pub fn get() -> sigaction {
    // SAFETY: an all-zero sigaction is SIG_DFL with no flags.
    let mut action: sigaction = unsafe { core::mem::zeroed() };
    action.sa_sigaction = HANDLER.load(Ordering::Relaxed);
    action.sa_flags = FLAGS.load(Ordering::Relaxed) as c_int;
    action.sa_mask = mask_set(MASK.load(Ordering::Relaxed));
    action
}

/// Sets the program's action.
pub fn set(action: &sigaction) {
    MASK.store(mask_word(&action.sa_mask), Ordering::Relaxed);
    FLAGS.store(action.sa_flags as u32 as u64, Ordering::Relaxed);
    HANDLER.store(action.sa_sigaction, Ordering::Relaxed);
}

/// Gives SIGSEGV back to the kernel's default action (a crash follows).
pub fn restore_default() {
    OWNED.store(false, Ordering::Relaxed);
    // The kernel's struct sigaction: handler, flags, restorer, mask.
    let action = [libc::SIG_DFL as u64, 0, 0, 0];
    // SAFETY: rt_sigaction reads one kernel sigaction from a live local.
    unsafe { sys::syscall(libc::SYS_rt_sigaction, &[libc::SIGSEGV as u64, action.as_ptr() as u64, 0, 8]) };
}

/// Runs the program's action for `signal`; false when that action is to crash (the default, or
/// ignoring a fault the kernel raised, which the kernel does not allow).
///
/// # Safety
/// `info` and `context` are the kernel's arguments to the SA_SIGINFO handler now running.
pub unsafe fn deliver(signal: c_int, info: *mut siginfo_t, context: *mut c_void) -> bool {
    let handler = HANDLER.load(Ordering::Relaxed);
    let flags = FLAGS.load(Ordering::Relaxed) as c_int;
    if handler == libc::SIG_DFL {
        return false;
    }
    if handler == libc::SIG_IGN {
        // SAFETY: the kernel's siginfo.
        return unsafe { (*info).si_code } <= 0;
    }
    let mut block = MASK.load(Ordering::Relaxed);
    if flags & libc::SA_NODEFER == 0 {
        block |= 1 << (signal - 1);
    }
    // Never SIGSYS (a trapped system call in the handler would kill the process) nor SIGSEGV (an
    // rdtsc in the handler faults with it, and this store holds the action only while it does),
    // as for every other handler's mask.
    block &= !(1 << (libc::SIGSYS - 1) | 1 << (libc::SIGSEGV - 1));
    if flags & libc::SA_RESETHAND != 0 {
        HANDLER.store(libc::SIG_DFL, Ordering::Relaxed);
        FLAGS.store(0, Ordering::Relaxed);
    }
    let mut saved: u64 = 0;
    // SAFETY: rt_sigprocmask with two live 8-byte sets.
    unsafe { sys::syscall(libc::SYS_rt_sigprocmask, &[libc::SIG_BLOCK as u64, &block as *const u64 as u64, &mut saved as *mut u64 as u64, 8]) };
    if flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the program registered this address as an SA_SIGINFO handler.
        let f: extern "C" fn(c_int, *mut siginfo_t, *mut c_void) = unsafe { core::mem::transmute(handler) };
        f(signal, info, context);
    } else {
        // SAFETY: the program registered this address as a plain handler.
        let f: extern "C" fn(c_int) = unsafe { core::mem::transmute(handler) };
        f(signal);
    }
    // SAFETY: restores the mask saved above.
    unsafe { sys::syscall(libc::SYS_rt_sigprocmask, &[libc::SIG_SETMASK as u64, &saved as *const u64 as u64, 0, 8]) };
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mask_words_round_trip() {
        let set = mask_set(1 << (libc::SIGUSR1 - 1));
        // SAFETY: a valid set and signal number.
        assert_eq!(unsafe { libc::sigismember(&set, libc::SIGUSR1) }, 1);
        assert_eq!(mask_word(&set), 1 << (libc::SIGUSR1 - 1));
    }
}
