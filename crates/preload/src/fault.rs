//! Naming a crash: a handler for the fatal fault signals (SIGSEGV, SIGBUS, SIGFPE, SIGILL) that
//! tells the scheduler where the faulting thread was (`Op::Fault` with the instruction pointer
//! and fault address) while the process still exists, so a bug is identified by its faulting
//! function (DESIGN 2.5) and two different crashes are two different bugs.
//!
//! The handler is installed one-shot (`SA_RESETHAND`) and unmasked (`SA_NODEFER`): after the
//! post it returns, the faulting instruction runs again under the default action and the process
//! dies of the same signal as it would have without dara. A signal *sent* with that number
//! (`raise`, `kill`) is re-sent to the thread instead, since returning would let the program go
//! on. A program that installs its own handler for these signals replaces this one; a stack
//! overflow cannot run it at all (the kernel then kills the process directly): both simply leave
//! the crash without a location.
use core::ffi::{c_int, c_void};

use dara_abi::Op;
use libc::siginfo_t;

use crate::gate::Gated;
use crate::{real, sys};

const FATAL: [c_int; 4] = [libc::SIGSEGV, libc::SIGBUS, libc::SIGFPE, libc::SIGILL];

/// Installs the handler for every fatal fault signal still at its default action.
pub fn install() {
    for signal in FATAL {
        // SAFETY: zeroed sigaction values are valid ("no flags, empty mask").
        let mut old: libc::sigaction = unsafe { core::mem::zeroed() };
        // SAFETY: querying the current action into a valid out-pointer.
        if unsafe { real::sigaction(signal, core::ptr::null(), &mut old) } != 0 || old.sa_sigaction != libc::SIG_DFL {
            continue;
        }
        // SAFETY: as above.
        let mut action: libc::sigaction = unsafe { core::mem::zeroed() };
        action.sa_sigaction = on_fault as extern "C" fn(c_int, *mut siginfo_t, *mut c_void) as usize;
        action.sa_flags = libc::SA_SIGINFO | libc::SA_RESETHAND | libc::SA_NODEFER;
        // SAFETY: installing a valid handler; the old action is not needed.
        unsafe { real::sigaction(signal, &action, core::ptr::null_mut()) };
    }
}

extern "C" fn on_fault(signal: c_int, info: *mut siginfo_t, context: *mut c_void) {
    // SAFETY: for an SA_SIGINFO handler the kernel passes valid siginfo and ucontext pointers.
    let (code, addr, pc) = unsafe {
        let uc = &*(context as *const libc::ucontext_t);
        ((*info).si_code, (*info).si_addr() as u64, uc.uc_mcontext.gregs[libc::REG_RIP as usize] as u64)
    };
    if let Some(gate) = Gated::enter() {
        gate.post(Op::Fault, [signal as u64, pc, addr, 0]);
    }
    if code <= 0 {
        // Sent by kill/raise/tgkill, not raised by an instruction: returning would continue the
        // program, so deliver it again under the default action (already restored).
        // SAFETY: tgkill takes plain integers.
        unsafe { sys::syscall(libc::SYS_tgkill, &[sys::getpid() as u64, sys::gettid() as u64, signal as u64]) };
    }
}
