//! The adaptive watch set of `--preempt-on memory`: sharing that later executions show is
//! watched by the executions after them, deterministically.
//!
//! The profiling run ([`crate::profile`]) sees one natural-order schedule; a variable that only
//! becomes shared on another path (a thread that runs before a flag is set) is not in its watch
//! set, so its accesses are never scheduling points and a race on it can never be scheduled. In
//! search executions the preload therefore records every access to an *unwatched* granule in the
//! access table, as the profile does (`dara_abi::access::note`: one probe, no allocation, no lock),
//! and the execution's report lists the granules it saw touched by two threads, one writing
//! (`AccessProfile::racy`, which never holds a watched granule).
//!
//! **Determinism.** Which accesses are points decides which decisions exist, so the watch set an
//! execution uses must depend only on the search's seed and the execution's index, never on
//! `--jobs` or timing. Executions are grouped in *epochs* of [`EPOCH`] consecutive indices, a
//! constant; every execution of epoch `e` uses the profile's watch set plus the new sharing of
//! every execution of epochs `0..e`, merged in execution order and capped at `MAX_WATCHED`
//! (first discovered first kept). The judge sees executions in index order whatever `--jobs` is
//! (`search::parallel` reorders them), and each execution's sharing depends only on its own
//! schedule, which depends only on (seed, index, its watch set): by induction on epochs every
//! set, every decision and every bug is the same for every `--jobs`. The price is a wait: with
//! several jobs, a worker that takes the first execution of epoch `e` waits until the judge has
//! seen the last one of epoch `e - 1` (at most one execution's time per worker and epoch). Each
//! trace header carries the set its execution used, so replay, `--verify` and minimization need
//! nothing else.
//!
//! Systematic strategies (`dfs`, `dpor`) build one decision tree over the whole search; new
//! points between two executions would change the tree under them. Their searches grow in
//! *rounds* instead: a round keeps its set until the strategy has explored its whole space;
//! if its executions showed sharing outside the set, the next execution starts a new round
//! with a fresh strategy and the grown set; a round that showed nothing new is a fixpoint, and
//! only then is "explored all schedules" a claim about the watched memory. A search whose
//! executions run out first ends with its sharing unwatched ("not exhaustive",
//! `BlindSpot::UnwatchedSharing`). Rounds run one execution after another, like the strategies.
use std::collections::BTreeSet;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use dara_scheduler::preempt::{AccessProfile, MAX_WATCHED};

/// Executions per epoch: the watch set can grow after every [`EPOCH`] executions. Small, so a
/// sharing found early is watched soon; a constant, so it is the same for every `--jobs`.
pub const EPOCH: u64 = 8;

/// The epoch of execution `k`.
pub fn epoch_of(k: u64) -> u64 {
    k / EPOCH
}

/// How the watch set grew at the end of an epoch or round, for the user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Growth {
    /// Granules added.
    pub added: usize,
    /// The last execution whose sharing was merged; executions after it watch the new set.
    pub after: u64,
    /// Granules watched from execution `after + 1` on.
    pub watched: usize,
}

/// How a search's watch set grows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Growing {
    /// Never: no memory points.
    Never,
    /// After every [`EPOCH`] executions (sampling and learning strategies).
    Epochs,
    /// When a systematic strategy has exhausted its space: the search starts a new round, with
    /// a fresh strategy, from the next execution.
    Rounds,
}

/// The watch sets of one search: the judge adds each judged execution's new sharing in
/// execution order, and executions wait for their set.
pub struct WatchSets {
    growing: Growing,
    /// Every granule an execution touched outside the set is new, not only the shared written
    /// ones (`Preemption::watches_every_touched`: `memory:all`, trapped atomics alone).
    every_touched: bool,
    state: Mutex<State>,
    published: Condvar,
}

#[derive(Default)]
struct State {
    /// The watch sets, sorted, each with the first execution that uses it, in order; the first
    /// is the profile's, from execution 0. Under [`Growing::Epochs`] set `e` starts epoch `e`.
    sets: Vec<(u64, Arc<Vec<u64>>)>,
    /// New granules since the last set, in the order executions showed them.
    found: Vec<u64>,
    seen: BTreeSet<u64>,
    /// Shared written granules left out because the set was full.
    dropped: usize,
    /// An execution's table filled up: some accesses went unrecorded.
    table_full: bool,
    /// The search is over: nobody waits for another set.
    closed: bool,
}

impl State {
    /// The set execution `k` uses, among those published.
    fn set_for(&self, k: u64) -> &Arc<Vec<u64>> {
        let later = self.sets.partition_point(|(start, _)| *start <= k);
        &self.sets[later.max(1) - 1].1
    }

    fn latest(&self) -> Arc<Vec<u64>> {
        Arc::clone(&self.sets.last().expect("the profile's set is always there").1)
    }

    /// Publishes the latest set plus what was found since, for executions from `start` on.
    fn publish(&mut self, start: u64) -> Option<Growth> {
        let current = self.latest();
        let room = MAX_WATCHED.saturating_sub(current.len());
        let found = std::mem::take(&mut self.found);
        self.seen.clear();
        self.dropped += found.len().saturating_sub(room);
        let added = found.len().min(room);
        let next = if added == 0 {
            current
        } else {
            let mut set: Vec<u64> = current.iter().copied().chain(found.into_iter().take(room)).collect();
            set.sort_unstable();
            Arc::new(set)
        };
        let watched = next.len();
        self.sets.push((start, next));
        (added > 0).then_some(Growth { added, after: start - 1, watched })
    }
}

impl WatchSets {
    /// The sets of a search whose profile watches `profile` (empty without memory points);
    /// `every_touched`: what the profile's set was made of, and so what is new later.
    pub fn new(profile: Vec<u64>, growing: Growing, every_touched: bool) -> WatchSets {
        let state = State { sets: vec![(0, Arc::new(profile))], ..Default::default() };
        WatchSets { growing, every_touched, state: Mutex::new(state), published: Condvar::new() }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The watch set execution `k` runs with, once every execution before its epoch has been
    /// judged. None when the search closed first or `cancelled` says so (checked at least every
    /// 50 ms while waiting): the execution must not run.
    pub fn for_execution(&self, k: u64, cancelled: impl Fn() -> bool) -> Option<Arc<Vec<u64>>> {
        let mut state = self.state();
        loop {
            // Rounds run one execution after another: every set before k is known.
            if self.growing != Growing::Epochs || state.sets.len() as u64 > epoch_of(k) {
                return Some(Arc::clone(state.set_for(k)));
            }
            if state.closed || cancelled() {
                return None;
            }
            state = self.published.wait_timeout(state, Duration::from_millis(50)).unwrap_or_else(|e| e.into_inner()).0;
        }
    }

    /// The set execution `k` ran with (it has run, so its set is published).
    pub fn used_by(&self, k: u64) -> Arc<Vec<u64>> {
        Arc::clone(self.state().set_for(k))
    }

    /// The judge, for every execution in index order: execution `k`'s access table said
    /// `profile`; `exhausted`: a systematic strategy has explored its whole space with it, and
    /// the search may go on. Publishes a set for the executions after `k` at the end of an
    /// epoch, or at the end of a round that found sharing outside its set (a new round starts
    /// at `k + 1`); returns how the set grew (None when it did not).
    pub fn judged(&self, k: u64, profile: Option<&AccessProfile>, exhausted: bool) -> Option<Growth> {
        let mut state = self.state();
        if let Some(profile) = profile {
            let current = state.latest();
            // The table holds the watched granules and what the execution recorded.
            let recorded = profile.touched.len().saturating_sub(current.len());
            state.table_full |= profile.nearly_full() || recorded >= dara_abi::access::RECORD_LIMIT;
            let candidates = if self.every_touched { &profile.touched } else { &profile.racy };
            for &g in candidates {
                if current.binary_search(&g).is_err() && state.seen.insert(g) {
                    state.found.push(g);
                }
            }
        }
        let growth = match self.growing {
            Growing::Epochs if (k + 1).is_multiple_of(EPOCH) => state.publish(k + 1),
            Growing::Rounds if exhausted && !state.found.is_empty() => state.publish(k + 1),
            _ => return None,
        };
        drop(state);
        self.published.notify_all();
        growth
    }

    /// Whether a new round of a systematic search starts at execution `k` (with a new set).
    pub fn round_starts_at(&self, k: u64) -> bool {
        self.growing == Growing::Rounds && self.state().sets.iter().any(|(start, _)| *start == k)
    }

    /// The search is over: wakes every waiting execution, which then does not run.
    pub fn close(&self) {
        self.state().closed = true;
        self.published.notify_all();
    }

    /// Whether sharing was left unwatched: the set reached `MAX_WATCHED`, or an execution's
    /// table filled up.
    pub fn overflowed(&self) -> bool {
        let state = self.state();
        state.dropped > 0 || state.table_full
    }

    /// Granules that executions showed shared and written outside the watch set and that were
    /// not (yet) added to it: in a search that does not grow, everything it saw outside.
    pub fn unwatched_sharing(&self) -> usize {
        self.state().found.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn racy(granules: &[u64]) -> AccessProfile {
        AccessProfile { racy: granules.to_vec(), touched: granules.to_vec(), ..Default::default() }
    }

    #[test]
    fn an_epoch_runs_with_what_the_epochs_before_it_found() {
        let epochs = WatchSets::new(vec![10], Growing::Epochs, false);
        assert_eq!(*epochs.for_execution(0, || false).unwrap(), vec![10]);
        for k in 0..EPOCH - 1 {
            let found: &[u64] = if k == 2 { &[30, 20] } else if k == 5 { &[20, 40] } else { &[] };
            assert_eq!(epochs.judged(k, Some(&racy(found)), false), None, "the set grows only at an epoch's end");
        }
        assert!(epochs.for_execution(EPOCH, || true).is_none(), "epoch 1 waits for the last execution of epoch 0");
        assert_eq!(epochs.judged(EPOCH - 1, None, false), Some(Growth { added: 3, after: EPOCH - 1, watched: 4 }));
        assert_eq!(*epochs.for_execution(EPOCH, || false).unwrap(), vec![10, 20, 30, 40]);
        assert_eq!(*epochs.used_by(EPOCH - 1), vec![10], "executions of epoch 0 ran with the profile's set");
        for k in EPOCH..2 * EPOCH {
            assert_eq!(epochs.judged(k, Some(&racy(&[])), true), None, "nothing new: no growth to report");
        }
        assert_eq!(*epochs.for_execution(2 * EPOCH + 3, || false).unwrap(), vec![10, 20, 30, 40]);
        assert!(!epochs.overflowed() && !epochs.round_starts_at(EPOCH));
    }

    #[test]
    fn a_systematic_search_grows_only_when_a_round_is_exhausted() {
        let epochs = WatchSets::new(vec![7], Growing::Rounds, false);
        for k in 0..3 * EPOCH {
            assert_eq!(epochs.judged(k, Some(&racy(&[k % 2 + 100])), false), None, "no growth within a round");
        }
        assert_eq!(*epochs.for_execution(5 * EPOCH, || false).unwrap(), vec![7], "a round never waits");
        assert_eq!(epochs.unwatched_sharing(), 2, "what it saw outside the set is counted");
        assert_eq!(epochs.judged(3 * EPOCH, None, true), Some(Growth { added: 2, after: 3 * EPOCH, watched: 3 }));
        assert!(epochs.round_starts_at(3 * EPOCH + 1) && !epochs.round_starts_at(3 * EPOCH));
        assert_eq!(*epochs.used_by(3 * EPOCH), vec![7]);
        assert_eq!(*epochs.for_execution(3 * EPOCH + 1, || false).unwrap(), vec![7, 100, 101]);
        assert_eq!(epochs.unwatched_sharing(), 0);
        assert_eq!(epochs.judged(3 * EPOCH + 5, Some(&racy(&[100])), true), None, "a round that saw nothing new is a fixpoint");
    }

    #[test]
    fn a_set_of_every_touched_granule_grows_by_what_was_touched() {
        let private = AccessProfile { touched: vec![5, 50], ..Default::default() };
        for (every_touched, grown) in [(true, vec![5, 50]), (false, vec![5])] {
            let epochs = WatchSets::new(vec![5], Growing::Epochs, every_touched);
            for k in 0..EPOCH {
                epochs.judged(k, Some(&private), false);
            }
            assert_eq!(*epochs.for_execution(EPOCH, || false).unwrap(), grown, "every_touched: {every_touched}");
        }
    }

    #[test]
    fn the_cap_keeps_the_first_found_and_says_so() {
        let full: Vec<u64> = (0..MAX_WATCHED as u64 - 1).map(|g| g * 2).collect();
        let epochs = WatchSets::new(full, Growing::Epochs, false);
        epochs.judged(0, Some(&racy(&[1_000_001])), false);
        epochs.judged(1, Some(&racy(&[1_000_000])), false);
        for k in 2..EPOCH {
            epochs.judged(k, None, false);
        }
        let set = epochs.for_execution(EPOCH, || false).unwrap();
        assert_eq!(set.len(), MAX_WATCHED);
        assert!(set.binary_search(&1_000_001).is_ok() && set.binary_search(&1_000_000).is_err(), "execution order decides who fits");
        assert!(epochs.overflowed());
    }

    #[test]
    fn a_closed_search_releases_its_waiters() {
        let epochs = Arc::new(WatchSets::new(vec![], Growing::Epochs, false));
        let waiter = {
            let epochs = Arc::clone(&epochs);
            std::thread::spawn(move || epochs.for_execution(3 * EPOCH, || false))
        };
        epochs.close();
        assert!(waiter.join().unwrap().is_none());
    }
}
