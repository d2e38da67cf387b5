//! `pct:d`: probabilistic concurrency testing, after Burckhardt, Kothari, Musuvathi and
//! Nagarakatte, "A Randomized Scheduler with Probabilistic Guarantees of Finding Bugs",
//! ASPLOS 2010.
//!
//! The idea: most concurrency bugs need only a few ordering constraints (their *depth* d). Give
//! every thread a distinct random priority, always run the highest-priority enabled thread, and
//! at d−1 random steps lower the priority of the running thread below all initial priorities.
//! For a program with n threads and k steps, each execution then hits a given depth-d bug with
//! probability at least 1/(n·k^(d−1)), independent of how unlikely that ordering is under a
//! random walk.
//!
//! As in the paper: initial priorities are distinct, random, and all ≥ d; change point i
//! (i = 1..d−1, in draw order) is a step number drawn uniformly from [1, k] and gives priority i.
//! k is the number of steps of the search's first execution (execution 0, which runs with
//! k = 1000 and alone, before any other): fixed for the rest of the search, so execution e
//! depends only on (seed, e, k) and parallel searches (`--jobs`) run exactly the executions a
//! sequential one runs.
//!
//! Where we deviate, and why:
//!
//! * Threads are not known up front: a thread gets its initial priority when it first shows up
//!   in the enabled set. Priorities are independent uniform draws, so its rank among the threads
//!   already present is uniform, as in the paper's random permutation.
//! * At a change point we lower the thread the strategy *would* pick and then pick again (as
//!   shuttle does); the paper lowers the thread after it ran step k_i. This only shifts each
//!   change point by one step.
//! * A choice is a thread *plus* how it proceeds. A thread's timer (its `Timeout`) is ranked as an
//!   entity of its own, with its own priority, so a timeout wins against the thread's `Run`
//!   exactly when PCT ranks it higher. When the chosen entity offers several choices (several
//!   `CondSignal` waiters) one is picked uniformly at random.
//! * **Yield demotion.** Granting a thread's `Op::Yield` drops it to a priority below every
//!   priority handed out so far (and below all change-point priorities). Plain PCT would let a
//!   high-priority thread spinning on `sched_yield` run forever and starve the thread it waits
//!   for, turning every such execution into a hang until a change point happens to hit it. The
//!   demotions are extra priority changes on top of the d−1 random ones, so the paper's bound
//!   does not strictly apply to programs that yield.
//! * **Timer demotion.** Likewise, firing a thread's timer (`Timeout`) while anything else is
//!   enabled demotes the thread, and its timer below it: the time it waited out is time every
//!   other enabled thread would have run, and what arrived for the thread meanwhile comes before
//!   its next timeout. Without this, a high-priority server polling with a timeout fires its
//!   timer again and again and starves everyone else until the virtual-time bound calls it a
//!   hang that is not the program's. The timer still wins its race when PCT first ranks it
//!   higher. With timers at their deadlines (the default, docs/time.md) a timer is offered only
//!   once due, so this matters for `--timers any` and for timers due together with other work.
//!
//! Reproducibility: execution `e` draws everything from `Rng::for_execution(seed, e)`, so it
//! depends only on the seed, `e`, and the calibrated step estimate.
use std::collections::BTreeMap;

use dara_abi::Op;
use dara_model::{Choice, ChoiceKind, Decide, Divergence};

use super::{Describe, Feedback, Info, Order, Start, Status, Strategy};
use crate::rng::Rng;

/// `pct` without a depth means `pct:3`.
pub const DEFAULT_DEPTH: u32 = 3;
/// Deepest bug depth `pct:D` accepts.
pub const MAX_DEPTH: u32 = 10;
/// Step-count estimate before calibration (used by execution 0 itself).
pub const INITIAL_STEP_ESTIMATE: u64 = 1000;
/// Initial priorities are `depth + [0, 2^48)`: far more values than threads, so redraws on a
/// collision are rare.
const INITIAL_PRIORITY_SPAN: u64 = 1 << 48;

pub struct Pct {
    depth: u32,
    seed: u64,
    rng: Rng,
    /// The k of this execution: execution 0's step count once it has run
    /// ([`Start::first_steps`]), [`INITIAL_STEP_ESTIMATE`] before.
    step_estimate: u64,
    /// `change_points[i - 1]` is the decision number (1-based, within the execution) at which the
    /// thread about to be picked gets priority `i`. d−1 entries, distinct whenever the estimate
    /// allows (k ≥ d−1).
    change_points: Vec<u64>,
    /// Priority of every scheduling entity seen in this execution (see [`entity`]); higher runs
    /// first. Invariant: all values distinct, with three bands: initial priorities ≥ depth,
    /// change-point priorities in 1..depth, demotions ≤ 0 (each below all others).
    priorities: BTreeMap<u64, i64>,
    /// Decisions taken in this execution.
    steps: u64,
}

impl Pct {
    /// `depth` is clamped to 1..=MAX_DEPTH ([`parse`](super::parse) rejects anything else).
    pub fn new(depth: u32, seed: u64) -> Pct {
        let mut pct = Pct {
            depth: depth.clamp(1, MAX_DEPTH),
            seed,
            rng: Rng::for_execution(seed, 0),
            step_estimate: INITIAL_STEP_ESTIMATE,
            change_points: Vec::new(),
            priorities: BTreeMap::new(),
            steps: 0,
        };
        pct.begin_execution(Start::at(0));
        pct
    }

    /// The k that change points are drawn from.
    pub fn step_estimate(&self) -> u64 {
        self.step_estimate
    }

    fn assign_initial_priority(&mut self, entity: u64) {
        loop {
            let p = i64::from(self.depth) + self.rng.below(INITIAL_PRIORITY_SPAN) as i64;
            if !self.priorities.values().any(|&q| q == p) {
                self.priorities.insert(entity, p);
                return;
            }
        }
    }

    fn priority(&self, entity: u64) -> i64 {
        self.priorities.get(&entity).copied().unwrap_or(i64::MIN)
    }

    /// The enabled entity with the highest priority.
    fn top_entity(&self, choices: &[Choice]) -> u64 {
        choices.iter().map(entity).max_by_key(|&e| self.priority(e)).unwrap_or_default()
    }

    /// Below everything handed out so far, and below every change-point priority.
    fn demote(&mut self, entity: u64) {
        let lowest = self.priorities.values().copied().min().unwrap_or(0).min(1);
        self.priorities.insert(entity, lowest - 1);
    }
}

/// What PCT ranks: a thread, or a thread's timer. A timer is an entity of its own, with its own
/// priority, so whether a thread's timeout beats the data it could receive instead is decided by
/// priorities like any race, consistently within an execution, rather than by a coin at every
/// step (which made a polling node time out half of the times it had a message waiting).
pub(crate) fn entity(c: &Choice) -> u64 {
    const TIMER: u64 = 1 << 32;
    match c.kind {
        ChoiceKind::Timeout => TIMER | u64::from(c.thread),
        _ => u64::from(c.thread),
    }
}

impl Decide for Pct {
    fn choose(&mut self, _step: u64, choices: &[Choice]) -> Result<usize, Divergence> {
        debug_assert!(!choices.is_empty(), "the model offers at least one choice");
        self.steps += 1;
        for c in choices {
            if !self.priorities.contains_key(&entity(c)) {
                self.assign_initial_priority(entity(c));
            }
        }
        for i in 0..self.change_points.len() {
            if self.change_points[i] == self.steps {
                let e = self.top_entity(choices);
                self.priorities.insert(e, i as i64 + 1);
            }
        }

        let top = self.top_entity(choices);
        let own: Vec<usize> = (0..choices.len()).filter(|&i| entity(&choices[i]) == top).collect();
        let pick = own.get(self.rng.index(own.len())).copied().unwrap_or(0);
        let others_enabled = choices.iter().any(|c| entity(c) != top);
        match choices.get(pick) {
            Some(c) if c.op == Op::Yield => self.demote(top),
            Some(c) if c.kind == ChoiceKind::Timeout && others_enabled => {
                // The thread waited its timeout out: it goes below everyone else, and its timer
                // below it (what arrived meanwhile is taken before the next timeout).
                self.demote(u64::from(c.thread));
                self.demote(top);
            }
            _ => {}
        }
        Ok(pick)
    }
}

impl Strategy for Pct {
    fn begin_execution(&mut self, start: Start) {
        self.rng = Rng::for_execution(self.seed, start.execution);
        self.priorities.clear();
        self.steps = 0;
        self.step_estimate = start.first_steps.unwrap_or(INITIAL_STEP_ESTIMATE).max(1);
        let k = self.step_estimate;
        let want = (self.depth - 1) as usize;
        let distinct = k >= want as u64;
        self.change_points.clear();
        while self.change_points.len() < want {
            let p = self.rng.in_range(1, k);
            if !(distinct && self.change_points.contains(&p)) {
                self.change_points.push(p);
            }
        }
    }

    fn end_execution(&mut self, _feedback: &Feedback<'_>) -> Status {
        Status::default()
    }
}

impl Describe for Pct {
    fn info(&self) -> Info {
        Info { spec: format!("pct:{}", self.depth), order: Order::Independent }
    }
}

#[cfg(test)]
mod tests {
    use dara_model::ChoiceKind;

    use super::super::testkit::{run, run_choice, Program, Search, Straight};
    use super::super::Random;
    use super::*;

    /// Number of times the running thread changes in a schedule.
    fn switches(taken: &[Choice]) -> usize {
        taken.windows(2).filter(|w| w[0].thread != w[1].thread).count()
    }

    fn two_threads() -> Straight {
        Straight::new(vec![vec![Op::MutexLock; 6], vec![Op::MutexUnlock; 6]])
    }

    #[test]
    fn a_server_whose_timer_keeps_firing_does_not_starve_its_client() {
        // Thread 0 polls with a timeout forever (only its Timeout is offered); thread 1 has work.
        let server = Choice { thread: 0, kind: ChoiceKind::Timeout, alt: 0, op: Op::NetPoll, obj: 0 };
        let client = Choice { thread: 1, kind: ChoiceKind::Run, alt: 0, op: Op::MutexLock, obj: 0x40 };
        for seed in 0..20 {
            let mut pct = Pct::new(3, seed);
            pct.begin_execution(Start::at(1));
            let client_steps = (0..100).filter(|&step| pct.choose(step, &[server, client]).unwrap() == 1).count();
            assert!(client_steps >= 40, "seed {seed}: the client ran {client_steps} of 100 steps");
        }
    }

    #[test]
    fn depth_one_never_preempts() {
        let mut pct = Pct::new(1, 99);
        let mut first = [0; 2];
        let mut search = Search::new();
        for k in 0..100 {
            let (taken, finished) = search.run(&mut pct, k, &mut two_threads(), 100);
            assert!(finished);
            assert_eq!(switches(&taken), 1, "execution {k}: {taken:?}");
            first[taken[0].thread as usize] += 1;
        }
        assert!(
            first[0] > 20 && first[1] > 20,
            "either thread can have the top priority: {first:?}"
        );
    }

    #[test]
    fn change_points_preempt_at_most_d_minus_1_times() {
        let mut pct = Pct::new(3, 5);
        let mut preempted = 0;
        let mut search = Search::new();
        for k in 0..200 {
            let (taken, _) = search.run(&mut pct, k, &mut two_threads(), 100);
            // One switch is the first thread finishing; each change point adds at most one.
            assert!(switches(&taken) <= 1 + 2, "{taken:?}");
            preempted += usize::from(switches(&taken) > 1);
        }
        assert!(preempted > 20, "change points do cause preemptions: {preempted}");
    }

    #[test]
    fn step_estimate_is_measured_by_the_first_execution() {
        let mut pct = Pct::new(3, 1);
        assert_eq!(pct.step_estimate(), INITIAL_STEP_ESTIMATE);
        pct.begin_execution(Start::calibrated(1, 12));
        assert_eq!(pct.step_estimate(), 12);
        assert!(pct.change_points.iter().all(|&p| (1..=12).contains(&p)));
        assert_eq!(pct.change_points.len(), 2);
        assert_ne!(pct.change_points[0], pct.change_points[1]);
        // The search passes execution 0's length, not the last execution's.
        let mut search = Search::new();
        let mut twelve = Pct::new(3, 1);
        search.run(&mut twelve, 0, &mut two_threads(), 100);
        search.run(&mut twelve, 1, &mut Straight::new(vec![vec![Op::Yield; 7]]), 100);
        search.run(&mut twelve, 2, &mut two_threads(), 100);
        assert_eq!(twelve.step_estimate(), 12);

        // Fewer steps than change points: they may repeat, and still lie in range.
        let mut deep = Pct::new(10, 1);
        deep.begin_execution(Start::calibrated(0, 3));
        assert_eq!(deep.change_points.len(), 9);
        assert!(deep.change_points.iter().all(|&p| (1..=3).contains(&p)));
    }

    #[test]
    fn an_execution_depends_only_on_seed_index_and_estimate() {
        let mut a = Pct::new(3, 42);
        let mut schedules = Vec::new();
        let mut search = Search::new();
        for k in 0..6 {
            schedules.push(search.run(&mut a, k, &mut two_threads(), 100).0);
        }
        // A fresh strategy that only knows the estimate reproduces execution 5.
        let mut b = Pct::new(3, 42);
        assert_eq!(run(&mut b, Start::calibrated(5, 12), &mut two_threads(), 100).0, schedules[5]);
        assert!(schedules[1..].windows(2).any(|w| w[0] != w[1]), "executions differ");
    }

    #[test]
    fn several_choices_of_the_top_thread_are_picked_uniformly() {
        let mut pct = Pct::new(1, 8);
        let mut kinds = [0; 2];
        let mut search = Search::new();
        for k in 0..200 {
            let mut p = Straight::new(vec![vec![Op::Sleep]]);
            let (taken, _) = search.run(&mut pct, k, &mut p, 10);
            kinds[usize::from(taken[0].kind == ChoiceKind::Timeout)] += 1;
        }
        assert!(kinds[0] > 60 && kinds[1] > 60, "{kinds:?}");
    }

    /// Thread 0 spins on `sched_yield` until thread 1 has set a flag.
    struct SpinWait {
        flag: bool,
        spinner_done: bool,
        setter_pc: usize,
    }

    impl Program for SpinWait {
        fn choices(&self) -> Vec<Choice> {
            let mut out = Vec::new();
            if !self.spinner_done {
                let op = if self.flag { Op::ThreadExit } else { Op::Yield };
                out.push(run_choice(0, op, 0));
            }
            const SETTER: [Op; 3] = [Op::ClockRead, Op::MutexUnlock, Op::ThreadExit];
            if let Some(&op) = SETTER.get(self.setter_pc) {
                out.push(run_choice(1, op, 0x40));
            }
            out
        }

        fn apply(&mut self, c: &Choice) {
            match (c.thread, c.op) {
                (0, Op::ThreadExit) => self.spinner_done = true,
                (0, _) => {}
                (_, op) => {
                    self.flag |= op == Op::MutexUnlock;
                    self.setter_pc += 1;
                }
            }
        }
    }

    #[test]
    fn a_yield_spin_loop_cannot_starve_the_thread_it_waits_for() {
        // pct:1 has no change points: without yield demotion, whenever the spinner has the top
        // priority the run would never end.
        let mut pct = Pct::new(1, 3);
        let mut spinner_first = 0;
        let mut search = Search::new();
        for k in 0..100 {
            let mut p = SpinWait {
                flag: false,
                spinner_done: false,
                setter_pc: 0,
            };
            let (taken, finished) = search.run(&mut pct, k, &mut p, 1000);
            assert!(
                finished && taken.len() <= 8,
                "execution {k} took {} steps: {taken:?}",
                taken.len()
            );
            spinner_first += usize::from(taken[0].thread == 0);
        }
        assert!(
            spinner_first > 20,
            "the spinner starts with the top priority in some executions"
        );
    }

    #[test]
    fn yield_demotion_goes_below_change_point_priorities() {
        let mut pct = Pct::new(4, 1);
        pct.priorities.insert(1, 3);
        pct.priorities.insert(2, 40);
        pct.demote(2);
        assert_eq!(pct.priorities[&2], 0);
        pct.demote(1);
        assert_eq!(pct.priorities[&1], -1);
    }

    /// An order violation: thread A (0) clears a pointer at its op 3 and sets it again at op 4;
    /// thread B (1) uses the pointer at its op 2. The bug shows only if B's use falls between.
    fn order_violation(strategy: &mut dyn Strategy, executions: u64) -> Option<u64> {
        let mut search = Search::new();
        (0..executions).find(|&k| {
            let mut p = Straight::new(vec![vec![Op::MutexLock; 7], vec![Op::MutexUnlock; 4]]);
            search.run(strategy, k, &mut p, 100);
            let (a_clear, a_set, b_use) = (p.when(0, 3).unwrap(), p.when(0, 4).unwrap(), p.when(1, 2).unwrap());
            a_clear < b_use && b_use < a_set
        })
    }

    #[test]
    fn pct_and_random_find_an_order_violation_that_needs_a_preemption() {
        // Depth 2: one change point. With n = 2 threads and k = 11 steps each execution finds
        // it with probability >= 1/22 once the first execution has measured k.
        let found = order_violation(&mut Pct::new(2, 7), 300);
        assert!(found.is_some(), "pct:2 missed it in 300 executions");
        assert!(order_violation(&mut Random::new(7), 300).is_some(), "random missed it");
        // Without change points it is unreachable.
        assert_eq!(order_violation(&mut Pct::new(1, 7), 300), None);
    }
}
