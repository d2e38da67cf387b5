//! Which parked waits a pending signal ends (the model's `Interrupt` choices, `model/signals.rs`).
//!
//! While parked, a thread blocks every signal the program catches, so a signal sent to it then
//! (dara's passed-on Ctrl-C, a traced process's `kill`, a child's SIGCHLD) stays pending. A
//! thread in `poll`/`epoll_wait`, `sigsuspend`, a sleep, a blocking receive or send, a semaphore,
//! futex or condition wait would have been interrupted by it (which waits, and what then: the
//! model's `signals.rs`). The driver
//! looks at `/proc/<pid>/task/<tid>/status` (pending and caught signals) for each such thread,
//! with the mask that counts: the wait's own for a sigsuspend, the thread's own
//! (`Slot::program_mask`) otherwise. It looks only when something may have sent a signal (the
//! events below mark it), and again at every step while some thread is marked, so a signal that
//! another thread took meanwhile unmarks it: where the signal came from is an event of the run
//! (recorded or modelled) and the look happens at the same step in its replay.
use std::sync::atomic::Ordering;

use dara_abi::Request;

use super::Execution;
use crate::procfs;

/// Signals the kernel raises synchronously on a fault, and SIGSYS (dara's trap): never pending
/// for a parked thread, whatever `/proc` says the program catches.
const SYNCHRONOUS: u64 = bit(libc::SIGSYS) | bit(libc::SIGSEGV) | bit(libc::SIGBUS) | bit(libc::SIGFPE) | bit(libc::SIGILL) | bit(libc::SIGTRAP);

const fn bit(sig: i32) -> u64 {
    1 << (sig - 1)
}

impl Execution<'_> {
    /// Something may have sent a signal to a traced process: look before the next decision.
    /// A signalfd in a parked poll or epoll set may have become readable too: the network's
    /// views are taken again (`netprobe/signalfd.rs`).
    pub(super) fn signals_may_be_pending(&mut self) {
        self.signals_dirty = true;
        self.network.dirty = true;
    }

    /// Marks, in the model, the parked waits a pending signal ends now.
    pub(super) fn refresh_signals(&mut self) {
        if !std::mem::take(&mut self.signals_dirty) && !self.model.has_signalled() {
            return;
        }
        for (thread, request) in self.model.interruptible_waits() {
            let slot = self.region.slot(thread as usize);
            let (pid, tid) = (slot.pid.load(Ordering::Acquire), slot.tid.load(Ordering::Acquire));
            let lets_through = !match request {
                Request::SigSuspend { mask } => mask,
                _ => slot.program_mask.load(Ordering::Acquire),
            };
            // A sigwait is ended by a signal of its set too, caught or not.
            let waited_for = if let Request::SigWait { set, .. } = request { set } else { 0 };
            let due = procfs::signals(pid, tid).is_some_and(|s| s.pending & (s.caught & lets_through & !SYNCHRONOUS | waited_for) != 0);
            self.model.set_signalled(thread, due);
        }
    }
}
