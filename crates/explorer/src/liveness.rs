//! The critical transition of a liveness violation, after MaceMC (Killian et al., NSDI 2007):
//! the earliest step of the violating trace after which the system can no longer recover. For a
//! prefix of `p` decisions, `walks` fair random walks of the trace's walk length start right after
//! it (the scheduler's liveness walk with `from_step = p`, each with its own salt); the prefix is
//! *dead* when none of them reaches the property. The walk of the trace started at the end of the
//! workload `w`, which must be dead; the empty prefix is taken as live; a binary search finds the
//! smallest dead `p`, and decision `p - 1` (the listing's step number) is the transition.
//!
//! A heuristic, as in MaceMC: it assumes that a dead prefix stays dead when extended (monotony)
//! and that `walks` walks that all fail mean no walk succeeds. It costs about
//! `walks * (1 + log2 w)` executions, each up to the walk's length when dead; a live probe stops
//! at its first recovering walk.
use std::sync::atomic::AtomicBool;

use dara_model::liveness::{CriticalTransition, LivenessConfig};
use dara_scheduler::execution::{self, ExecutionConfig, ExecutionError};
use dara_scheduler::trace::Trace;
use dara_scheduler::Outcome;

use crate::reproduce::config_for;
use crate::strategy::replay::Replay;

/// Walks per prefix when the user says nothing (`--liveness-walks`).
pub const DEFAULT_WALKS: u32 = 10;

/// Why no critical transition was found.
#[derive(Debug, thiserror::Error)]
pub enum TransitionError {
    #[error("the trace is not a liveness violation found by a walk")]
    NotLiveness,
    #[error("{0} of {1} random walks from the end of the workload reached the property: no point of no return before it (the violation depends on the walk)")]
    Recoverable(u32, u32),
    #[error("interrupted")]
    Interrupted,
    #[error(transparent)]
    Execution(#[from] ExecutionError),
}

/// What the search cost: probes (prefixes tried) and executions.
#[derive(Clone, Copy, Debug, Default)]
pub struct TransitionCost {
    pub probes: u32,
    pub executions: u32,
}

/// Finds the critical transition of `trace` (a `LivenessViolated` outcome), running the trace's
/// program under `base`'s machine settings with `walks` walks per prefix.
pub fn critical_transition(trace: &Trace, base: &ExecutionConfig, walks: u32, stop: &AtomicBool) -> Result<(CriticalTransition, TransitionCost), TransitionError> {
    let (Outcome::LivenessViolated { name, walk_steps }, Some(liveness)) = (&trace.outcome, trace.header.liveness) else {
        return Err(TransitionError::NotLiveness);
    };
    let workload = (trace.steps.len() as u64).checked_sub(*walk_steps).ok_or(TransitionError::NotLiveness)?;
    let mut cost = TransitionCost::default();
    let walks = walks.max(1);
    let probe = |p: u64, cost: &mut TransitionCost| -> Result<u32, TransitionError> {
        cost.probes += 1;
        let mut cfg = config_for(trace, base);
        cfg.discard_output = true;
        cfg.symbolize = false;
        cfg.stop_at_step = None;
        let mut recovered = 0;
        for salt in 1..=walks {
            cfg.liveness = Some(LivenessConfig { steps: liveness.steps, salt: u64::from(salt), from_step: Some(p), follow_strategy: false });
            let mut prefix = Replay::new(trace.steps[..p as usize].iter().map(|s| s.choice).collect());
            let report = execution::run(&cfg, &mut prefix, stop)?;
            cost.executions += 1;
            match report.outcome {
                Outcome::Interrupted => return Err(TransitionError::Interrupted),
                Outcome::LivenessViolated { .. } => {}
                // Recovered, or ended another way: not stuck.
                _ => {
                    recovered += 1;
                    if p < workload {
                        return Ok(recovered); // a live prefix needs one witness
                    }
                }
            }
        }
        Ok(recovered)
    };
    let at_end = probe(workload, &mut cost)?;
    if at_end > 0 {
        return Err(TransitionError::Recoverable(at_end, walks));
    }
    // live(lo), dead(hi)
    let (mut lo, mut hi) = (0u64, workload);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if probe(mid, &mut cost)? == 0 {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    let step = hi.saturating_sub(1);
    Ok((CriticalTransition { step, walks, walk_steps: liveness.steps, property: name.clone() }, cost))
}
