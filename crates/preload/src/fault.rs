//! Naming a crash: a handler for the fatal fault signals (SIGSEGV, SIGBUS, SIGFPE, SIGILL) that
//! tells the scheduler where the faulting thread was (`Op::Fault` with the instruction pointer
//! and fault address) while the process still exists, so a bug is identified by its faulting
//! function (DESIGN 2.5) and two different crashes are two different bugs.
//!
//! After the post the handler puts the default action back and returns: the faulting
//! instruction runs again and the process dies of the same signal as it would have without
//! dara. A signal *sent* with that number (`raise`, `kill`) is re-sent to the thread instead,
//! since returning would let the program go on. A stack overflow cannot run the handler (the
//! kernel then kills the process directly): the crash simply has no location.
//!
//! SIGSEGV is special: the time-stamp counter faults with it ([`crate::tsc`]), so dara's handler
//! must stay installed whatever the program does. The program's own SIGSEGV action is kept in
//! [`program_action`] (the `sigaction`/`signal` hooks read and write it there), and a fault
//! that is not a counter read goes to that action as the kernel would have delivered it: the
//! program's handler is called (with its mask and flags), an ignored or default action crashes.
//! For the other signals a program's handler simply replaces dara's. `cpuid` faults with SIGSEGV
//! too, where the CPU can ([`crate::cpuid`]: dara hides `rdrand` and `rdseed`), and so do the
//! program's atomic instructions under `--preempt-on atomics` ([`crate::atomics`]).
use core::ffi::{c_int, c_void};

use dara_abi::{Addr, Request};
use libc::siginfo_t;

use crate::gate::Gated;
use crate::{atomics, cpuid, real, sys, tsc};

pub mod program_action;

const FATAL: [c_int; 4] = [libc::SIGSEGV, libc::SIGBUS, libc::SIGFPE, libc::SIGILL];

/// [`install`] ran in this process (or in the fork server it was copied from).
static INSTALLED: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);

/// Whether [`install`] ran in this process (copies of the fork server inherit its handlers).
pub fn installed() -> bool {
    INSTALLED.load(core::sync::atomic::Ordering::Relaxed)
}

/// Installs the handler for every fatal fault signal still at its default action, and for
/// SIGSEGV in any case (its previous action becomes the program's); then starts trapping the
/// time-stamp counter and `cpuid`.
pub fn install() {
    INSTALLED.store(true, core::sync::atomic::Ordering::Relaxed);
    for signal in FATAL {
        // SAFETY: zeroed sigaction values are valid ("no flags, empty mask").
        let mut old: libc::sigaction = unsafe { core::mem::zeroed() };
        // SAFETY: querying the current action into a valid out-pointer.
        if unsafe { real::sigaction(signal, core::ptr::null(), &mut old) } != 0 {
            continue;
        }
        let keep = signal == libc::SIGSEGV;
        if !keep && old.sa_sigaction != libc::SIG_DFL {
            continue;
        }
        // SAFETY: as above.
        let mut action: libc::sigaction = unsafe { core::mem::zeroed() };
        action.sa_sigaction = on_fault as extern "C" fn(c_int, *mut siginfo_t, *mut c_void) as usize;
        action.sa_flags = libc::SA_SIGINFO | libc::SA_NODEFER | libc::SA_ONSTACK | if keep { 0 } else { libc::SA_RESETHAND };
        // SAFETY: installing a valid handler; the old action is not needed.
        if unsafe { real::sigaction(signal, &action, core::ptr::null_mut()) } == 0 && keep {
            program_action::adopt(&old);
            tsc::start_trapping();
            cpuid::start_faulting();
        }
    }
}

extern "C" fn on_fault(signal: c_int, info: *mut siginfo_t, context: *mut c_void) {
    // SAFETY: for an SA_SIGINFO handler the kernel passes valid siginfo and ucontext pointers,
    // and the context may be modified (it is resumed by sigreturn).
    let (code, addr, uc) = unsafe { ((*info).si_code, (*info).si_addr() as u64, &mut *(context as *mut libc::ucontext_t)) };
    if signal == libc::SIGSEGV && program_action::owned() {
        if code == tsc::SI_KERNEL && (tsc::trapping() && tsc::emulate(uc) || cpuid::emulate(uc) || atomics::emulate(uc)) {
            return;
        }
        // SAFETY: the kernel's own arguments for this delivery.
        if unsafe { program_action::deliver(signal, info, context) } {
            return;
        }
        // The program's action is the default (or ignore, which the kernel overrides for a
        // fault): a crash, as below, with dara's handler out of the way.
        program_action::restore_default();
    }
    let pc = uc.uc_mcontext.gregs[libc::REG_RIP as usize] as u64;
    let sp = uc.uc_mcontext.gregs[libc::REG_RSP as usize] as u64;
    if let Some(gate) = Gated::enter() {
        gate.post(Request::Fault { signal, pc: Addr(pc), addr: Addr(addr), sp: Addr(sp) });
    }
    if code <= 0 {
        // Sent by kill/raise/tgkill, not raised by an instruction: returning would continue the
        // program, so deliver it again under the default action (already restored).
        // SAFETY: tgkill takes plain integers.
        unsafe { sys::syscall(libc::SYS_tgkill, &[sys::getpid() as u64, sys::gettid() as u64, signal as u64]) };
    }
}
