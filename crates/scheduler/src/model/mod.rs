//! The pure model of one execution: threads and what each waits for, synchronization objects
//! (mutexes, rwlocks, condition variables, semaphores, barriers, once-controls, futex words),
//! timers and the virtual clock. It turns pending operations into the enabled set and applies a
//! chosen [`Choice`]. No I/O: the only window on the target is [`MemoryReader`], used to read a
//! futex word or an object that was initialised statically.
//!
//! Determinism: every collection that is iterated is ordered (BTreeMap / Vec in arrival order),
//! so the same sequence of posts and choices yields the same enabled sets on every run.
use dara_abi::Op;

use crate::choice::{Choice, ProcessId, ThreadId};
use crate::outcome::BlockedThread;

/// Virtual nanoseconds added to the clock by every decision, so code that spins on a clock read
/// sees time pass.
pub const TICK_NS: u64 = 1_000;

/// Reads target memory (the scheduler implements it with `process_vm_readv`).
pub trait MemoryReader {
    fn read_u32(&mut self, process: ProcessId, addr: u64) -> Option<u32>;
}

/// A pending operation as posted by a thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    pub op: Op,
    pub args: [u64; 4],
}

/// What applying a choice did to the chosen thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect {
    /// The thread may continue: write `result` into its slot and wake it. It holds the run token
    /// until its next post.
    Grant { result: i64 },
    /// The thread stays parked (it now waits for an object or its timer); nobody holds the token.
    Blocked,
}

pub struct Model {
    // filled in by the implementation
}

impl Model {
    pub fn new() -> Model {
        todo!()
    }
    /// Current virtual time.
    pub fn now(&self) -> u64 {
        todo!()
    }
    /// A thread (new process's main thread or a new thread) has posted its start op.
    pub fn add_thread(&mut self, thread: ThreadId, process: ProcessId) {
        todo!()
    }
    /// `thread` stopped at a scheduling point with `request` pending.
    pub fn post(&mut self, thread: ThreadId, request: Request) {
        todo!()
    }
    /// The enabled choices, in deterministic order. Empty means: nothing can move (deadlock if
    /// `live_threads()` is non-empty).
    pub fn choices(&self) -> Vec<Choice> {
        todo!()
    }
    /// Applies a choice previously returned by `choices()`; advances the clock.
    pub fn apply(&mut self, choice: &Choice, mem: &mut dyn MemoryReader) -> Effect {
        todo!()
    }
    /// Every thread of `process` is gone (the process exited or was killed).
    pub fn process_exited(&mut self, process: ProcessId) {
        todo!()
    }
    /// Threads that have not exited.
    pub fn live_threads(&self) -> Vec<ThreadId> {
        todo!()
    }
    /// For a deadlock report: each live thread, what it waits on, and who holds it.
    pub fn blocked_report(&self) -> Vec<BlockedThread> {
        todo!()
    }
}
