//! The minimizer's search: which candidate plans to build from a failing schedule, and in which
//! order to try them.
//!
//! Best-first over failing schedules, smallest (preemptions, steps) first. Expanding a schedule
//! runs its truncation bisection, then its continuation moves, latest preemption first; the first
//! candidate smaller than the schedule being expanded ends the expansion (greedy descent while it
//! works). Candidates that fail the same way without being smaller — same preemption count, the
//! preemption moved elsewhere — join the frontier too: removing a preemption often takes two
//! moves (shift one preemption, then another disappears), and the first alone is no gain.
//! The search ends when the frontier is empty, the budget is spent, or [`PATIENCE`] candidates in
//! a row brought no new best.
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::AtomicBool;

use dara_scheduler::execution::{self, ExecutionConfig};
use dara_scheduler::{Choice, Outcome};

use super::{Attempt, Guided, MinimizeError, Schedule};

/// Candidate executions without a new best after which the search gives up.
pub const PATIENCE: u64 = 60;

pub(super) struct Search<'a> {
    pub cfg: ExecutionConfig,
    pub stop: &'a AtomicBool,
    pub signature: String,
    pub tries: u64,
    pub accepted: u64,
    pub max_tries: u64,
    /// `tries` when the best schedule last improved.
    improved_at: u64,
    /// Plans already run (by hash) and whether they failed the same way: a plan is
    /// deterministic, so running it again teaches nothing.
    tried: HashMap<u64, bool>,
    /// Failing schedules not expanded yet.
    frontier: Vec<Schedule>,
    pub best: Schedule,
    on_attempt: &'a mut dyn FnMut(&Attempt),
}

/// What became of one candidate plan.
enum Tried {
    /// Not run: the budget is spent.
    Budget,
    /// Run before; whether it failed the same way.
    Known(bool),
    /// Run now.
    Ran { same_failure: bool, smaller: bool },
}

impl<'a> Search<'a> {
    pub fn new(cfg: ExecutionConfig, stop: &'a AtomicBool, signature: String, max_tries: u64, on_attempt: &'a mut dyn FnMut(&Attempt)) -> Search<'a> {
        let empty = Schedule { steps: Vec::new(), notes: Vec::new(), outcome: Outcome::Interrupted, coverage: Default::default() };
        Search { cfg, stop, signature, tries: 0, accepted: 0, max_tries, improved_at: 0, tried: HashMap::new(), frontier: Vec::new(), best: empty, on_attempt }
    }

    /// Runs `plan` under `Guided`.
    pub fn execute(&mut self, plan: Vec<Choice>) -> Result<Schedule, MinimizeError> {
        let key = plan_key(&plan);
        let mut guided = Guided::new(plan);
        let report = execution::run(&self.cfg, &mut guided, self.stop)?;
        if report.outcome == Outcome::Interrupted {
            return Err(MinimizeError::Interrupted);
        }
        let notes = guided.into_notes();
        debug_assert_eq!(notes.len(), report.steps.len(), "one note per decision");
        self.tried.insert(key, report.outcome.signature() == self.signature);
        Ok(Schedule { steps: report.steps, notes, outcome: report.outcome, coverage: report.coverage })
    }

    /// Searches from `start`, a run of the original trace; the result is in `self.best`.
    pub fn run(&mut self, start: Schedule) -> Result<(), MinimizeError> {
        self.best = start.clone();
        self.frontier.push(start);
        while let Some(next) = self.pop_smallest() {
            if self.tries >= self.max_tries || self.tries - self.improved_at >= PATIENCE {
                break;
            }
            self.expand(&next)?;
        }
        Ok(())
    }

    pub fn out_of_tries(&self) -> bool {
        self.tries >= self.max_tries
    }

    fn pop_smallest(&mut self) -> Option<Schedule> {
        let i = (0..self.frontier.len()).min_by_key(|&i| {
            let s = self.frontier[i].size();
            (s.preemptions, s.steps)
        })?;
        Some(self.frontier.swap_remove(i))
    }

    fn expand(&mut self, s: &Schedule) -> Result<(), MinimizeError> {
        if self.truncate(s)? {
            return Ok(());
        }
        for &at in s.preemption_steps().iter().rev() {
            for (what, plan) in continuation_plans(s, at) {
                match self.attempt(what, plan, s)? {
                    Tried::Budget => return Ok(()),
                    Tried::Ran { smaller: true, .. } => return Ok(()),
                    _ => {}
                }
            }
        }
        Ok(())
    }

    /// Bisects for the fewest leading preemptions of `s` that still fail. True when that gave a
    /// schedule smaller than `s`.
    fn truncate(&mut self, s: &Schedule) -> Result<bool, MinimizeError> {
        let preemptions = s.preemption_steps();
        let Some(&last) = preemptions.last() else { return Ok(false) };
        // Cut points: before each preemption, then just after the last one (all kept, the tail
        // left to the fallback). Index `cuts.len()` is the whole schedule, known to fail.
        let mut cuts = preemptions.clone();
        cuts.push(last + 1);
        let plan = s.choices();
        let (mut lo, mut hi) = (0, cuts.len());
        let mut found = false;
        while lo < hi {
            let mid = (lo + hi) / 2;
            let what = format!("keep the first {} of {} preemptions", mid.min(preemptions.len()), preemptions.len());
            let same_failure = match self.attempt(what, plan[..cuts[mid]].to_vec(), s)? {
                Tried::Budget => break,
                Tried::Known(same) => same,
                Tried::Ran { same_failure, smaller } => {
                    found |= smaller;
                    same_failure
                }
            };
            if same_failure {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        Ok(found)
    }

    /// Runs `plan` as a candidate derived from `from`. A run that fails the same way with no more
    /// preemptions than `from` joins the frontier, and becomes the best if it is the smallest yet.
    fn attempt(&mut self, what: String, plan: Vec<Choice>, from: &Schedule) -> Result<Tried, MinimizeError> {
        if let Some(&same) = self.tried.get(&plan_key(&plan)) {
            return Ok(Tried::Known(same));
        }
        if self.tries >= self.max_tries {
            return Ok(Tried::Budget);
        }
        self.tries += 1;
        let candidate = self.execute(plan)?;
        let size = candidate.size();
        let same_failure = candidate.outcome.signature() == self.signature;
        let smaller = same_failure && size.smaller_than(&from.size());
        let accepted = same_failure && size.smaller_than(&self.best.size());
        (self.on_attempt)(&Attempt { number: self.tries, what, size, same_failure, accepted });
        if accepted {
            self.accepted += 1;
            self.improved_at = self.tries;
            self.best = candidate.clone();
        }
        if same_failure && size.preemptions <= from.size().preemptions {
            self.frontier.push(candidate);
        }
        Ok(Tried::Ran { same_failure, smaller })
    }
}

/// Identifies a plan among those tried (a hash: plans can be as long as the step bound).
fn plan_key(plan: &[Choice]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    plan.hash(&mut h);
    h.finish()
}

/// Plans that let the thread preempted at step `at` go on instead: its next block of steps moved
/// before the switch — the whole block, then its first 1, 2, 4, ... steps.
pub(super) fn continuation_plans(s: &Schedule, at: usize) -> Vec<(String, Vec<Choice>)> {
    let choices = s.choices();
    let Some(prev) = at.checked_sub(1).and_then(|p| choices.get(p)).map(|c| c.thread) else { return Vec::new() };
    let what = |n: usize| format!("continue thread {prev} at step {at} ({n} step{})", if n == 1 { "" } else { "s" });
    let Some(start) = (at..choices.len()).find(|&j| choices[j].thread == prev) else {
        // The thread never ran again: run the step it offered.
        let offered = s.notes.get(at).and_then(|n| n.continuation);
        return offered.map(|c| (what(1), [&choices[..at], &[c], &choices[at..]].concat())).into_iter().collect();
    };
    let block = choices[start..].iter().take_while(|c| c.thread == prev).count();
    let mut lengths = vec![block];
    lengths.extend(std::iter::successors(Some(1), |n| Some(n * 2)).take_while(|&n| n < block));
    lengths
        .into_iter()
        .map(|n| (what(n), [&choices[..at], &choices[start..start + n], &choices[at..start], &choices[start + n..]].concat()))
        .collect()
}

#[cfg(test)]
mod tests {
    use dara_abi::Op;

    use super::super::tests::schedule_of;
    use super::*;
    use crate::strategy::testkit::{run_choice, Straight};

    #[test]
    fn a_continuation_moves_the_preempted_threads_next_block_before_the_switch() {
        let program = || Straight::new(vec![vec![Op::Yield; 4], vec![Op::Yield; 2]]);
        let c = |t: u32, i: u64| run_choice(t, Op::Yield, 0x1000 * (t as u64 + 1) + i);
        let s = schedule_of(&[c(0, 0), c(1, 0), c(0, 1), c(0, 2), c(0, 3), c(1, 1)], &mut program());
        assert_eq!(s.size().preemptions, 2);
        let plans: Vec<Vec<Choice>> = continuation_plans(&s, 1).into_iter().map(|(_, p)| p).collect();
        assert_eq!(
            plans,
            vec![
                vec![c(0, 0), c(0, 1), c(0, 2), c(0, 3), c(1, 0), c(1, 1)],
                vec![c(0, 0), c(0, 1), c(1, 0), c(0, 2), c(0, 3), c(1, 1)],
                vec![c(0, 0), c(0, 1), c(0, 2), c(1, 0), c(0, 3), c(1, 1)],
            ]
        );
        // The whole block moved: no preemption left.
        assert_eq!(schedule_of(&plans[0], &mut program()).size().preemptions, 0);
        // Nothing to continue at step 0.
        assert!(continuation_plans(&s, 0).is_empty());
    }

    #[test]
    fn a_thread_that_never_runs_again_continues_with_the_step_it_offered() {
        // Thread 0 is preempted at step 1 and the schedule ends before it runs again.
        let program = || Straight::new(vec![vec![Op::Yield; 2], vec![Op::Yield; 1]]);
        let c = |t: u32, i: u64| run_choice(t, Op::Yield, 0x1000 * (t as u64 + 1) + i);
        let mut p = program();
        let mut s = schedule_of(&[c(0, 0), c(1, 0), c(0, 1)], &mut p);
        s.steps.truncate(2);
        s.notes.truncate(2);
        let plans = continuation_plans(&s, 1);
        assert_eq!(plans.len(), 1);
        assert_eq!(plans[0].1, vec![c(0, 0), c(0, 1), c(1, 0)]);
    }
}
