//! Fault points for the sampling strategies (`random`, `pct`, `coverage:*`).
//!
//! In a cluster run with fault budgets the model offers fault choices (crash a node, restart it,
//! partition two nodes, ...) at every step while budget is left. Left among the thread choices,
//! a uniform strategy would spend every budget in the first few steps, and PCT would rank faults
//! like threads. So this wrapper decides *when* faults happen, much as PCT places its change
//! points: each execution draws 1..=[`MAX_POINTS`] fault points uniformly over the expected
//! length (execution 0's step count once calibrated), and at the first step at or after a point
//! where a fault is offered it picks one of the offered faults uniformly. Every other decision
//! is the wrapped strategy's, over the non-fault choices only. When nothing but faults is
//! offered (every thread waits on a dead node), a fault is taken: the alternative is a deadlock.
//!
//! The systematic strategies (`dfs`, `dpor`) are not wrapped: they enumerate fault choices like
//! any other, so a fault's place is searched exhaustively within the budget.
//!
//! Reproducibility: the points of execution `k` depend on (seed, k) and the calibration only.
use dara_model::{Choice, ChoiceKind, Decide, Divergence};

use super::{Feedback, Start, Status, Strategy};
use crate::rng::Rng;

/// Most fault points per execution.
pub const MAX_POINTS: u64 = 3;
/// The expected execution length before calibration (execution 0 itself).
const UNCALIBRATED_STEPS: u64 = 200;
/// Keeps the fault generator's stream apart from the wrapped strategy's.
const FAULT_STREAM: u64 = 0xFA17_5EED_0000_0001;

pub struct Faults<S> {
    inner: S,
    seed: u64,
    rng: Rng,
    /// This execution's fault points not yet used, ascending.
    points: Vec<u64>,
    /// The non-fault choices of the current step and their indices (reused buffers).
    others: Vec<Choice>,
    other_index: Vec<usize>,
}

impl<S: Strategy> Faults<S> {
    pub fn new(inner: S, seed: u64) -> Faults<S> {
        let mut wrapper = Faults { inner, seed, rng: Rng::new(seed), points: Vec::new(), others: Vec::new(), other_index: Vec::new() };
        wrapper.plan(Start::at(0));
        wrapper
    }

    /// Draws the fault points of the execution `start` begins, over its expected length.
    fn plan(&mut self, start: Start) {
        let expected_steps = start.first_steps.map_or(UNCALIBRATED_STEPS, |steps| steps.max(1));
        self.rng = Rng::for_execution(self.seed ^ FAULT_STREAM, start.execution);
        let count = 1 + self.rng.below(MAX_POINTS);
        self.points = (0..count).map(|_| self.rng.below(expected_steps)).collect();
        self.points.sort_unstable();
    }

    /// Splits `choices` into the fault choices' count and the others (kept in the buffers).
    fn split(&mut self, choices: &[Choice]) -> usize {
        self.others.clear();
        self.other_index.clear();
        for (i, c) in choices.iter().enumerate() {
            if c.kind != ChoiceKind::Fault {
                self.others.push(*c);
                self.other_index.push(i);
            }
        }
        choices.len() - self.others.len()
    }
}

impl<S: Strategy> Decide for Faults<S> {
    fn choose(&mut self, step: u64, choices: &[Choice]) -> Result<usize, Divergence> {
        let faults = self.split(choices);
        if faults == 0 {
            return self.inner.choose(step, choices);
        }
        let due = self.points.first().is_some_and(|&p| p <= step);
        if due || self.others.is_empty() {
            if due {
                self.points.remove(0);
            }
            let pick = self.rng.index(faults);
            return Ok(choices.iter().enumerate().filter(|(_, c)| c.kind == ChoiceKind::Fault).nth(pick).map(|(i, _)| i).expect("pick < faults"));
        }
        let others = std::mem::take(&mut self.others);
        let chosen = self.inner.choose(step, &others);
        self.others = others;
        Ok(self.other_index[chosen?])
    }
}

impl<S: Strategy> Strategy for Faults<S> {
    fn begin_execution(&mut self, start: Start) {
        self.inner.begin_execution(start);
        self.plan(start);
    }

    fn end_execution(&mut self, feedback: &Feedback<'_>) -> Status {
        self.inner.end_execution(feedback)
    }

    fn forced(&mut self, step: u64, choices: &[Choice], chosen: usize) {
        if choices[chosen].kind == ChoiceKind::Fault {
            return;
        }
        self.split(choices);
        if let Some(i) = self.other_index.iter().position(|&i| i == chosen) {
            let others = std::mem::take(&mut self.others);
            self.inner.forced(step, &others, i);
            self.others = others;
        }
    }
}

#[cfg(test)]
mod tests {
    use dara_abi::Op;
    use dara_model::choice::FAULT_THREAD;

    use super::*;
    use crate::strategy::Random;

    fn thread(t: u32) -> Choice {
        Choice { thread: t, kind: ChoiceKind::Run, alt: 0, op: Op::Yield, obj: 0 }
    }

    fn crash(node: u64) -> Choice {
        Choice { thread: FAULT_THREAD, kind: ChoiceKind::Fault, alt: 0, op: Op::NodeCrash, obj: node }
    }

    /// Runs up to `steps` steps offering two threads and two crashes: returns the step of the
    /// first fault, if any.
    fn fault_step(s: &mut Faults<Random>, start: Start, steps: u64) -> Option<u64> {
        s.begin_execution(start);
        let choices = [thread(0), thread(1), crash(0), crash(1)];
        (0..steps).find(|&step| choices[s.choose(step, &choices).unwrap()].kind == ChoiceKind::Fault)
    }

    #[test]
    fn faults_come_at_planned_points_spread_over_the_execution() {
        let mut s = Faults::new(Random::new(7), 7);
        let steps: Vec<u64> = (0..200).filter_map(|k| fault_step(&mut s, Start::calibrated(k, 100), 100)).collect();
        assert_eq!(steps.len(), 200, "every execution plans at least one point within the expected length");
        let early = steps.iter().filter(|&&st| st < 10).count();
        let late = steps.iter().filter(|&&st| st >= 50).count();
        // The first of 1-3 uniform points: early ones dominate a little, but the whole range is used.
        assert!(early < 100 && late > 10, "first fault steps not spread: {early} before step 10, {late} after step 50");
    }

    #[test]
    fn the_same_seed_and_execution_plan_the_same_faults() {
        let mut a = Faults::new(Random::new(3), 3);
        let mut b = Faults::new(Random::new(3), 3);
        for k in [5, 1, 9] {
            assert_eq!(fault_step(&mut a, Start::calibrated(k, 80), 80), fault_step(&mut b, Start::calibrated(k, 80), 80));
        }
    }

    #[test]
    fn without_fault_choices_the_wrapped_strategy_decides_alone() {
        let mut wrapped = Faults::new(Random::new(11), 11);
        let mut plain = Random::new(11);
        wrapped.begin_execution(Start::at(4));
        plain.begin_execution(Start::at(4));
        let choices = [thread(0), thread(1), thread(2)];
        for step in 0..50 {
            assert_eq!(wrapped.choose(step, &choices).unwrap(), plain.choose(step, &choices).unwrap());
        }
    }

    /// Two threads of three steps each, thread 1 on a node that a budget of one crash may kill
    /// (its remaining steps then vanish).
    struct CrashableNode {
        pc: [usize; 2],
        crashed: bool,
    }

    impl crate::strategy::testkit::Program for CrashableNode {
        fn choices(&self) -> Vec<Choice> {
            let mut out: Vec<Choice> = (0..2u32).filter(|&t| self.pc[t as usize] < 3 && !(t == 1 && self.crashed)).map(thread).collect();
            if !self.crashed && self.pc[1] < 3 && !out.is_empty() {
                out.push(crash(1));
            }
            out
        }

        fn apply(&mut self, c: &Choice) {
            match c.kind {
                ChoiceKind::Fault => self.crashed = true,
                _ => self.pc[c.thread as usize] += 1,
            }
        }
    }

    #[test]
    fn systematic_strategies_try_the_crash_at_every_point() {
        use crate::strategy::testkit::Search;
        use crate::strategy::{Dfs, Dpor};
        let strategies: Vec<(&str, Box<dyn Strategy>)> = vec![("dfs", Box::new(Dfs::unbounded())), ("dpor", Box::new(Dpor::new()))];
        for (name, mut s) in strategies {
            let mut crash_after = std::collections::BTreeSet::new();
            let mut search = Search::new();
            for k in 0..10_000 {
                if search.status.exhausted.is_some() {
                    break;
                }
                let (taken, _) = search.run(s.as_mut(), k, &mut CrashableNode { pc: [0; 2], crashed: false }, 100);
                if let Some(at) = taken.iter().position(|c| c.kind == ChoiceKind::Fault) {
                    // How far thread 1 had got when its node was crashed.
                    crash_after.insert(taken[..at].iter().filter(|c| c.thread == 1).count());
                }
            }
            assert!(search.status.exhausted.is_some(), "{name} did not finish the space");
            assert_eq!(crash_after.into_iter().collect::<Vec<_>>(), vec![0, 1, 2], "{name}: the crash before each of thread 1's steps");
        }
    }

    #[test]
    fn only_faults_offered_means_a_fault_is_taken() {
        let mut s = Faults::new(Random::new(1), 1);
        s.begin_execution(Start::at(0));
        let choices = [crash(0), crash(1)];
        assert!(s.choose(0, &choices).unwrap() < 2);
    }
}
