//! Waits a signal ends, as `man 7 signal` ("Interruption of system calls and library functions
//! by signal handlers") and glibc have it. The model cannot see signals; the driver looks
//! (`/proc`) and marks the threads that have a caught, unmasked one pending
//! ([`Model::set_signalled`]). A marked thread in one of the waits below offers an `Interrupt`
//! choice, whose grant is [`INTERRUPTED`]; what happens next is the preload's, as in the kernel:
//!
//! * `poll`/`select`/`epoll_wait`, `sigsuspend`/`pause`, `sigwait*`, and sleeps (`nanosleep`,
//!   `clock_nanosleep`, `usleep`, `sleep`): the handler runs and the call fails with EINTR (a
//!   relative sleep reports the time left; `sleep` returns the seconds left). Never restarted.
//! * a blocking receive, accept, send, connect or FIFO open the preload marks interruptible
//!   (`net_flags::INTERRUPTIBLE`), `sem_wait` and an untimed raw futex wait: the handler runs,
//!   then the call waits again when every handler that ran asked for `SA_RESTART`, else fails
//!   with EINTR. `sem_timedwait` and a timed futex wait always fail with EINTR (the kernel's
//!   restart block for a timed futex wait becomes EINTR once a handler ran).
//! * a blocking `waitpid`/`wait4`/`waitid` while no matching child has exited: the handler runs,
//!   then the call waits again with `SA_RESTART`, else fails with EINTR.
//! * a condition wait (`pthread_cond_wait`/`timedwait`): the handler runs *inside* the wait and
//!   the wait goes on, as glibc's does: the thread stays in the condvar's queue while its
//!   handler runs ([`Model::in_handler`]), so a signal the handler sends to the condvar wakes it,
//!   and the preload's next `CondWait` post with the same arguments resumes the wait where it
//!   stood. A mutex lock (`pthread_mutex_lock`, a condition wait re-taking its mutex) is never
//!   interrupted.
//!
//! A `SigSuspend` or `SigWait` has no `Run` at all: only a signal (or a `SigWait`'s timeout)
//! ends it.
use dara_abi::Request as R;

use super::thread::{Phase, Wait};
use super::{Model, Request};
use crate::choice::ThreadId;

/// The result of an interrupted wait: `-EINTR`.
pub const INTERRUPTED: i64 = -(libc::EINTR as i64);

/// Whether a signal may end `request` while it is pending (posted, not yet in effect): a
/// blocking poll or epoll wait, a blocking receive, accept or send marked interruptible, a
/// sigsuspend, a sigwait (which a signal of its set ends too, caught or not), a sleep or a
/// semaphore wait. The mask that decides which signals count is the wait's own for a
/// sigsuspend (its `mask`), else the thread's (see `dara_abi::Slot::program_mask`).
pub fn interruptible(request: &Request) -> bool {
    let flags = request.net_flags();
    match request {
        R::NetPoll { .. } | R::NetEpollWait { .. } => !flags.nonblocking(),
        R::NetRecv { .. } | R::NetAccept { .. } | R::FifoOpen { .. } | R::NetSend { .. } | R::NetConnect { .. } => flags.interruptible() && !flags.nonblocking(),
        R::SigSuspend { .. } | R::SigWait { .. } | R::Sleep { .. } | R::SemWait { .. } => true,
        R::ProcessWait { options, .. } => !options.nohang,
        _ => false,
    }
}

/// The wait of a thread in `phase` that a signal may end now, if any: an interruptible pending
/// request, or a condition or futex wait in its queue (not one that was woken and re-takes its
/// mutex or waits to be run).
fn interruptible_wait(phase: Phase) -> Option<Request> {
    match phase {
        Phase::Pending(r) if interruptible(&r) => Some(r),
        Phase::Waiting(r, Wait::Cond { .. } | Wait::Futex) => Some(r),
        _ => None,
    }
}

impl Model {
    /// Whether some thread is parked in a wait a signal may end.
    pub fn has_interruptible_wait(&self) -> bool {
        self.threads.values().any(|t| interruptible_wait(t.phase).is_some())
    }

    /// Threads parked in a wait a signal may end, with the wait.
    pub fn interruptible_waits(&self) -> Vec<(ThreadId, Request)> {
        self.threads.iter().filter_map(|(&id, t)| interruptible_wait(t.phase).map(|r| (id, r))).collect()
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
    /// A `waitpid` whose child has exited is not: the kernel collects the child before it looks
    /// for signals (a `SIGCHLD` handler runs after the wait returns).
    pub(super) fn offers_interrupt(&self, thread: ThreadId) -> bool {
        let Some(t) = self.threads.get(&thread).filter(|_| self.signalled.contains(&thread)) else { return false };
        match interruptible_wait(t.phase) {
            Some(R::ProcessWait { target, options }) => self.wait_alternatives(t.process, target, options) == 0,
            wait => wait.is_some(),
        }
    }

    /// Applies `Interrupt`: the wait ends with [`INTERRUPTED`]. A futex waiter leaves its queue;
    /// a condition waiter stays in its queue while it runs the handler (see the module doc).
    pub(super) fn interrupt(&mut self, thread: ThreadId) -> super::ops::Step {
        self.signalled.remove(&thread);
        self.net.remove(&thread);
        match self.threads.get(&thread).map(|t| t.phase) {
            Some(Phase::Waiting(r, wait @ Wait::Cond { .. })) => {
                self.in_handler.insert(thread, (r, wait));
            }
            Some(Phase::Waiting(_, Wait::Futex)) => self.objects.forget_waiter(thread),
            _ => {}
        }
        super::ops::Step::Grant(INTERRUPTED)
    }

    /// `thread` posted `request`. True when it resumes a condition wait its handler interrupted:
    /// the thread is back in the wait, where the wait stood (in the queue, or woken meanwhile).
    /// A thread that ends instead (a handler that exits the thread) leaves the queue.
    pub(super) fn resume_after_handler(&mut self, thread: ThreadId, request: Request) -> bool {
        let Some(&(waited, wait)) = self.in_handler.get(&thread) else { return false };
        if request == waited {
            self.in_handler.remove(&thread);
            if let Some(t) = self.threads.get_mut(&thread) {
                t.phase = Phase::Waiting(request, wait);
            }
            return true;
        }
        if request == R::ThreadExit {
            self.leave_handler(thread);
        }
        false
    }

    /// A condition wait's waiter that runs its handler was woken (signal, broadcast): it finds
    /// itself woken when it resumes. False when `thread` runs no handler.
    pub(super) fn woken_in_handler(&mut self, thread: ThreadId, wait: Wait) -> bool {
        match self.in_handler.get_mut(&thread) {
            Some((_, stored)) => {
                *stored = wait;
                true
            }
            None => false,
        }
    }

    /// `thread` will not resume the condition wait its handler interrupted (it exits).
    pub(super) fn leave_handler(&mut self, thread: ThreadId) {
        if self.in_handler.remove(&thread).is_some() {
            self.objects.forget_waiter(thread);
        }
    }
}
