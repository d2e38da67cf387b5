//! Re-running a recorded execution: the replay strategy fed with the trace's decisions, under
//! the trace's own settings, and the comparison of two runs step by step (`--verify`) and by
//! coverage.
use std::sync::atomic::AtomicBool;

use dara_scheduler::execution::{self, ExecutionConfig, ExecutionError, ExecutionReport, PidPlan};
use dara_scheduler::outside::OutsideMode;
use dara_scheduler::trace::{Step, Trace};

use std::collections::BTreeMap;

use dara_scheduler::choice::{ProcessId, ThreadId};
use dara_scheduler::coverage::ProcessCoverage;
use dara_scheduler::{Choice, Decide, Divergence};

use crate::strategy::replay::Replay;

/// The execution settings recorded in `trace`, on top of `base` (preload path, pinning,
/// watchdogs — things of the machine, not of the run).
pub fn config_for(trace: &Trace, base: &ExecutionConfig) -> ExecutionConfig {
    let h = &trace.header;
    ExecutionConfig {
        command: h.command.clone(),
        cwd: (!h.cwd.is_empty()).then(|| h.cwd.clone().into()),
        // Variables the trace left out come from the replaying user's environment.
        env: dara_scheduler::trace::private_env::restore(&h.env, &h.env_left_out, |name| std::env::var(name).ok()),
        cpus: h.cpus,
        memory: h.memory,
        library_cache: h.library_cache,
        random_seed: h.random_seed,
        max_steps: h.max_steps,
        max_vtime_ns: h.max_vtime_ns,
        preempt: h.preempt.clone(),
        cluster: h.cluster.clone(),
        setup: h.setup.clone(),
        cleanup: h.cleanup.clone(),
        time: h.time,
        profile: false,
        outside: if h.outside { OutsideMode::Replay { events: std::sync::Arc::new(trace.outside.clone()), stdin: h.stdin } } else { OutsideMode::Closed },
        // A recording stopped by the user is reproduced up to where it was stopped.
        stop_at_step: (trace.outcome == dara_scheduler::Outcome::Interrupted).then_some(trace.steps.len() as u64),
        // The recorded walk is followed like the rest of the schedule.
        liveness: h.liveness.map(|l| dara_model::liveness::LivenessConfig { follow_strategy: true, ..l }),
        // A recording made with the host's pids is replayed with the same ones.
        pids: h.pids.clone().map_or(PidPlan::Namespace, |recorded| PidPlan::Replay(std::sync::Arc::new(recorded))),
        ..base.clone()
    }
}

/// Runs the trace's decisions again.
pub fn reproduce(trace: &Trace, base: &ExecutionConfig, stop: &AtomicBool) -> Result<ExecutionReport, ExecutionError> {
    reproduce_observed(trace, base, stop).map(|(report, _)| report)
}

/// Like [`reproduce`], and also says for each step whether it was a *preemption*: the thread
/// that ran the step before was still offered a choice, yet another thread was chosen. These are
/// the decisions a reader of the interleaving should look at first.
pub fn reproduce_observed(trace: &Trace, base: &ExecutionConfig, stop: &AtomicBool) -> Result<(ExecutionReport, Vec<bool>), ExecutionError> {
    let cfg = config_for(trace, base);
    let mut observed = PreemptionObserver { inner: Replay::new(trace.steps.iter().map(|s| s.choice).collect()), last: None, preempted: Vec::new() };
    let report = execution::run(&cfg, &mut observed, stop)?;
    Ok((report, observed.preempted))
}

/// Runs the trace's program under its settings, but with the decisions of a schedule a person
/// wrote ([`crate::schedule`]) instead of the trace's; also says which steps were preemptions and
/// which schedule line each step followed. A schedule that cannot be followed ends the run as
/// `Outcome::Diverged`, naming the line and what the program offered.
pub fn follow_schedule(trace: &Trace, base: &ExecutionConfig, lines: Vec<crate::schedule::ScheduleLine>, stop: &AtomicBool) -> Result<(ExecutionReport, Vec<bool>, crate::schedule::Followed), ExecutionError> {
    let mut cfg = config_for(trace, base);
    cfg.stop_at_step = None;
    let mut observed = PreemptionObserver { inner: crate::schedule::FollowSchedule::new(lines), last: None, preempted: Vec::new() };
    let report = execution::run(&cfg, &mut observed, stop)?;
    Ok((report, observed.preempted, observed.inner.followed))
}

/// Wraps a decider and notes which of its decisions were preemptions.
struct PreemptionObserver<D> {
    inner: D,
    last: Option<ThreadId>,
    preempted: Vec<bool>,
}

impl<D: Decide> Decide for PreemptionObserver<D> {
    fn choose(&mut self, step: u64, choices: &[Choice]) -> Result<usize, Divergence> {
        let i = self.inner.choose(step, choices)?;
        let chosen = choices.get(i).map(|c| c.thread);
        let preempts = chosen != self.last && self.last.is_some_and(|t| choices.iter().any(|c| c.thread == t));
        self.preempted.push(preempts);
        self.last = chosen;
        Ok(i)
    }
}

/// First step at which two step lists differ, with a description of the difference.
pub fn first_difference(expected: &[Step], seen: &[Step]) -> Option<(usize, String)> {
    for (i, (a, b)) in expected.iter().zip(seen).enumerate() {
        if a != b {
            return Some((i, format!("expected {a:?}, saw {b:?}")));
        }
    }
    if expected.len() != seen.len() {
        let i = expected.len().min(seen.len());
        return Some((i, format!("expected {} steps, saw {}", expected.len(), seen.len())));
    }
    None
}

/// How two runs' coverage differs (guards and edges with their counts, call sites and first
/// steps, per process; module maps are not compared), or None when it is the same.
pub fn coverage_difference(expected: &BTreeMap<ProcessId, ProcessCoverage>, seen: &BTreeMap<ProcessId, ProcessCoverage>) -> Option<String> {
    let processes: std::collections::BTreeSet<_> = expected.keys().chain(seen.keys()).collect();
    for p in processes {
        let (a, b) = match (expected.get(p), seen.get(p)) {
            (Some(a), Some(b)) => (a, b),
            (a, _) => return Some(format!("process {p} has coverage only in the {}", if a.is_some() { "recording" } else { "replay" })),
        };
        if a.same_edges(b) {
            continue;
        }
        if a.guards != b.guards {
            return Some(format!("process {p}: {} guards recorded, {} in the replay", a.guards, b.guards));
        }
        let first = a.edges.iter().zip(&b.edges).find(|(x, y)| x != y);
        return Some(match first {
            Some((x, y)) => format!("process {p}: edge {} recorded as {x:?}, replayed as {y:?}", x.edge),
            None => format!("process {p}: {} edges recorded, {} reached in the replay", a.edges.len(), b.edges.len()),
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use dara_scheduler::coverage::EdgeHit;

    #[test]
    fn coverage_difference_names_the_first_difference() {
        let edge = |edge, count| EdgeHit { edge, pc: 0x1000 + u64::from(edge), count, first_step: 0 };
        let cov = |edges: Vec<EdgeHit>| ProcessCoverage { guards: 4, edges, modules: vec![] };
        let a: BTreeMap<_, _> = [(0, cov(vec![edge(1, 1), edge(2, 3)]))].into();
        assert_eq!(coverage_difference(&a, &a), None);
        let mut moved = a.clone();
        moved.get_mut(&0).unwrap().modules.push(dara_scheduler::coverage::Module { path: "/x".into(), start: 0, end: 1, offset: 0 });
        assert_eq!(coverage_difference(&a, &moved), None, "module maps are not compared");
        let b: BTreeMap<_, _> = [(0, cov(vec![edge(1, 1), edge(2, 4)]))].into();
        assert!(coverage_difference(&a, &b).unwrap().contains("edge 2"));
        let c: BTreeMap<_, _> = [(0, cov(vec![edge(1, 1)]))].into();
        assert!(coverage_difference(&a, &c).unwrap().contains("2 edges recorded, 1 reached"));
        assert!(coverage_difference(&a, &BTreeMap::new()).unwrap().contains("only in the recording"));
    }
}
