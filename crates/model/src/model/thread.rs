//! Threads as the model sees them: which process they belong to and where they are in the
//! post → apply → grant cycle.
//!
//! ```text
//!  add_thread ─► Running ──post──► Pending ──Run/Timeout──► Running   (Effect::Grant)
//!                   ▲                 │ ▲
//!                   │                 │ └─ (a semaphore whose value was unknown is 0: stays)
//!                   │                 ▼
//!                   └──Run/Timeout── Waiting(wait)                     (Effect::Blocked)
//!  ThreadExit granted, or process_exited ─► Exited
//! ```
//!
//! `Pending` means the request has not taken effect yet; `Waiting` means it has (the thread sits
//! in a condvar, futex or barrier queue, or was woken and still has to finish) and `Wait` says
//! what it waits for. Either way the thread is parked and only a choice moves it.
use super::Request;
use crate::choice::ProcessId;

#[derive(Clone, Debug)]
pub(crate) struct Thread {
    pub process: ProcessId,
    pub phase: Phase,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Holds the run token (or was just registered and is about to post its start op).
    Running,
    /// Posted `Request`, not applied yet.
    Pending(Request),
    /// `Request` was applied and the thread is parked on the way to completing it.
    Waiting(Request, Wait),
    Exited,
}

/// What a thread in [`Phase::Waiting`] waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wait {
    /// In a condvar's waiter queue. `signals_seen` is the condvar's signal count when the wait
    /// began, so the deadlock report can tell "never signalled" from "signal went elsewhere".
    Cond { signals_seen: u64 },
    /// Left the condvar (signalled, or its timer fired) and must re-acquire the mutex; the wait
    /// then returns ETIMEDOUT if `timed_out`, else 0. No timeout any more: pthread re-acquires the
    /// mutex without one.
    CondReacquire { timed_out: bool },
    /// In a futex wait queue.
    Futex,
    /// Arrived at a barrier, waits for the round to fill up.
    Barrier,
    /// Released (futex wake, barrier round complete); `Run` grants `result`.
    Woken { result: i64 },
}

/// Where a thread stands, for the driver and for tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThreadStatus {
    /// Holds the run token: granted, has not posted again yet.
    Running,
    /// Posted this request; it has not taken effect yet.
    Pending(Request),
    /// This request took effect partly and the thread waits to complete it (condvar, futex,
    /// barrier, or re-acquiring a mutex after a condvar wait).
    Blocked(Request),
    Exited,
}

impl Thread {
    pub(crate) fn status(&self) -> ThreadStatus {
        match self.phase {
            Phase::Running => ThreadStatus::Running,
            Phase::Pending(r) => ThreadStatus::Pending(r),
            Phase::Waiting(r, _) => ThreadStatus::Blocked(r),
            Phase::Exited => ThreadStatus::Exited,
        }
    }

    /// The request the thread is parked on, if it is parked.
    pub(crate) fn request(&self) -> Option<Request> {
        match self.phase {
            Phase::Pending(r) | Phase::Waiting(r, _) => Some(r),
            Phase::Running | Phase::Exited => None,
        }
    }

    /// Posted and not applied yet.
    pub(crate) fn is_pending(&self) -> bool {
        matches!(self.phase, Phase::Pending(_))
    }

    pub(crate) fn is_live(&self) -> bool {
        self.phase != Phase::Exited
    }
}
