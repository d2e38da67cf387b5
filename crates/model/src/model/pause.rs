//! The `pause` faults' bookkeeping (docs/time.md): which threads stand still, and in which
//! pause. A thread pause (`--faults pause`) stops one thread; a node pause (`--faults
//! pause-node`) stops every thread of a node's processes at once. Either way the paused threads
//! offer nothing while anyone else can move, and a pause ends as a whole when one of its threads
//! is chosen (which happens once nobody else can move): a node comes back from a GC pause or a
//! SIGSTOP all at once, not thread by thread.
//!
//! When the clock jumps differs: a thread pause moves it at once to the other threads' next
//! deadline (recorded in the choice). A node pause lets the other nodes finish what they can do
//! at the current instant first and moves the clock once nobody else can move, to the next
//! deadline they have then (a server that was answering a request has gone back to its poll
//! and its timeout by then): the jump is *due* until then.
use std::collections::{BTreeMap, BTreeSet};

use crate::choice::ThreadId;

/// Which pause a thread stands still in (pauses are numbered in the order they were taken).
type PauseId = u32;

#[derive(Clone, Debug, Default)]
pub(super) struct Pauses {
    paused: BTreeMap<ThreadId, PauseId>,
    /// Node pauses whose clock jump is still to come (once nobody else can move).
    jump_due: BTreeSet<PauseId>,
    /// Pauses taken so far (thread and node pauses both number from it).
    taken: PauseId,
    /// Thread pauses taken so far (against `--faults pause`; node pauses are booked by the
    /// cluster, against `pause-node`).
    thread_pauses: u32,
}

impl Pauses {
    /// Stops one thread; the caller has moved the clock.
    pub(super) fn start_thread_pause(&mut self, thread: ThreadId) {
        self.thread_pauses += 1;
        self.start([thread]);
    }

    /// Stops `threads` together; the clock jumps once nobody else can move.
    pub(super) fn start_node_pause(&mut self, threads: &[ThreadId]) {
        let id = self.start(threads.iter().copied());
        self.jump_due.insert(id);
    }

    fn start(&mut self, threads: impl IntoIterator<Item = ThreadId>) -> PauseId {
        let id = self.taken;
        self.taken += 1;
        self.paused.extend(threads.into_iter().map(|t| (t, id)));
        id
    }

    pub(super) fn contains(&self, thread: ThreadId) -> bool {
        self.paused.contains_key(&thread)
    }

    pub(super) fn threads(&self) -> impl Iterator<Item = ThreadId> + '_ {
        self.paused.keys().copied()
    }

    /// Whether a node pause still waits for its clock jump.
    pub(super) fn jump_due(&self) -> bool {
        !self.jump_due.is_empty()
    }

    /// The clock jumped for every node pause that waited for it.
    pub(super) fn jumped(&mut self) {
        self.jump_due.clear();
    }

    /// `thread` was chosen: the pause it stood still in is over for every thread of it.
    pub(super) fn chosen(&mut self, thread: ThreadId) {
        if let Some(id) = self.paused.get(&thread).copied() {
            self.paused.retain(|_, p| *p != id);
            self.jump_due.remove(&id);
        }
    }

    /// `thread` is gone (its process exited or was killed); a pause left without threads is over.
    pub(super) fn forget(&mut self, thread: ThreadId) {
        if let Some(id) = self.paused.remove(&thread) {
            if !self.paused.values().any(|&p| p == id) {
                self.jump_due.remove(&id);
            }
        }
    }

    pub(super) fn thread_pauses(&self) -> u32 {
        self.thread_pauses
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pause_ends_for_all_its_threads_when_one_is_chosen() {
        let mut p = Pauses::default();
        p.start_node_pause(&[1, 2]);
        p.start_thread_pause(5);
        assert_eq!(p.threads().collect::<Vec<_>>(), vec![1, 2, 5]);
        assert!(p.jump_due());
        p.chosen(2);
        assert_eq!(p.threads().collect::<Vec<_>>(), vec![5], "the node's pause is over; the thread's is not");
        assert!(!p.jump_due());
        assert_eq!(p.thread_pauses(), 1, "node pauses are booked by the cluster");
        p.forget(5);
        assert!(!p.contains(5));
    }

    #[test]
    fn a_node_pause_whose_threads_are_all_gone_waits_for_no_jump() {
        let mut p = Pauses::default();
        p.start_node_pause(&[3, 4]);
        p.forget(3);
        assert!(p.jump_due());
        p.forget(4);
        assert!(!p.jump_due());
    }
}
