//! Schedule minimization: given a failing trace, find a schedule with fewer preemptions (then
//! fewer steps) that fails the same way (`Outcome::signature`), as a trace `dara-replay`
//! follows exactly.
//!
//! Every candidate is a real execution under [`Guided`], which follows a *plan* built from a
//! failing schedule and completes it without preempting. Two kinds of candidates:
//!
//! * **Truncation** (delta debugging over the tail, Zeller & Hildebrandt 2002, reduced to a
//!   bisection on an ordered list): keep the plan up to the m-th preemption and let the fallback
//!   finish; bisect for the smallest m that still fails. One round costs about
//!   log2(preemptions + 2) executions and drops every preemption the bug does not need at the end
//!   of the schedule.
//! * **Preemption removal**: at a step where the schedule switched from thread A to another while
//!   A could have continued, move A's next block of steps before the switch (the whole block,
//!   then its first 1, 2, 4, ... steps). The rest of the plan keeps its order; `Guided` absorbs
//!   the mismatches this causes downstream.
//!
//! A candidate is accepted as the new best when it fails with the same signature and has fewer
//! preemptions, or as many and fewer steps; its *executed* steps, not its plan, are what is kept,
//! so the result is a schedule the program really took. How candidates are ordered and when the
//! search stops is in `minimize/search.rs`. The result is checked by one more run under `replay` before it
//! is handed back. The search finds a local minimum, not the smallest failing schedule (that
//! would be a search over all schedules).
use std::sync::atomic::AtomicBool;

use dara_scheduler::execution::{ExecutionConfig, ExecutionError};
use dara_scheduler::trace::{Step, Trace};
use dara_scheduler::{Choice, Outcome};

use crate::reproduce::{config_for, reproduce};

pub mod guided;
mod search;

pub use guided::{Guided, StepNote};
pub use search::PATIENCE;

use search::Search;

/// How big a schedule is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Size {
    pub steps: usize,
    /// Consecutive steps by different threads.
    pub switches: usize,
    /// Switches away from a thread that still had a choice offered.
    pub preemptions: usize,
}

impl Size {
    /// Fewer preemptions, or as many and fewer steps.
    pub fn smaller_than(&self, other: &Size) -> bool {
        (self.preemptions, self.steps) < (other.preemptions, other.steps)
    }
}

/// One executed schedule with what was noted at each step.
#[derive(Clone, Debug)]
pub struct Schedule {
    pub steps: Vec<Step>,
    pub notes: Vec<StepNote>,
    pub outcome: Outcome,
    /// Coverage of the run, stored in the minimized trace.
    pub coverage: std::collections::BTreeMap<dara_scheduler::choice::ProcessId, dara_scheduler::coverage::ProcessCoverage>,
}

impl Schedule {
    pub fn size(&self) -> Size {
        Size {
            steps: self.steps.len(),
            switches: self.notes.iter().filter(|n| n.switched).count(),
            preemptions: self.notes.iter().filter(|n| n.preempted).count(),
        }
    }

    /// Steps at which a preemption happened, in order.
    pub fn preemption_steps(&self) -> Vec<usize> {
        self.notes.iter().enumerate().filter(|(_, n)| n.preempted).map(|(i, _)| i).collect()
    }

    /// The choices taken, in order: the plan that runs this schedule again.
    pub fn choices(&self) -> Vec<Choice> {
        self.steps.iter().map(|s| s.choice).collect()
    }
}

/// One candidate execution, for progress output.
#[derive(Clone, Debug)]
pub struct Attempt {
    /// 1-based count of candidate executions.
    pub number: u64,
    /// What was tried: "keep the first 2 of 7 preemptions", "continue thread 1 at step 12".
    pub what: String,
    pub size: Size,
    /// The candidate failed with the original signature.
    pub same_failure: bool,
    /// It became the new best schedule (same failure, smaller than every schedule before).
    pub accepted: bool,
}

/// The result of [`minimize`]: the new trace (same header, new steps and outcome), already
/// replayed once to the same outcome.
#[derive(Debug)]
pub struct Minimized {
    pub trace: Trace,
    pub before: Size,
    pub after: Size,
    /// Candidate executions run (the reproduction and the final replay not counted).
    pub tries: u64,
    /// Candidates that became the new best.
    pub accepted: u64,
    /// The search stopped because `max_tries` was reached (rather than running out of
    /// candidates or of patience, see [`PATIENCE`]).
    pub out_of_tries: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum MinimizeError {
    #[error("the trace records no bug ({0}): nothing to minimize")]
    NoBug(String),
    #[error("the trace does not reproduce: cannot minimize ({0})")]
    NotReproduced(String),
    #[error("the minimized schedule did not replay to the same outcome ({0}); nothing was written")]
    ReplayMismatch(String),
    #[error("interrupted")]
    Interrupted,
    #[error("the trace records input from peers outside dara, which is tied to its schedule: a recording is replayed, not minimized")]
    Outside,
    #[error(transparent)]
    Execution(#[from] ExecutionError),
}

/// How much longer (virtual time, steps) than the failing run a candidate may run.
const CANDIDATE_STRETCH: u64 = 4;

/// Minimizes `trace` under its own settings on top of `base` (see [`config_for`]), running at
/// most `max_tries` candidate executions. `on_attempt` sees every candidate.
pub fn minimize(trace: &Trace, base: &ExecutionConfig, max_tries: u64, stop: &AtomicBool, on_attempt: &mut dyn FnMut(&Attempt)) -> Result<Minimized, MinimizeError> {
    if !trace.outcome.is_bug() {
        return Err(MinimizeError::NoBug(trace.outcome.summary()));
    }
    if !trace.outside.is_empty() {
        return Err(MinimizeError::Outside);
    }
    let mut cfg = config_for(trace, base);
    // Candidates' output would only bury the result; the final replay check shows nothing either.
    cfg.discard_output = true;
    if !matches!(trace.outcome, Outcome::Hang { .. }) {
        // A candidate is meant to be smaller: one that runs far longer than the failing run (a
        // fallback that keeps taking a server's poll timeouts) is cut short instead of running
        // to the hour-long default bound.
        let end = trace.steps.last().map_or(0, |s| s.now_ns);
        cfg.max_vtime_ns = cfg.max_vtime_ns.min(end.saturating_mul(CANDIDATE_STRETCH).saturating_add(1_000_000_000));
        cfg.max_steps = cfg.max_steps.min((trace.steps.len() as u64).saturating_mul(CANDIDATE_STRETCH).saturating_add(1000));
    }
    let quiet_base = ExecutionConfig { discard_output: true, ..base.clone() };
    let mut search = Search::new(cfg, stop, trace.outcome.signature(), max_tries, on_attempt);
    let original = search.execute(trace.steps.iter().map(|s| s.choice).collect())?;
    check_reproduces(trace, &original)?;
    let before = original.size();
    search.run(original)?;
    let best = &search.best;
    let out = Trace { header: trace.header.clone(), steps: best.steps.clone(), outcome: best.outcome.clone(), coverage: best.coverage.clone(), outside: Vec::new() };
    check_replays(&out, &quiet_base, stop)?;
    Ok(Minimized { trace: out, before, after: best.size(), tries: search.tries, accepted: search.accepted, out_of_tries: search.out_of_tries() })
}

/// The recorded schedule, run again under `Guided`, must take the same steps to the same failure.
fn check_reproduces(trace: &Trace, run: &Schedule) -> Result<(), MinimizeError> {
    if let Some(i) = (0..trace.steps.len().min(run.steps.len())).find(|&i| trace.steps[i] != run.steps[i]) {
        let (want, saw) = (&trace.steps[i], &run.steps[i]);
        let what = if want.choice == saw.choice {
            format!("step {i} ({}) returned {:?} at {} ns, the trace recorded {:?} at {} ns", want.choice, saw.result, saw.now_ns, want.result, want.now_ns)
        } else {
            format!("step {i} was not offered as recorded: the trace has {}, the run took {}", want.choice, saw.choice)
        };
        return Err(MinimizeError::NotReproduced(what));
    }
    if trace.steps.len() != run.steps.len() {
        return Err(MinimizeError::NotReproduced(format!("the run took {} steps, the trace has {}", run.steps.len(), trace.steps.len())));
    }
    if run.outcome.signature() != trace.outcome.signature() {
        return Err(MinimizeError::NotReproduced(format!("it ended with \"{}\" instead of \"{}\"", run.outcome.summary(), trace.outcome.summary())));
    }
    Ok(())
}

/// One more run of `out` under `replay`: same steps, same failure.
fn check_replays(out: &Trace, base: &ExecutionConfig, stop: &AtomicBool) -> Result<(), MinimizeError> {
    let report = reproduce(out, base, stop)?;
    match &report.outcome {
        Outcome::Interrupted => return Err(MinimizeError::Interrupted),
        Outcome::Diverged { .. } => return Err(MinimizeError::ReplayMismatch(report.outcome.summary())),
        _ => {}
    }
    if let Some((i, _)) = crate::reproduce::first_difference(&out.steps, &report.steps) {
        return Err(MinimizeError::ReplayMismatch(format!("the replay departed from it at step {i}")));
    }
    if report.outcome.signature() != out.outcome.signature() {
        return Err(MinimizeError::ReplayMismatch(format!("the replay ended with \"{}\"", report.outcome.summary())));
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use dara_abi::Op;
    use dara_scheduler::Decide;

    use super::*;
    use crate::strategy::testkit::{run_choice, Program, Straight};

    /// Runs `program` under a `Guided` plan of `choices`, as a schedule (results and time zero).
    pub(crate) fn schedule_of(choices: &[Choice], program: &mut Straight) -> Schedule {
        let mut g = Guided::new(choices.to_vec());
        let mut steps = Vec::new();
        loop {
            let offered = program.choices();
            if offered.is_empty() {
                break;
            }
            let i = g.choose(steps.len() as u64, &offered).expect("guided never diverges");
            program.apply(&offered[i]);
            steps.push(Step { choice: offered[i], result: Some(0), now_ns: 0 });
        }
        Schedule { steps, notes: g.into_notes(), outcome: Outcome::Exited { code: 1, location: None }, coverage: Default::default() }
    }

    #[test]
    fn sizes_count_switches_and_preemptions() {
        let mut p = Straight::new(vec![vec![Op::Yield; 3], vec![Op::Yield; 2]]);
        let c = |t: u32, i: u64| run_choice(t, Op::Yield, 0x1000 * (t as u64 + 1) + i);
        let s = schedule_of(&[c(0, 0), c(1, 0), c(0, 1), c(0, 2), c(1, 1)], &mut p);
        assert_eq!(s.size(), Size { steps: 5, switches: 3, preemptions: 2 });
        assert_eq!(s.preemption_steps(), vec![1, 2]);
        let smaller = Size { steps: 9, switches: 1, preemptions: 1 };
        assert!(smaller.smaller_than(&s.size()));
        assert!(!s.size().smaller_than(&s.size()));
    }
}
