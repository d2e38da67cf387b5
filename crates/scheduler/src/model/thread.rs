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
use dara_abi::Op;

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

impl Request {
    pub fn new(op: Op, args: [u64; 4]) -> Request {
        Request { op, args }
    }

    /// The virtual time at which this request times out, if it can time out at all.
    pub fn deadline(&self) -> Option<u64> {
        let arg = match self.op {
            Op::Sleep => self.args[0],
            Op::RwReadLock | Op::RwWriteLock | Op::SemWait | Op::SigWait => self.args[1],
            Op::MutexLock | Op::CondWait | Op::FutexWait => self.args[2],
            Op::NetRecv | Op::NetAccept | Op::NetPoll | Op::NetEpollWait => self.args[2],
            _ => return None,
        };
        (arg != dara_abi::NO_DEADLINE).then_some(arg)
    }

    /// Address of the synchronization object the request is about, 0 when its first argument is
    /// not an address (a thread slot, a deadline, a status, a syscall number).
    pub fn object_addr(&self) -> u64 {
        match self.op {
            Op::MutexLock
            | Op::MutexTryLock
            | Op::MutexUnlock
            | Op::RwReadLock
            | Op::RwWriteLock
            | Op::RwTryReadLock
            | Op::RwTryWriteLock
            | Op::RwUnlock
            | Op::Held
            | Op::CondWait
            | Op::CondSignal
            | Op::CondBroadcast
            | Op::BarrierInit
            | Op::BarrierWait
            | Op::OnceBegin
            | Op::OnceDone
            | Op::SemInit
            | Op::SemWait
            | Op::SemTryWait
            | Op::SemPost
            | Op::FutexWait
            | Op::FutexWake
            | Op::MemoryRead
            | Op::MemoryWrite => self.args[0],
            Op::ProcessStart
            | Op::ThreadStart
            | Op::ThreadCreate
            | Op::ThreadExit
            | Op::ThreadJoin
            | Op::ThreadDetach
            | Op::ProcessExit
            | Op::Yield
            | Op::EdgeQuantum
            | Op::Fault
            | Op::SignalArrived
            | Op::SigSuspend
            | Op::SigWait
            | Op::ProcessFork
            | Op::ProcessExec
            | Op::ProcessWait
            | Op::ProcessKill
            | Op::Sleep
            | Op::ClockRead
            | Op::Unsupported
            | Op::NodeCrash
            | Op::NodeRestart
            | Op::Partition
            | Op::Heal
            | Op::DropDatagram
            | Op::ConnReset
            | Op::ClockSkew
            | Op::Pause
            | Op::NodePause
            | Op::NetRecv
            | Op::NetSend
            | Op::NetAccept
            | Op::NetConnect
            | Op::NetPoll
            | Op::NetEpollWait
            | Op::NetClose
            | Op::NetListen
            | Op::FifoOpen => 0,
        }
    }
}
