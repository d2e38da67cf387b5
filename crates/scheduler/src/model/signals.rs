//! Waits a signal ends. A thread parked in `poll`/`select`/`epoll_wait` or in `sigsuspend`/
//! `pause` would, in the kernel, be interrupted by a caught signal its mask lets through: the
//! handler runs and the call fails with EINTR (these calls are never restarted). So would a
//! blocking receive or accept the preload marks interruptible (`net_flags::INTERRUPTIBLE`); the
//! preload then restarts it after the handler when the handler asked for `SA_RESTART`. The model
//! cannot see signals; the driver looks (`/proc`) and marks the threads that have one pending
//! ([`Model::set_signalled`]). Such a thread offers an `Interrupt` choice, whose grant is
//! [`INTERRUPTED`]. A `SigSuspend` has no `Run` at all: only a signal ends it.
use dara_abi::{net_flags, Op};

use super::thread::Phase;
use super::{Model, Request};
use crate::choice::ThreadId;

/// The result of an interrupted wait: `-EINTR`.
pub const INTERRUPTED: i64 = -(libc::EINTR as i64);

/// Whether a signal may end `request` while it waits: a blocking poll or epoll wait, a blocking
/// receive or accept marked interruptible, a sigsuspend, or a sigwait (which a signal of its set
/// ends too, caught or not). The mask that decides which signals count is the wait's own for a sigsuspend
/// (`args[0]`), else the thread's (see `dara_abi::Slot::program_mask`).
pub fn interruptible(request: &Request) -> bool {
    match request.op {
        Op::NetPoll | Op::NetEpollWait => request.args[3] & net_flags::NONBLOCK == 0,
        Op::NetRecv | Op::NetAccept => request.args[1] & (net_flags::NONBLOCK | net_flags::INTERRUPTIBLE) == net_flags::INTERRUPTIBLE,
        Op::SigSuspend | Op::SigWait => true,
        _ => false,
    }
}

impl Model {
    /// Threads parked in a wait a signal may end, with the wait.
    pub fn interruptible_waits(&self) -> Vec<(ThreadId, Request)> {
        self.threads
            .iter()
            .filter_map(|(&id, t)| match t.phase {
                Phase::Pending(r) if interruptible(&r) => Some((id, r)),
                _ => None,
            })
            .collect()
    }

    /// Whether a signal that ends its wait is pending for `thread` (the driver looked).
    pub fn set_signalled(&mut self, thread: ThreadId, signalled: bool) {
        if signalled {
            self.signalled.insert(thread);
        } else {
            self.signalled.remove(&thread);
        }
    }

    /// Whether some thread is marked (its mark may go stale: the driver looks again).
    pub fn has_signalled(&self) -> bool {
        !self.signalled.is_empty()
    }

    /// Whether `thread` offers an `Interrupt` now.
    pub(super) fn offers_interrupt(&self, thread: ThreadId) -> bool {
        self.signalled.contains(&thread)
            && matches!(self.threads.get(&thread).map(|t| t.phase), Some(Phase::Pending(r)) if interruptible(&r))
    }

    /// Applies `Interrupt`: the wait ends with [`INTERRUPTED`].
    pub(super) fn interrupt(&mut self, thread: ThreadId) -> super::ops::Step {
        self.signalled.remove(&thread);
        self.net.remove(&thread);
        super::ops::Step::Grant(INTERRUPTED)
    }
}
