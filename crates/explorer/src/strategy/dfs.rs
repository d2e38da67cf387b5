//! `dfs`: stateless depth-first search of the decision tree, optionally bounded by preemptions
//! (Musuvathi & Qadeer, "Iterative Context Bounding for Systematic Testing of Multithreaded
//! Programs", PLDI 2007) or by delays (Emmi, Qadeer & Rakamarić, "Delay-Bounded Scheduling",
//! POPL 2011).
//!
//! Stateless, as in VeriSoft and CHESS: nothing of the program is saved, every execution restarts
//! it and replays a prefix of decisions (`strategy/prefix.rs`, which also turns a replayed
//! node offered differently into a [`Divergence`] that stops the search). We keep, per depth of
//! the last execution, the alternatives still to try. The next execution replays the path down to
//! the deepest node with an untried alternative, takes it, and from there on takes each node's
//! *default*, the choice of the base scheduler (`strategy/base.rs`): keep running the thread
//! that ran last if it can continue; otherwise the lowest thread id. Bounds count departures from
//! it:
//!
//! * `dfs:preempt=K`: at most K preemptions, a preemption being a switch away from a thread
//!   that could have continued.
//! * `dfs:delay=K`: at most K delays; picking the thread d places after the base scheduler's in
//!   round-robin order (by thread id, cyclic, over the threads offering a choice) costs d delays.
//! * `dfs:preempt` / `dfs:delay`: iterative deepening with K = 0, 1, 2, ...: when the space
//!   within K is exhausted and some choice was cut by the bound, the search starts over with
//!   K + 1 (re-running the schedules within K, as CHESS does; the space grows geometrically so
//!   this costs a fraction of the last pass). It is exhausted once a pass cuts nothing.
//!
//! Where we deviate, and why:
//!
//! * A choice is a thread *plus* how it proceeds: a thread's other choices at a node (Timeout
//!   instead of Run, another `CondSignal` waiter) are data nondeterminism, explored at no cost.
//! * "Can continue" means offering a `Run` that is not a `sched_yield`. A thread that yields or
//!   only offers a `Timeout` (sleeping, waiting with a deadline) can be switched away from for
//!   free, and the base scheduler then prefers threads that offer a `Run`: firing timers only when
//!   nothing else can run, as time would. After a yield the base scheduler moves to the next
//!   thread in round-robin order, and running the yielder again while another thread offers a
//!   choice costs a preemption (or, under delays, the round-robin distance): otherwise a
//!   `sched_yield` spin loop would make the default schedule spin until the step bound, and
//!   every bounded tree infinite. Unbounded `dfs` still has an infinite tree on such programs.
use dara_model::choice::ThreadId;
use dara_model::{Choice, Decide, Divergence};

use super::base::{base_thread, can_continue, default_index, is_yielding, threads};
use super::prefix::{Path, Recorded};
use super::{Describe, Feedback, Info, Order, Start, Status, Strategy};

/// What a bounded search counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bound {
    Unbounded,
    Preemptions,
    Delays,
}

pub struct Dfs {
    bound: Bound,
    /// The current bound (K); meaningless when unbounded.
    limit: u32,
    /// `dfs:preempt` / `dfs:delay` without K: raise `limit` whenever a pass cut something.
    iterative: bool,
    /// The decisions of the current (or last) execution and what is left to try at each.
    path: Path<Node>,
    /// Some alternative in this pass was left out because it exceeded the bound.
    cut: bool,
    /// Executions completed in this pass (each a distinct schedule).
    schedules: u64,
    exhausted: bool,
}

struct Node {
    choices: Vec<Choice>,
    /// The alternatives to take here, within the bound, default first: (index, bound cost).
    order: Vec<(usize, u32)>,
    /// Position in `order` of the alternative the current execution takes.
    /// Invariant: `at < order.len()`.
    at: usize,
    /// Bound cost spent by the decisions before this node.
    spent: u32,
}

impl Node {
    fn taken(&self) -> (usize, u32) {
        self.order[self.at]
    }
}

impl Recorded for Node {
    fn offered(&self) -> &[Choice] {
        &self.choices
    }

    fn taken(&self) -> usize {
        self.order[self.at].0
    }
}

impl Dfs {
    pub fn unbounded() -> Dfs {
        Dfs::new(Bound::Unbounded, 0, false)
    }

    /// At most `limit` preemptions or delays.
    pub fn bounded(bound: Bound, limit: u32) -> Dfs {
        Dfs::new(bound, limit, false)
    }

    /// Bound 0, then 1, 2, ... until a pass cuts nothing.
    pub fn iterative(bound: Bound) -> Dfs {
        Dfs::new(bound, 0, bound != Bound::Unbounded)
    }

    fn new(bound: Bound, limit: u32, iterative: bool) -> Dfs {
        Dfs { bound, limit, iterative, path: Path::new(), cut: false, schedules: 0, exhausted: false }
    }

    /// The bound in force now (for iterative searches, the current pass's).
    pub fn limit(&self) -> Option<u32> {
        (self.bound != Bound::Unbounded).then_some(self.limit)
    }

    /// Whether every schedule within the bound has run.
    pub fn exhausted(&self) -> bool {
        self.exhausted
    }

    /// A fresh node: its alternatives in order, default first, within the bound.
    fn fresh(&mut self, choices: &[Choice]) -> Node {
        let (prev, spent) = match self.path.last() {
            Some(parent) => {
                let (i, cost) = parent.taken();
                (Some(parent.choices[i].thread), parent.spent + cost)
            }
            None => (None, 0),
        };
        let default = default_index(prev, choices);
        let mut order = Vec::with_capacity(choices.len());
        let candidates = std::iter::once(default).chain((0..choices.len()).filter(|&i| i != default));
        for i in candidates {
            let cost = match self.bound {
                Bound::Unbounded => 0,
                Bound::Preemptions => preemption_cost(prev, choices, i),
                Bound::Delays => delay_cost(prev, choices, i),
            };
            if self.bound == Bound::Unbounded || spent + cost <= self.limit {
                order.push((i, cost));
            } else {
                self.cut = true;
            }
        }
        debug_assert_eq!(order.first().map(|o| o.1), Some(0), "the default is always within the bound");
        Node { choices: choices.to_vec(), order, at: 0, spent }
    }

    /// After an execution: move to the next alternative of the deepest node that has one.
    fn advance(&mut self) {
        let more = self.path.backtrack(|node| {
            let next = node.at + 1 < node.order.len();
            node.at += usize::from(next);
            next
        });
        if more {
            return;
        }
        if self.iterative && self.cut {
            self.limit += 1;
            self.cut = false;
            self.schedules = 0;
        } else {
            self.exhausted = true;
        }
    }

    /// What an exhausted search proved.
    fn proved(&self) -> String {
        let n = self.schedules;
        match (self.bound, self.iterative) {
            (Bound::Unbounded, _) | (_, true) => format!("explored all {n} schedules"),
            (Bound::Preemptions, false) => format!("explored all {n} schedules with at most {} preemptions", self.limit),
            (Bound::Delays, false) => format!("explored all {n} schedules with at most {} delays", self.limit),
        }
    }
}

impl Decide for Dfs {
    fn choose(&mut self, step: u64, choices: &[Choice]) -> Result<usize, Divergence> {
        debug_assert!(!choices.is_empty(), "the model offers at least one choice");
        if let Some(index) = self.path.replayed(step, choices)? {
            return Ok(index);
        }
        let node = self.fresh(choices);
        let index = node.taken().0;
        self.path.push(node);
        Ok(index)
    }
}

impl Strategy for Dfs {
    fn begin_execution(&mut self, start: Start) {
        self.path.begin(start.execution);
    }

    fn end_execution(&mut self, feedback: &Feedback<'_>) -> Status {
        if !self.path.end(feedback.steps()) {
            return Status::default();
        }
        self.schedules += 1;
        self.advance();
        Status { exhausted: self.exhausted.then(|| self.proved()), notes: Vec::new() }
    }
}

impl Describe for Dfs {
    fn info(&self) -> Info {
        let spec = match (self.bound, self.iterative) {
            (Bound::Unbounded, _) => "dfs".to_string(),
            (Bound::Preemptions, true) => "dfs:preempt".to_string(),
            (Bound::Delays, true) => "dfs:delay".to_string(),
            (Bound::Preemptions, false) => format!("dfs:preempt={}", self.limit),
            (Bound::Delays, false) => format!("dfs:delay={}", self.limit),
        };
        Info { spec, order: Order::Systematic }
    }
}

fn preemption_cost(prev: Option<ThreadId>, choices: &[Choice], i: usize) -> u32 {
    let (Some(p), t) = (prev, choices[i].thread) else {
        return 0;
    };
    let preempts = if can_continue(choices, p) {
        t != p
    } else {
        t == p && is_yielding(choices, p) && choices.iter().any(|c| c.thread != p)
    };
    u32::from(preempts)
}

fn delay_cost(prev: Option<ThreadId>, choices: &[Choice], i: usize) -> u32 {
    let order = threads(choices);
    let base = base_thread(prev, choices);
    let position = |t| order.iter().position(|&u| u == t).unwrap_or(0);
    let m = order.len();
    ((position(choices[i].thread) + m - position(base)) % m) as u32
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::super::sim::{all_schedules, exhaust, explore, random_program, Instr, Sim};
    use super::*;

    const X: u64 = 0x200;
    const Y: u64 = 0x208;
    const Z: u64 = 0x210;

    /// Thread t writes its own variables: no step depends on another thread's.
    fn independent(threads: usize, steps: usize) -> Sim {
        Sim::new(
            (0..threads)
                .map(|t| vec![Instr::Write(0x200 + 8 * t as u64, 1); steps])
                .collect(),
        )
    }

    fn counts(
        program: &Sim,
        make: impl Fn(u32) -> Dfs,
        limits: std::ops::RangeInclusive<u32>,
    ) -> Vec<usize> {
        limits
            .map(|k| exhaust(&mut make(k), program, 10_000).schedules.len())
            .collect()
    }

    #[test]
    fn unbounded_dfs_enumerates_every_interleaving_once() {
        for (program, expected) in [
            (independent(2, 2), 6),
            (independent(3, 1), 6),
            (independent(2, 3), 20),
        ] {
            let found = exhaust(&mut Dfs::unbounded(), &program, 1000);
            assert_eq!(found.executions, expected);
            assert_eq!(found.schedules.len(), expected as usize, "all distinct");
            assert_eq!(
                found.note,
                Some(format!("explored all {expected} schedules"))
            );
        }
    }

    #[test]
    fn preemption_bound_counts() {
        // a1 a2 b1 b2: aabb and bbaa switch only when a thread is done; abba, baab preempt once.
        let two = independent(2, 2);
        assert_eq!(
            counts(&two, |k| Dfs::bounded(Bound::Preemptions, k), 0..=3),
            [2, 4, 6, 6]
        );
        // Threads of one step never preempt each other.
        assert_eq!(
            counts(
                &independent(3, 1),
                |k| Dfs::bounded(Bound::Preemptions, k),
                0..=0
            ),
            [6]
        );
        let found = exhaust(&mut Dfs::bounded(Bound::Preemptions, 1), &two, 100);
        assert_eq!(
            found.note.as_deref(),
            Some("explored all 4 schedules with at most 1 preemptions")
        );
    }

    #[test]
    fn delay_bound_counts() {
        // Base schedule aabb; abba, bbaa need one delay, abab and baab two, baba three.
        assert_eq!(
            counts(
                &independent(2, 2),
                |k| Dfs::bounded(Bound::Delays, k),
                0..=4
            ),
            [1, 3, 5, 6, 6]
        );
        // Base abc; acb, bac one; bca, cab two; cba three.
        assert_eq!(
            counts(
                &independent(3, 1),
                |k| Dfs::bounded(Bound::Delays, k),
                0..=3
            ),
            [1, 3, 5, 6]
        );
        let found = exhaust(&mut Dfs::bounded(Bound::Delays, 2), &independent(3, 1), 100);
        assert_eq!(
            found.note.as_deref(),
            Some("explored all 5 schedules with at most 2 delays")
        );
    }

    fn cost(bound: Bound, schedule: &[(Vec<Choice>, usize)]) -> u32 {
        let mut prev = None;
        let mut total = 0;
        for (choices, i) in schedule {
            total += match bound {
                Bound::Preemptions => preemption_cost(prev, choices, *i),
                Bound::Delays => delay_cost(prev, choices, *i),
                Bound::Unbounded => 0,
            };
            prev = Some(choices[*i].thread);
        }
        total
    }

    #[test]
    fn bounded_dfs_runs_exactly_the_schedules_within_the_bound() {
        let mut checked = 0;
        for seed in 0..60 {
            let program = random_program(seed, 9);
            let everything = all_schedules(&program);
            for bound in [Bound::Preemptions, Bound::Delays] {
                for k in 0..3 {
                    let want: HashSet<Vec<Choice>> = everything
                        .iter()
                        .filter(|s| cost(bound, s) <= k)
                        .map(|s| s.iter().map(|(c, i)| c[*i]).collect())
                        .collect();
                    let found = exhaust(&mut Dfs::bounded(bound, k), &program, 100_000);
                    assert_eq!(
                        found.executions as usize,
                        found.schedules.len(),
                        "seed {seed}: a schedule ran twice"
                    );
                    assert_eq!(found.schedules, want, "seed {seed}, {bound:?} <= {k}");
                    checked += want.len();
                }
            }
            let found = exhaust(&mut Dfs::unbounded(), &program, 100_000);
            assert_eq!(found.executions as usize, everything.len(), "seed {seed}");
        }
        assert!(
            checked > 1000,
            "the random programs are not trivial: {checked}"
        );
    }

    #[test]
    fn iterative_bounds_deepen_until_nothing_is_cut() {
        let two = independent(2, 2);
        let found = exhaust(&mut Dfs::iterative(Bound::Preemptions), &two, 100);
        // Passes with at most 0, 1 and 2 preemptions: 2 + 4 + 6 executions.
        assert_eq!(found.executions, 12);
        assert_eq!(found.schedules.len(), 6);
        assert_eq!(found.note.as_deref(), Some("explored all 6 schedules"));

        let found = exhaust(&mut Dfs::iterative(Bound::Delays), &two, 100);
        assert_eq!(found.executions, 1 + 3 + 5 + 6);
        assert_eq!(found.note.as_deref(), Some("explored all 6 schedules"));

        let mut dfs = Dfs::iterative(Bound::Preemptions);
        let partial = explore(&mut dfs, |_| two.clone(), 7).unwrap();
        assert!(!partial.exhausted);
        assert_eq!(
            dfs.limit(),
            Some(2),
            "after 2 + 4 executions the third pass runs"
        );
    }

    #[test]
    fn other_choices_of_the_same_thread_cost_nothing() {
        // Timeout and signal alternatives are data, not scheduling: 1 (sleep) x 3 (pick) x 2
        // (timed lock: acquire or time out).
        let program = Sim::new(vec![vec![
            Instr::Sleep,
            Instr::Pick(X, 3),
            Instr::TimedLock(0x100),
        ]]);
        for mut dfs in [
            Dfs::bounded(Bound::Preemptions, 0),
            Dfs::bounded(Bound::Delays, 0),
            Dfs::unbounded(),
        ] {
            let found = exhaust(&mut dfs, &program, 100);
            assert_eq!(found.executions, 6, "{}", dfs.info().spec);
        }
    }

    #[test]
    fn the_default_schedule_prefers_running_threads_over_timers() {
        // Thread 0 sleeps; thread 1 could run. The base scheduler runs thread 1 first.
        let program = Sim::new(vec![vec![Instr::Sleep], vec![Instr::Write(X, 1)]]);
        let mut dfs = Dfs::bounded(Bound::Delays, 0);
        let found = exhaust(&mut dfs, &program, 10);
        let only: Vec<&Vec<Choice>> = found.schedules.iter().collect();
        assert_eq!(only.len(), 1);
        assert_eq!(only[0][0].thread, 1, "{only:?}");
    }

    #[test]
    fn a_yield_spin_loop_has_a_finite_bounded_tree() {
        // Thread 0 spins on sched_yield until thread 1 sets the flag. Each extra spin while
        // thread 1 could run costs one preemption (or delay): s >= 1 spins cost s - 1. Running
        // thread 1 first is free under preemptions, one delay under delays.
        let program = Sim::new(vec![vec![Instr::SpinUntil(X)], vec![Instr::Write(X, 1)]]);
        for bound in [Bound::Preemptions, Bound::Delays] {
            for k in 0..4 {
                let found = exhaust(&mut Dfs::bounded(bound, k), &program, 100);
                let one_first = u64::from(bound == Bound::Preemptions || k >= 1);
                assert_eq!(
                    found.executions,
                    u64::from(k) + 1 + one_first,
                    "{bound:?} <= {k}"
                );
                assert!(found.schedules.iter().all(|s| s.len() as u32 <= k + 3));
            }
        }
    }

    #[test]
    fn info_names_the_spec_and_a_sequential_search() {
        for (dfs, spec) in [
            (Dfs::unbounded(), "dfs"),
            (Dfs::bounded(Bound::Preemptions, 3), "dfs:preempt=3"),
            (Dfs::bounded(Bound::Delays, 0), "dfs:delay=0"),
            (Dfs::iterative(Bound::Delays), "dfs:delay"),
            (Dfs::iterative(Bound::Preemptions), "dfs:preempt"),
        ] {
            let info = dfs.info();
            assert_eq!(info.spec, spec);
            assert!(!info.parallel_safe() && !info.accepts_seed_trace(), "{spec}");
        }
    }

    #[test]
    fn a_changed_program_is_a_divergence_not_a_panic() {
        let program = Sim::new(vec![
            vec![Instr::Write(X, 1); 2],
            vec![Instr::Write(Y, 1); 2],
        ]);
        // Execution 1 replays the first two decisions; thread 1's first step has changed.
        let changed = program.clone().with(1, 0, Instr::Lock(Z));
        let mut dfs = Dfs::unbounded();
        let d = explore(
            &mut dfs,
            |k| {
                if k == 0 {
                    program.clone()
                } else {
                    changed.clone()
                }
            },
            10,
        )
        .unwrap_err();
        assert_eq!(d.step, 0);
        assert_eq!(
            d.expected,
            "<thread 0 run futex-wake 0x200>, <thread 1 run futex-wake 0x208> as in earlier executions with the same decisions"
        );
        assert_eq!(
            d.seen,
            "<thread 0 run futex-wake 0x200>, <thread 1 run mutex-lock 0x210>"
        );
    }

    #[test]
    fn a_run_that_ends_inside_the_replayed_prefix_is_reported_next() {
        // Execution 1 must replay two decisions (the write and the pick), but the program now
        // ends after the write.
        let program = Sim::new(vec![vec![
            Instr::Write(X, 1),
            Instr::Pick(Y, 2),
            Instr::Write(Z, 1),
        ]]);
        let shorter = Sim::new(vec![vec![Instr::Write(X, 1)]]);
        let mut dfs = Dfs::unbounded();
        let d = explore(
            &mut dfs,
            |k| {
                if k == 0 {
                    program.clone()
                } else {
                    shorter.clone()
                }
            },
            10,
        )
        .unwrap_err();
        assert_eq!(d.step, 1);
        assert_eq!(d.seen, "nothing: execution 1 ended after 1 steps");
        assert!(
            d.expected.starts_with(
                "<thread 0 run cond-signal 0x208>, <thread 0 run cond-signal 0x208 alt 1>"
            ),
            "{}",
            d.expected
        );
        assert!(!dfs.exhausted());
    }
}
