//! The scheduler's side of the slot protocol (the handoff diagram is in the abi): which slots
//! exist, which of their posts were ingested, which threads have finished, and who holds the run
//! token. A thread posts (state `POSTED`, `posts` counted up) and waits; the scheduler ingests
//! each post once, decides, and grants exactly one thread (`GRANTED`, futex wake).
//!
//! The scan is over [`Handoff::active`] only (claimed slots not yet finished, in claim order), so
//! the cost of a step does not grow with the number of threads that ever existed.
use std::sync::atomic::Ordering;

use dara_abi::handoff::{self, Seen};
use dara_abi::state;

use super::newborn::Newborns;
use super::processes::ProcessTable;
use super::watchdog::TokenHolder;
use crate::choice::ThreadId;
use crate::outcome::Outcome;
use crate::region::Region;

#[derive(Default)]
pub(super) struct Handoff {
    /// `posts` counter of each slot when last ingested. This and `finished` cover the slots
    /// noted so far (see [`Handoff::cover`]), not `MAX_SLOTS` from the start: zeroing 20 KiB
    /// for every execution showed in profiles of small programs.
    pub(super) seen_posts: Vec<u32>,
    /// Slots whose thread has finished (or never came to be).
    pub(super) finished: Vec<bool>,
    /// Claimed slots not yet finished, in claim order: what each wake-up scans.
    pub(super) active: Vec<usize>,
    /// Slots claimed so far (those below are in `active` or finished).
    pub(super) known_slots: usize,
    /// Who runs now (granted and not posted since), watched by the watchdog.
    pub(super) holder: Option<TokenHolder>,
    /// Threads being born that the scheduler waits for.
    pub(super) newborns: Newborns,
    /// Posts ingested so far (movement, for the stall bound).
    ingested: u64,
}

/// Where one scan over the active slots is.
#[derive(Default)]
pub(super) struct Scan {
    next: usize,
    /// No slot seen so far is running or starting.
    pub(super) quiet: bool,
}

impl Scan {
    pub(super) fn new() -> Scan {
        Scan { next: 0, quiet: true }
    }
}

impl Handoff {
    /// Whether `thread` holds the run token.
    pub(super) fn holds(&self, thread: ThreadId) -> bool {
        self.holder.as_ref().is_some_and(|h| h.thread == thread)
    }

    /// The token holder, if any.
    pub(super) fn holder(&self) -> Option<ThreadId> {
        self.holder.as_ref().map(|h| h.thread)
    }

    /// `thread` posted: it no longer runs.
    pub(super) fn posted(&mut self, thread: ThreadId) {
        if self.holds(thread) {
            self.holder = None;
        }
    }

    /// `thread` is gone for good (exited, or its image was replaced).
    pub(super) fn finish(&mut self, thread: ThreadId) {
        self.cover(thread as usize + 1);
        self.finished[thread as usize] = true;
    }

    /// Grows the per-slot records to the first `slots` slots (new ones: nothing ingested, not
    /// finished).
    fn cover(&mut self, slots: usize) {
        if self.seen_posts.len() < slots {
            self.seen_posts.resize(slots, 0);
            self.finished.resize(slots, false);
        }
    }

    /// Adds newly claimed slots to the scan list and drops finished ones. Ends the run when the
    /// slot table overflowed: the program was refused a thread (EAGAIN) because of dara's limit,
    /// and whatever it does next is not its own behaviour.
    pub(super) fn note_new_slots(&mut self, region: &Region) -> Result<(), Outcome> {
        let claimed = handoff::claimed(&region.header().next_slot) as usize;
        if claimed > dara_abi::MAX_SLOTS {
            return Err(Outcome::Uncontrolled {
                thread: 0,
                syscall: "pthread_create".into(),
                detail: format!("the program created more than {} threads in one execution, dara's limit (threads are not reused yet); the run was stopped", dara_abi::MAX_SLOTS),
            });
        }
        while self.known_slots < claimed {
            self.active.push(self.known_slots);
            self.known_slots += 1;
        }
        self.cover(claimed);
        let finished = &self.finished;
        self.active.retain(|&i| !finished[i]);
        Ok(())
    }

    /// Posts ingested so far.
    pub(super) fn ingested(&self) -> u64 {
        self.ingested
    }

    /// Slots claimed so far.
    pub(super) fn known_slots(&self) -> usize {
        self.known_slots
    }

    /// Threads of claimed, unfinished slots that are not parked at a scheduling point (being
    /// created, granted, or running), in claim order.
    pub(super) fn unparked(&self, region: &Region) -> Vec<ThreadId> {
        let parked = |i: usize| matches!(region.slot(i).state.load(Ordering::Acquire), state::POSTED | state::EXITED | state::FREE);
        self.active.iter().copied().filter(|&i| !self.finished[i] && !parked(i)).map(|i| i as ThreadId).collect()
    }

    /// Whether a slot was claimed that the last [`Handoff::note_new_slots`] did not see.
    pub(super) fn claimed_unseen(&self, region: &Region) -> bool {
        handoff::claimed(&region.header().next_slot) as usize > self.known_slots
    }

    /// Continues `scan` to the next slot with a post not ingested yet (marking it seen), noting
    /// running slots on the way; None when the scan is over. Slots of processes that ended are
    /// skipped.
    pub(super) fn next_post(&mut self, region: &Region, processes: &ProcessTable, scan: &mut Scan) -> Option<ThreadId> {
        while scan.next < self.active.len() {
            let i = self.active[scan.next];
            scan.next += 1;
            if self.finished[i] {
                continue;
            }
            let pid = region.slot(i).pid.load(Ordering::Acquire);
            if pid != 0 && processes.pid_is_dead(pid) {
                continue;
            }
            match region.observe(i, self.seen_posts[i]) {
                Seen::NewPost(posts) => {
                    self.seen_posts[i] = posts;
                    self.ingested += 1;
                    return Some(i as ThreadId);
                }
                Seen::Waiting => {}
                Seen::Exited => self.finished[i] = true,
                Seen::Starting | Seen::Running => scan.quiet = false,
            }
        }
        None
    }

    /// Whether every active slot is parked with its post ingested, exited, or of an ended
    /// process: the second look a scan takes, since a post ingested late in it may have finished
    /// a slot seen busy earlier (an exec ends the old image's threads).
    pub(super) fn all_parked(&self, region: &Region, processes: &ProcessTable) -> bool {
        self.active.iter().all(|&i| {
            let pid = region.slot(i).pid.load(Ordering::Acquire);
            self.finished[i] || (pid != 0 && processes.pid_is_dead(pid)) || matches!(region.observe(i, self.seen_posts[i]), Seen::Waiting | Seen::Exited)
        })
    }

    /// Whether `thread` posted again since its post was last ingested.
    pub(super) fn moved_on(&self, region: &Region, thread: ThreadId) -> bool {
        let slot = region.slot(thread as usize);
        slot.state.load(Ordering::Acquire) == state::POSTED || slot.posts.load(Ordering::Acquire) != self.seen_posts.get(thread as usize).copied().unwrap_or(0)
    }

    /// Hands the token to `thread`: writes `result` and the virtual time `now_ns` into its slot,
    /// stamps the region with `step` (edges the thread reaches first are counted for it), and
    /// wakes exactly that thread.
    pub(super) fn grant(&mut self, region: &Region, thread: ThreadId, result: i64, now_ns: u64, step: u32) {
        region.header().step.store(step, Ordering::Relaxed);
        region.grant(thread as usize, result, now_ns);
        self.holder = Some(TokenHolder::new(thread));
    }

    /// Slots claimed but whose thread has not started yet (state `STARTING`), while nobody holds
    /// the token.
    pub(super) fn starting(&self, region: &Region) -> Vec<usize> {
        if self.holder.is_some() {
            return Vec::new();
        }
        self.active.iter().copied().filter(|&i| !self.finished[i] && region.slot(i).state.load(Ordering::Acquire) == state::STARTING).collect()
    }
}
