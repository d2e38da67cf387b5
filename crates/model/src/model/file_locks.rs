//! Threads waiting for a file lock (`flock`, `fcntl(F_SETLKW)`, `fcntl(F_OFD_SETLKW)`,
//! `lockf(F_LOCK)`) that another holder has: a probed wait, not a modelled one.
//!
//! dara does not model file locks: who holds one is the kernel's to say, and a lock is released
//! by an unlock, by closing the last descriptor of its open file, or by its process's end, which
//! dara does not all see as such (closing a plain file is no scheduling point). The preload tries
//! the lock without blocking; when another holder has it, the thread posts `FileLock` and waits
//! here until another thread has taken a step since, which is when the lock may have been
//! released, and then tries again. Another waiter's retry does not count: it releases nothing,
//! and two waiters would otherwise enable each other's retries for ever. A thread whose lock nobody left can release is then, as it
//! should be, part of a deadlock: nothing else can move and its retry is not offered.
use std::collections::BTreeMap;

use crate::choice::ThreadId;

#[derive(Clone, Debug, Default)]
pub(super) struct FileLockWaits {
    /// Steps taken in this execution so far.
    steps: u64,
    /// Each waiting thread, with the step count when it posted its wait.
    posted: BTreeMap<ThreadId, u64>,
}

impl FileLockWaits {
    /// A step that may have released a file lock was taken (any but a file lock's retry).
    pub(super) fn step(&mut self) {
        self.steps += 1;
    }

    /// `thread` found the lock taken and waits.
    pub(super) fn wait(&mut self, thread: ThreadId) {
        self.posted.insert(thread, self.steps);
    }

    /// Whether `thread`'s lock may have been released since it posted: another thread has taken
    /// a step since (the waiting thread itself stood still meanwhile).
    pub(super) fn may_retry(&self, thread: ThreadId) -> bool {
        self.posted.get(&thread).is_some_and(|&at| self.steps > at)
    }

    /// `thread` is gone.
    pub(super) fn forget(&mut self, thread: ThreadId) {
        self.posted.remove(&thread);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waiting_thread_retries_only_after_someone_else_moved() {
        let mut waits = FileLockWaits::default();
        waits.step();
        waits.wait(1);
        assert!(!waits.may_retry(1), "nothing happened since the failed try");
        assert!(!waits.may_retry(2), "a thread that does not wait");
        waits.step();
        assert!(waits.may_retry(1));
        waits.wait(1);
        assert!(!waits.may_retry(1), "posted again after its retry");
        waits.forget(1);
        waits.step();
        assert!(!waits.may_retry(1));
    }
}
