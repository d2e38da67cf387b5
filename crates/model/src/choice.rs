//! Choices and the decision interface.
//!
//! At every step the model lists the enabled [`Choice`]s in a deterministic order (by thread, then
//! kind, then alternative); a [`Decide`] implementation (a strategy in `dara-explorer`) picks one by
//! index. The chosen `Choice` is what the trace records, so replay can check it is still offered.
use dara_abi::Op;
use serde::{Deserialize, Serialize};

pub mod object;
pub use object::{ChoiceObject, NetObject};

/// Logical thread id: the thread's slot index, assigned in creation order across the execution.
pub type ThreadId = u32;
/// Logical process id, in creation order.
pub type ProcessId = u32;

/// How the chosen thread proceeds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ChoiceKind {
    /// Perform the pending operation (acquire the lock, return from the yield, ...).
    Run,
    /// Fire the thread's timer: virtual time jumps to its deadline and the pending sleep ends or
    /// the timed wait returns ETIMEDOUT. Offered whenever the thread has a deadline, so a strategy
    /// can make a timeout win a race against other threads' work.
    Timeout,
    /// A signal ends the thread's wait: a caught signal its mask lets through is pending for a
    /// thread parked in `poll`/`select`/`epoll_wait` (which then fails with EINTR) or in
    /// `sigsuspend`/`pause` (which only this ends). Offered once the driver found such a signal
    /// (`Model::set_signalled`); the handler runs as the thread goes on.
    Interrupt,
    /// Inject a fault (`op` is one of the fault ops: crash, restart, partition, ...). Node-level
    /// faults carry [`FAULT_THREAD`] as their thread; a dropped datagram carries the receiving
    /// thread. Offered only in cluster runs, within the fault budgets.
    Fault,
}

/// The `thread` of a fault choice that no thread makes (crash, restart, partition, ...).
pub const FAULT_THREAD: ThreadId = u32::MAX;

/// One enabled way the system can move on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Choice {
    pub thread: ThreadId,
    pub kind: ChoiceKind,
    /// Which alternative of a nondeterministic operation: for `CondSignal`, the index (in waiting
    /// order) of the waiter it wakes. 0 for everything else.
    pub alt: u32,
    /// The thread's pending operation (informational for strategies, checked by replay).
    pub op: Op,
    /// The object the operation is about (mutex address, deadline for sleeps, ...): the request's
    /// first argument word ([`dara_abi::Request::subject`]), a shared object's name, a network
    /// description or a fault's node(s). Read it typed with [`Choice::object`].
    pub obj: u64,
}

/// A replayed decision that the current execution no longer offers.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("diverged at step {step}: expected {expected}, but the run offered {seen}")]
pub struct Divergence {
    pub step: u64,
    pub expected: String,
    pub seen: String,
}

/// Picks one of the enabled choices. `choices` is never empty and is in the model's deterministic
/// order. Returns an index into `choices`.
pub trait Decide {
    fn choose(&mut self, step: u64, choices: &[Choice]) -> Result<usize, Divergence>;
}
