//! The watchdog over threads being born: a slot a `pthread_create` claimed whose thread has not
//! posted its `ThreadStart` yet. The scheduler takes no decision while such a thread is on its
//! way (the decision must include it), and nobody holds the run token meanwhile, so the token
//! holder's watchdog never looks. Code that runs in a new thread before dara's start wrapper (a
//! sanitizer runtime's thread start, a library that wraps `pthread_create`) can block in the
//! kernel on a lock a parked thread holds; without this watchdog that run stalled silently.
//!
//! The verdict is the holder's: asleep in the kernel for `--watchdog-ms` without being put on a
//! CPU once (a loaded machine delays a newborn but does not make it sleep unrun). A newborn that
//! has not yet written its tid into its slot is looked for among its process's threads that no
//! slot names.
use std::sync::atomic::Ordering;
use std::time::Instant;


use super::watchdog::{blocked_outside, Look, TokenHolder, WATCHDOG_GRACE};
use super::Execution;
use crate::choice::ThreadId;
use crate::outcome::Outcome;
use crate::procfs;

/// What the watchdog has seen of the threads being born.
#[derive(Default)]
pub(super) struct Newborns {
    /// Since when the scheduler has waited for a newborn with nobody holding the token.
    since: Option<Instant>,
    /// Each thread looked at, by tid, with what was seen of it.
    watched: Vec<(u32, TokenHolder)>,
}

impl Execution<'_> {
    /// Checks the threads being born while nobody holds the token: one asleep in the kernel
    /// before reaching dara's start wrapper ends the run as uncontrolled blocking, named.
    pub(super) fn watch_newborns(&mut self) -> Option<Outcome> {
        let starting = self.handoff.starting(&self.region);
        if starting.is_empty() {
            self.handoff.newborns = Newborns::default();
            return None;
        }
        let now = Instant::now();
        if now - *self.handoff.newborns.since.get_or_insert(now) < WATCHDOG_GRACE {
            return None;
        }
        for index in starting {
            let slot = self.region.slot(index);
            let (pid, tid) = self.region.kernel_ids(index);
            let process = slot.process.load(Ordering::Relaxed);
            // /proc is looked at only while the process has not ended (its pidfd says).
            let ended = self.processes.records.get(&process).and_then(|r| r.pidfd.as_ref()).is_none_or(procfs::pidfd_exited);
            if pid == 0 || ended {
                continue;
            }
            let tids = if tid != 0 { vec![tid] } else { self.threads_without_slot(pid) };
            for tid in tids {
                if let Some(outcome) = self.look_at_newborn(index as ThreadId, pid, tid, now) {
                    return Some(outcome);
                }
            }
        }
        None
    }

    /// One look at thread `tid`, taken to be newborn `thread`.
    fn look_at_newborn(&mut self, thread: ThreadId, pid: u32, tid: u32, now: Instant) -> Option<Outcome> {
        let watched = &mut self.handoff.newborns.watched;
        let at = match watched.iter().position(|(t, _)| *t == tid) {
            Some(at) => at,
            None => {
                watched.push((tid, TokenHolder::new(thread)));
                watched.len() - 1
            }
        };
        let Look::Asleep { state, for_ } = watched[at].1.look_at(pid, tid, now) else { return None };
        if for_ < self.sleep_limit(state) {
            return None;
        }
        let role = "is being born and has not reached dara's start wrapper (code that runs first in a new thread: a sanitizer runtime's thread start, a library wrapping pthread_create); it";
        Some(blocked_outside(thread, pid, tid, role, for_, ", while the scheduler waits for it"))
    }

    /// The newest thread of process `pid` that no slot names: a newborn that has not written
    /// its tid yet. Older unnamed threads (a sanitizer runtime's helpers, started before) are
    /// not it.
    fn threads_without_slot(&self, pid: u32) -> Vec<u32> {
        let known: Vec<u32> = (0..self.handoff.known_slots)
            .map(|i| self.region.slot(i))
            .filter(|s| s.pid.load(Ordering::Relaxed) == pid)
            .map(|s| s.tid.load(Ordering::Relaxed))
            .collect();
        let unnamed = procfs::thread_ids(pid).into_iter().filter(|t| !known.contains(t));
        let started: Vec<(u64, u32)> = unnamed.filter_map(|t| Some((procfs::thread_sample(pid, t)?.start, t))).collect();
        let newest = started.iter().map(|&(start, _)| start).max();
        started.into_iter().filter(|&(start, _)| Some(start) == newest).map(|(_, t)| t).collect()
    }
}
