//! Which signals the program catches and which of its handlers ask for `SA_RESTART`, as the
//! `sigaction` and `signal` hooks set them: a parked thread blocks the caught ones (see `gate`),
//! and a wait a signal ended restarts or fails by them (see `interrupt`).
//!
//! Atomics only: read in the SIGSYS handler and on every post.
use core::sync::atomic::{AtomicU64, Ordering};

use libc::c_int;

/// Signals the program has a handler for, as a kernel signal-set word (bit `sig - 1`).
static CAUGHT: AtomicU64 = AtomicU64::new(0);

/// The signals the program currently catches.
pub fn caught() -> u64 {
    CAUGHT.load(Ordering::Relaxed)
}

/// Caught signals whose handler asked for `SA_RESTART` (bit `sig - 1`).
static RESTARTING: AtomicU64 = AtomicU64::new(0);

/// The signals whose handler restarts an interrupted receive or accept (`SA_RESTART`).
pub fn restarting() -> u64 {
    RESTARTING.load(Ordering::Relaxed)
}

/// Notes whether the handler `sig` now has asked for `SA_RESTART`.
pub fn note_restart(sig: c_int, restart: bool) {
    if !(1..=64).contains(&sig) {
        return;
    }
    let bit = 1u64 << (sig - 1);
    if restart {
        RESTARTING.fetch_or(bit, Ordering::Relaxed);
    } else {
        RESTARTING.fetch_and(!bit, Ordering::Relaxed);
    }
}

/// Notes the disposition `sig` now has: caught unless `SIG_DFL` or `SIG_IGN`.
pub fn note_disposition(sig: c_int, handler: libc::sighandler_t) {
    if !(1..=64).contains(&sig) {
        return;
    }
    let bit = 1u64 << (sig - 1);
    if handler == libc::SIG_DFL || handler == libc::SIG_IGN {
        CAUGHT.fetch_and(!bit, Ordering::Relaxed);
    } else {
        CAUGHT.fetch_or(bit, Ordering::Relaxed);
    }
}

/// The program's own handler for each signal whose delivery goes through dara's entry
/// (`hooks::signal_entry`): the handler's address and its `sa_flags`, 0 when dara's entry is not
/// installed for the signal. Index `sig - 1`.
static HANDLERS: [AtomicU64; 64] = [const { AtomicU64::new(0) }; 64];
static HANDLER_FLAGS: [AtomicU64; 64] = [const { AtomicU64::new(0) }; 64];

/// The program's handler behind dara's entry for `sig`: its address and `sa_flags`.
pub fn program_handler(sig: c_int) -> Option<(usize, c_int)> {
    let i = usize::try_from(sig - 1).ok().filter(|&i| i < 64)?;
    let handler = HANDLERS[i].load(Ordering::Acquire) as usize;
    (handler != 0).then(|| (handler, HANDLER_FLAGS[i].load(Ordering::Relaxed) as c_int))
}

/// Notes the program's handler behind dara's entry for `sig` (`None`: the entry is gone, the
/// disposition is the program's own again).
pub fn set_program_handler(sig: c_int, handler: Option<(usize, c_int)>) {
    let Some(i) = usize::try_from(sig - 1).ok().filter(|&i| i < 64) else { return };
    let (address, flags) = handler.unwrap_or((0, 0));
    HANDLER_FLAGS[i].store(flags as u64, Ordering::Relaxed);
    HANDLERS[i].store(address as u64, Ordering::Release);
}
