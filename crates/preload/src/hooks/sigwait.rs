//! `sigsuspend` and `pause`: waits that only a signal ends, as a scheduling point (`SigSuspend`);
//! `sigwaitinfo`, `sigtimedwait` and `sigwait` (`SigWait`); and what a blocking receive or
//! accept does when a signal ends its wait.
//!
//! In the kernel these block until a signal the wait mask lets through runs its handler, which
//! would hold the run token for good (nginx's master waits so for its workers' SIGCHLD and for
//! a Ctrl-C). Here the thread posts the wait mask and parks; the scheduler offers the wait an
//! `Interrupt` choice once a caught signal outside that mask is pending for the thread (passed on
//! from dara's terminal, sent by a traced process's `kill`, a child's SIGCHLD). Granted, the
//! thread first tells the scheduler who sent the signals the wait mask lets through (as every
//! thread back from a grant does for those its own mask lets through), leaves the preload, and
//! makes the real call: the signal is pending and let through, so the kernel runs the handler
//! and the call returns `EINTR` at once. The handler runs outside the preload, so its own hooked
//! calls are scheduling points as usual.
//!
//! A `SigWait` is ended the same way, by a signal of its set (caught or not: the program blocks
//! the signals it waits for) or by a caught signal the thread's mask lets through; granted, the
//! thread takes the signal with a real `rt_sigtimedwait` of zero timeout, or, when none of the
//! set is there (a handler's signal ended the wait), fails with EINTR. Its timeout is a timer.
use dara_abi::{Deadline, Request, NO_DEADLINE};
use libc::{c_int, sigset_t, siginfo_t, timespec};

use super::Obj;
use crate::gate::{self, Gated};
use crate::sys;

/// The kernel's signal-set size (64 signals), the only one `rt_sigsuspend` accepts.
const KERNEL_SIGSET_BYTES: u64 = 8;

/// The bit of SIGSYS, which no mask may hold while the syscall trap is installed.
const SIGSYS_BIT: u64 = 1 << (libc::SIGSYS - 1);

/// Posts the wait for `wait_mask`, then waits for real (returns at once: the signal is pending).
fn suspend(gate: Gated, wait_mask: u64) -> c_int {
    let wait_mask = wait_mask & !SIGSYS_BIT;
    gate.post(Request::SigSuspend { mask: wait_mask });
    let program_mask = gate::program_mask().unwrap_or(u64::MAX);
    // Signals the wait mask lets through and the program's own mask holds: told here, since the
    // thread's return to its own mask (below, `Gated::drop`) tells only the others.
    gate.tell_signals(wait_mask | !program_mask);
    let mut pending: u64 = 0;
    // SAFETY: rt_sigpending writes one 8-byte set into a live local.
    unsafe { sys::syscall(libc::SYS_rt_sigpending, &[&mut pending as *mut u64 as u64, KERNEL_SIGSET_BYTES]) };
    // A signal the program's own mask lets through (always so for `pause`) runs its handler as
    // the thread returns to that mask: the wait is over then, and the real call would block.
    let handled_on_return = pending & crate::dispositions::caught() & !program_mask != 0;
    drop(gate);
    if !handled_on_return {
        // SAFETY: rt_sigsuspend reads one live 8-byte set; a signal it lets through is pending.
        unsafe { sys::syscall(libc::SYS_rt_sigsuspend, &[&wait_mask as *const u64 as u64, KERNEL_SIGSET_BYTES]) };
    }
    super::set_errno(libc::EINTR);
    -1
}

// What a blocking call does when a signal ends its wait, used by the hooks as `sigwait::..`.
pub use crate::interrupt::{handlers_restart, interruptible, run_handlers, INTERRUPTED};

#[no_mangle]
pub unsafe extern "C" fn sigsuspend(mask: *const sigset_t) -> c_int {
    // SAFETY: the program's own argument.
    let set = unsafe { Obj::from_const(mask) };
    let (Some(gate), Some(set)) = (Gated::enter(), set.get()) else {
        // SAFETY: the program's own argument, forwarded unchanged.
        return unsafe { crate::real::sigsuspend(mask) };
    };
    // SAFETY: a sigset_t begins with the kernel's 8-byte set.
    let wait_mask = unsafe { (set as *const sigset_t as *const u64).read() };
    suspend(gate, wait_mask)
}

#[no_mangle]
pub extern "C" fn pause() -> c_int {
    let Some(gate) = Gated::enter() else {
        // SAFETY: pause takes no argument.
        return unsafe { crate::real::pause() };
    };
    let mut current: u64 = 0;
    // SAFETY: rt_sigprocmask writes one 8-byte set into a live local (no set to apply).
    unsafe { sys::syscall(libc::SYS_rt_sigprocmask, &[libc::SIG_BLOCK as u64, 0, &mut current as *mut u64 as u64, KERNEL_SIGSET_BYTES]) };
    suspend(gate, current)
}

/// Waits (in the model) for a signal of `set`, then takes it for real; `timeout_ns` `None`
/// waits forever. Returns the signal, or -1 with `errno` (EAGAIN: timed out; EINTR: a
/// handler's signal ended the wait).
fn wait_for(gate: Gated, set: u64, info: *mut siginfo_t, timeout_ns: Option<u64>) -> c_int {
    let set = set & !SIGSYS_BIT;
    let zero = timespec { tv_sec: 0, tv_nsec: 0 };
    if timeout_ns != Some(0) {
        let deadline = timeout_ns.map_or(NO_DEADLINE, |t| gate.deadline_after(t));
        if gate.post(Request::SigWait { set, deadline: Deadline::from_ns(deadline) }).result == -(libc::EAGAIN as i64) {
            super::set_errno(libc::EAGAIN);
            return -1;
        }
    }
    // Who sent the signal this wait takes (a kill from outside dara is recorded with the
    // thread's grant, and its replay sends it again before that grant's decision).
    gate.tell_waited_signals(set);
    drop(gate); // a handler's signal that ended the wait runs here
    // SAFETY: rt_sigtimedwait reads one live set and a live zero timeout and writes the caller's
    // siginfo (or nothing for null): it does not block.
    let rc = unsafe { sys::syscall(libc::SYS_rt_sigtimedwait, &[&set as *const u64 as u64, info as u64, &zero as *const timespec as u64, KERNEL_SIGSET_BYTES]) };
    if rc >= 0 {
        return rc as c_int;
    }
    let interrupted = timeout_ns != Some(0) && rc == -(libc::EAGAIN as i64);
    super::set_errno(if interrupted { libc::EINTR } else { (-rc) as c_int });
    -1
}

/// The kernel's signal set at `set` (its first 8 bytes), `None` for null.
pub(super) fn set_word(set: *const sigset_t) -> Option<u64> {
    // SAFETY: the program's own argument, null or a sigset_t.
    let set = unsafe { Obj::from_const(set) }.get()?;
    // SAFETY: a sigset_t begins with the kernel's 8-byte set.
    Some(unsafe { (set as *const sigset_t as *const u64).read() })
}

#[no_mangle]
pub unsafe extern "C" fn sigwaitinfo(set: *const sigset_t, info: *mut siginfo_t) -> c_int {
    match (Gated::enter(), set_word(set)) {
        (Some(gate), Some(word)) => wait_for(gate, word, info, None),
        // SAFETY: the program's own arguments, forwarded unchanged.
        _ => unsafe { crate::real::sigwaitinfo(set, info) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn sigtimedwait(set: *const sigset_t, info: *mut siginfo_t, timeout: *const timespec) -> c_int {
    match (Gated::enter(), set_word(set)) {
        (Some(gate), Some(word)) => {
            // SAFETY: null or the caller's timespec.
            let t = unsafe { timeout.as_ref() }.map(|t| crate::vclock::timespec_ns(t).unwrap_or(0));
            wait_for(gate, word, info, t)
        }
        // SAFETY: the program's own arguments, forwarded unchanged.
        _ => unsafe { crate::real::sigtimedwait(set, info, timeout) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn sigwait(set: *const sigset_t, sig: *mut c_int) -> c_int {
    // glibc's sigwait waits again when a handler's signal ends the wait: only its set counts.
    loop {
        let (Some(gate), Some(word)) = (Gated::enter(), set_word(set)) else {
            // SAFETY: the program's own arguments, forwarded unchanged.
            return unsafe { crate::real::sigwait(set, sig) };
        };
        let got = wait_for(gate, word, core::ptr::null_mut(), None);
        if got > 0 {
            // SAFETY: the program's out-parameter, null or an int.
            if let Some(out) = unsafe { Obj::new(sig) }.get_mut() {
                *out = got;
            }
            return 0;
        }
        // SAFETY: this thread's errno, set by `wait_for`.
        let e = unsafe { *libc::__errno_location() };
        if e != libc::EINTR {
            return e;
        }
    }
}
