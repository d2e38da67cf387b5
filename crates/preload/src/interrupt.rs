//! What a blocking call does when a signal ends its wait: the grant says [`INTERRUPTED`]; the
//! handlers run before the call returns or is made again ([`run_handlers`]), which it is when
//! every one of them asked for `SA_RESTART` ([`handlers_restart`]). Shared by the hooks, the
//! virtual clock's sleeps and the syscall trap's emulated waits.
use crate::dispositions;
use crate::gate::{self, Gated};
use crate::sys;

/// The kernel's signal-set size (64 signals).
const KERNEL_SIGSET_BYTES: u64 = 8;

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

/// Whether every handler about to run for the caught signals pending for this thread (those its
/// own mask lets through) asked for `SA_RESTART`: then the kernel restarts an interrupted call
/// that `SA_RESTART` restarts. True when none is due (the program catches nothing).
pub fn handlers_restart() -> bool {
    let Some(program_mask) = gate::program_mask() else { return true };
    let mut pending: u64 = 0;
    // SAFETY: rt_sigpending writes one 8-byte set into a live local.
    unsafe { sys::syscall(libc::SYS_rt_sigpending, &[&mut pending as *mut u64 as u64, KERNEL_SIGSET_BYTES]) };
    pending & dispositions::caught() & !program_mask & !dispositions::restarting() == 0
}

/// After a wait a signal ended ([`INTERRUPTED`]): runs the handlers now, as the kernel runs them
/// before the interrupted call returns or restarts (so a handler cannot clobber the `errno` the
/// call then sets), and says whether the call restarts: it is `restartable` (one `SA_RESTART`
/// restarts: a blocking receive, accept or send, an untimed `sem_wait`) and every handler that
/// ran asked for it. Inside the SIGSYS handler the handlers run when it returns instead.
pub fn run_handlers(gate: &Gated, restartable: bool) -> bool {
    let restarts = restartable && handlers_restart();
    gate.let_signals_through();
    restarts
}
