//! dara's entry in front of the program's signal handlers.
//!
//! Every handler the program installs through the `sigaction` and `signal` hooks is reached
//! through [`entry`]. The entry holds back a signal sent from outside the run while the thread
//! ran program code ([`crate::deferred_signals`]): the thread tells dara of it at its next post,
//! and the handler runs then, at the same step of a recording and of its replay. Any other signal
//! (raised by the kernel, sent by the process itself or by dara, or one dara was told of) runs the
//! program's handler at once, as the kernel would have.
//!
//! [`installed_action`] turns the program's action into the one the kernel holds (the entry,
//! with `SA_SIGINFO`, without `SA_RESETHAND`, whose one-shot reset the entry makes itself), and
//! [`reported_action`] turns the kernel's back into the program's for `sigaction`'s old value.
//! A handler installed with a raw `rt_sigaction` goes past the entry, as before.
//!
//! The entry runs in signal context: atomics, thread-local `Cell`s and raw system calls only.
use libc::{c_int, c_void, siginfo_t, ucontext_t};

use crate::dispositions::{note_disposition, program_handler, set_program_handler};
use crate::gate::{self, PARKED_MASK};
use crate::{deferred_signals, real, region, stop_world, sys};

type InfoHandler = unsafe extern "C-unwind" fn(c_int, *mut siginfo_t, *mut c_void);
type PlainHandler = unsafe extern "C-unwind" fn(c_int);

/// The handler the kernel runs for every signal the program catches through the hooks.
unsafe extern "C-unwind" fn entry(sig: c_int, info: *mut siginfo_t, context: *mut c_void) {
    // SAFETY: the kernel passes a valid siginfo_t and ucontext_t to an SA_SIGINFO handler.
    if unsafe { held_back(sig, &*info, &mut *(context as *mut ucontext_t)) } {
        return;
    }
    let Some((handler, flags)) = program_handler(sig) else { return };
    if flags & libc::SA_RESETHAND != 0 {
        reset_to_default(sig);
    }
    if flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the program installed this address as an SA_SIGINFO handler.
        unsafe { core::mem::transmute::<usize, InfoHandler>(handler)(sig, info, context) }
    } else {
        // SAFETY: the program installed this address as a plain handler.
        unsafe { core::mem::transmute::<usize, PlainHandler>(handler)(sig) }
    }
}

/// Holds `sig` back if someone outside the run sent it to a gated thread while it ran: blocked
/// now (also under `SA_NODEFER`) and in the mask the return restores, queued to the thread again.
fn held_back(sig: c_int, info: &siginfo_t, uc: &mut ucontext_t) -> bool {
    let bit = deferred_signals::bit(sig);
    if !region::active() || !gate::has_slot() || stop_world::active() || bit & PARKED_MASK == 0 {
        return false;
    }
    if deferred_signals::take_released(sig) {
        return false;
    }
    let code = info.si_code;
    if !matches!(code, libc::SI_USER | libc::SI_QUEUE | libc::SI_TKILL) {
        return false; // raised by the kernel
    }
    // SAFETY: a signal sent by a process carries the sender's pid (and a sigqueue its value).
    let (sender, value) = unsafe { (info.si_pid() as u32, info.si_value().sival_ptr as u64) };
    if sender == sys::getpid() || (code == libc::SI_QUEUE && value == dara_abi::DARA_SIGNAL_VALUE) {
        return false; // the process's own, or dara's (a replay's recorded signal)
    }
    // SAFETY: rt_sigprocmask reads one live 8-byte set; rt_tgsigqueueinfo queues the same siginfo
    // to this very thread (allowed for any si_code).
    unsafe {
        sys::syscall(libc::SYS_rt_sigprocmask, &[libc::SIG_BLOCK as u64, &bit as *const u64 as u64, 0, 8]);
        sys::syscall(libc::SYS_rt_tgsigqueueinfo, &[sys::getpid() as u64, sys::gettid() as u64, sig as u64, info as *const siginfo_t as u64]);
        *(core::ptr::addr_of_mut!(uc.uc_sigmask) as *mut u64) |= bit;
    }
    deferred_signals::defer(sig);
    true
}

/// The kernel's one-shot `SA_RESETHAND`, made by the entry: the default action from now on.
fn reset_to_default(sig: c_int) {
    // SAFETY: an all-zero sigaction is SIG_DFL with an empty mask and no flags.
    let default: libc::sigaction = unsafe { core::mem::zeroed() };
    // SAFETY: a valid sigaction; the old one is not wanted.
    unsafe { real::sigaction(sig, &default, core::ptr::null_mut()) };
    set_program_handler(sig, None);
    note_disposition(sig, libc::SIG_DFL);
}

/// Whether `handler` is a handler (not `SIG_DFL`, `SIG_IGN` or `SIG_ERR`).
fn is_handler(handler: libc::sighandler_t) -> bool {
    handler != libc::SIG_DFL && handler != libc::SIG_IGN && handler != libc::SIG_ERR
}

/// The action the kernel is given for the program's `action` on `sig`: dara's entry in front of
/// a handler, the action itself otherwise (and for the fault signals, which are never held back
/// and whose handlers often resume the faulting code through the context they are given).
pub fn installed_action(sig: c_int, action: &libc::sigaction) -> libc::sigaction {
    let mut installed = *action;
    if is_handler(action.sa_sigaction) && deferred_signals::bit(sig) & PARKED_MASK != 0 {
        installed.sa_sigaction = entry as *const () as usize;
        installed.sa_flags = (action.sa_flags | libc::SA_SIGINFO) & !libc::SA_RESETHAND;
    }
    installed
}

/// Notes the program's `action` on `sig`, once the kernel took [`installed_action`]'s.
pub fn note_action(sig: c_int, action: &libc::sigaction) {
    let behind_entry = is_handler(action.sa_sigaction) && deferred_signals::bit(sig) & PARKED_MASK != 0;
    let handler = behind_entry.then_some((action.sa_sigaction, action.sa_flags));
    set_program_handler(sig, handler);
}

/// The program's view of `kernel`, the action the kernel held for `sig` before a change (`then`:
/// the program's handler behind the entry at that time).
pub fn reported_action(kernel: &mut libc::sigaction, then: Option<(usize, c_int)>) {
    if kernel.sa_sigaction == entry as *const () as usize {
        if let Some((handler, flags)) = then {
            kernel.sa_sigaction = handler;
            kernel.sa_flags = flags;
        }
    }
}
