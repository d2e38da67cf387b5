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
//! points between two executions would change the tree under them, so their searches keep the
//! profile's set (the executions still record, and the growth they saw is not applied).
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

/// How the watch set grew at the end of an epoch, for the user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Growth {
    /// Granules added.
    pub added: usize,
    /// The last execution whose sharing was merged; executions after it watch the new set.
    pub after: u64,
    /// Granules watched from execution `after + 1` on.
    pub watched: usize,
}

/// The watch sets of one search, one per epoch: the judge adds each judged execution's new
/// sharing in execution order, and executions wait for their epoch's set.
pub struct WatchEpochs {
    /// Whether the set grows at all (memory points on, a non-systematic strategy).
    grows: bool,
    state: Mutex<State>,
    published: Condvar,
}

#[derive(Default)]
struct State {
    /// `sets[e]`: the watch set of epoch `e`, sorted. `sets[0]` is the profile's.
    sets: Vec<Arc<Vec<u64>>>,
    /// New granules of the epoch being judged, in the order executions showed them.
    found: Vec<u64>,
    seen: BTreeSet<u64>,
    /// Shared written granules left out because the set was full.
    dropped: usize,
    /// An execution's table filled up: some accesses went unrecorded.
    table_full: bool,
    /// The search is over: nobody waits for another set.
    closed: bool,
}

impl WatchEpochs {
    /// The sets of a search whose profile watches `profile` (empty without memory points);
    /// `grows`: whether later executions may add to it.
    pub fn new(profile: Vec<u64>, grows: bool) -> WatchEpochs {
        let state = State { sets: vec![Arc::new(profile)], ..Default::default() };
        WatchEpochs { grows, state: Mutex::new(state), published: Condvar::new() }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The watch set execution `k` runs with, once every execution before its epoch has been
    /// judged. None when the search closed first or `cancelled` says so (checked at least every
    /// 50 ms while waiting): the execution must not run.
    pub fn for_execution(&self, k: u64, cancelled: impl Fn() -> bool) -> Option<Arc<Vec<u64>>> {
        let epoch = if self.grows { epoch_of(k) as usize } else { 0 };
        let mut state = self.state();
        loop {
            if let Some(set) = state.sets.get(epoch) {
                return Some(Arc::clone(set));
            }
            if state.closed || cancelled() {
                return None;
            }
            state = self.published.wait_timeout(state, Duration::from_millis(50)).unwrap_or_else(|e| e.into_inner()).0;
        }
    }

    /// The set execution `k` ran with (it has run, so its epoch's set exists).
    pub fn used_by(&self, k: u64) -> Arc<Vec<u64>> {
        let epoch = if self.grows { epoch_of(k) as usize } else { 0 };
        let state = self.state();
        Arc::clone(state.sets.get(epoch).unwrap_or(&state.sets[0]))
    }

    /// The judge, for every execution in index order: execution `k`'s access table said
    /// `profile`. At the end of an epoch publishes the next epoch's set and returns how it grew
    /// (None when it did not).
    pub fn judged(&self, k: u64, profile: Option<&AccessProfile>) -> Option<Growth> {
        let mut state = self.state();
        if let Some(profile) = profile {
            let current = Arc::clone(state.sets.last().expect("the profile's set is always there"));
            // The table holds the watched granules and what the execution recorded.
            let recorded = profile.touched.len().saturating_sub(current.len());
            state.table_full |= profile.nearly_full() || recorded >= dara_abi::access::RECORD_LIMIT;
            for &g in &profile.racy {
                if current.binary_search(&g).is_err() && state.seen.insert(g) {
                    state.found.push(g);
                }
            }
        }
        if !self.grows || !(k + 1).is_multiple_of(EPOCH) {
            return None;
        }
        let current = Arc::clone(state.sets.last().expect("the profile's set is always there"));
        let room = MAX_WATCHED.saturating_sub(current.len());
        let found = std::mem::take(&mut state.found);
        state.seen.clear();
        state.dropped += found.len().saturating_sub(room);
        let added = found.len().min(room);
        let next = if added == 0 {
            current
        } else {
            let mut set: Vec<u64> = current.iter().copied().chain(found.into_iter().take(room)).collect();
            set.sort_unstable();
            Arc::new(set)
        };
        let watched = next.len();
        state.sets.push(next);
        drop(state);
        self.published.notify_all();
        (added > 0).then_some(Growth { added, after: k, watched })
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

    /// Granules the last published set watches.
    pub fn watched(&self) -> usize {
        self.state().sets.last().map_or(0, |s| s.len())
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
        let epochs = WatchEpochs::new(vec![10], true);
        assert_eq!(*epochs.for_execution(0, || false).unwrap(), vec![10]);
        for k in 0..EPOCH - 1 {
            let found: &[u64] = if k == 2 { &[30, 20] } else if k == 5 { &[20, 40] } else { &[] };
            assert_eq!(epochs.judged(k, Some(&racy(found))), None, "the set grows only at an epoch's end");
        }
        assert!(epochs.for_execution(EPOCH, || true).is_none(), "epoch 1 waits for the last execution of epoch 0");
        assert_eq!(epochs.judged(EPOCH - 1, None), Some(Growth { added: 3, after: EPOCH - 1, watched: 4 }));
        assert_eq!(*epochs.for_execution(EPOCH, || false).unwrap(), vec![10, 20, 30, 40]);
        assert_eq!(*epochs.used_by(EPOCH - 1), vec![10], "executions of epoch 0 ran with the profile's set");
        for k in EPOCH..2 * EPOCH {
            assert_eq!(epochs.judged(k, Some(&racy(&[]))), None, "nothing new: no growth to report");
        }
        assert_eq!(*epochs.for_execution(2 * EPOCH + 3, || false).unwrap(), vec![10, 20, 30, 40]);
        assert!(!epochs.overflowed());
    }

    #[test]
    fn a_search_that_does_not_grow_keeps_the_profile_set() {
        let epochs = WatchEpochs::new(vec![7], false);
        for k in 0..3 * EPOCH {
            assert_eq!(epochs.judged(k, Some(&racy(&[k + 100]))), None);
        }
        assert_eq!(*epochs.for_execution(5 * EPOCH, || false).unwrap(), vec![7]);
        assert_eq!(*epochs.used_by(2 * EPOCH), vec![7]);
    }

    #[test]
    fn the_cap_keeps_the_first_found_and_says_so() {
        let full: Vec<u64> = (0..MAX_WATCHED as u64 - 1).map(|g| g * 2).collect();
        let epochs = WatchEpochs::new(full, true);
        epochs.judged(0, Some(&racy(&[1_000_001])));
        epochs.judged(1, Some(&racy(&[1_000_000])));
        for k in 2..EPOCH {
            epochs.judged(k, None);
        }
        let set = epochs.for_execution(EPOCH, || false).unwrap();
        assert_eq!(set.len(), MAX_WATCHED);
        assert!(set.binary_search(&1_000_001).is_ok() && set.binary_search(&1_000_000).is_err(), "execution order decides who fits");
        assert!(epochs.overflowed());
    }

    #[test]
    fn a_closed_search_releases_its_waiters() {
        let epochs = Arc::new(WatchEpochs::new(vec![], true));
        let waiter = {
            let epochs = Arc::clone(&epochs);
            std::thread::spawn(move || epochs.for_execution(3 * EPOCH, || false))
        };
        epochs.close();
        assert!(waiter.join().unwrap().is_none());
    }
}
