//! `sigsuspend` and `pause`: waits that only a signal ends, as a scheduling point (`SigSuspend`).
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
use libc::{c_int, sigset_t};

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
    gate.post(dara_abi::Op::SigSuspend, [wait_mask, 0, 0, 0]);
    if let Some(program_mask) = gate::program_mask() {
        // Signals the wait mask lets through and the program's own mask holds: told here, since
        // the thread's return to its own mask (below, `Gated::drop`) tells only the others.
        gate.tell_signals(wait_mask | !program_mask);
    }
    drop(gate);
    // SAFETY: rt_sigsuspend reads one live 8-byte set.
    let rc = unsafe { sys::syscall(libc::SYS_rt_sigsuspend, &[&wait_mask as *const u64 as u64, KERNEL_SIGSET_BYTES]) };
    super::set_errno((-rc) as c_int);
    -1
}

/// The grant of a wait a signal ended (`ChoiceKind::Interrupt`): `-EINTR`.
pub const INTERRUPTED: i64 = -(libc::EINTR as i64);

/// The `flags` bit of a blocking receive or accept that a signal may end: set unless the call
/// runs in the SIGSYS handler, which cannot run the program's handlers before it returns.
pub fn interruptible() -> u64 {
    if gate::in_trap() {
        0
    } else {
        dara_abi::net_flags::INTERRUPTIBLE
    }
}

/// After a blocking receive or accept was interrupted: whether it restarts, as the kernel's
/// would, because every signal about to run a handler asked for `SA_RESTART`; the handlers
/// then run here and the caller waits again. Otherwise the call fails with EINTR and the
/// handlers run as the thread leaves the preload.
pub fn interrupted_call_restarts(gate: &Gated) -> bool {
    let Some(program_mask) = gate::program_mask() else { return true };
    let mut pending: u64 = 0;
    // SAFETY: rt_sigpending writes one 8-byte set into a live local.
    unsafe { sys::syscall(libc::SYS_rt_sigpending, &[&mut pending as *mut u64 as u64, KERNEL_SIGSET_BYTES]) };
    let due = pending & super::signal::caught() & !program_mask;
    if due & !super::signal::restarting() != 0 {
        return false;
    }
    gate.let_signals_through();
    true
}

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
