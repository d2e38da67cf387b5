//! The profiling run of memory-level preemption (`--preempt-on memory`): one execution, before
//! the search, in which the preload's load/store receivers only record who touches which granule
//! (`dara_abi::access`). Its result, the *watch set* — granules touched by more than one thread
//! with at least one write — goes into the search's execution settings, and from there into
//! every trace header, so replays, minimization and every `--jobs` value see exactly the same
//! scheduling points.
//!
//! The profile runs under [`NonPreemptive`]: the natural order, close to what the program does
//! natively, so that it usually runs to completion and touches what a normal run touches. Its
//! application randomness has its own seed, derived from the search seed. One run sees one
//! schedule: a sharing that only happens on another path is not in this set; the search's own
//! executions add it for the executions after them ([`crate::watch_growth`]).
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use dara_abi::{splitmix64, Op};
use dara_scheduler::choice::ThreadId;
use dara_scheduler::execution::{self, ExecutionConfig, ExecutionError};
use dara_scheduler::preempt::MAX_WATCHED;
use dara_scheduler::{Choice, Decide, Divergence};

/// What the profiling run found, for the user.
#[derive(Clone, Debug)]
pub struct ProfileSummary {
    /// Granules now watched (shared and written; every touched one under `memory:all`).
    pub watched: usize,
    /// Granules gated threads touched off their own stacks.
    pub touched: usize,
    /// Shared written granules left out because the set exceeded `MAX_WATCHED`.
    pub dropped: usize,
    pub steps: usize,
    pub wall: Duration,
    /// How the profiling run ended (its outcome is not judged: the search runs it again).
    pub outcome: String,
    /// Something the user must know, in one line (no instrumentation seen, table full).
    pub warning: Option<String>,
    /// Shared written memory was left unwatched: the table filled up or the set was cut at
    /// `MAX_WATCHED`.
    pub overflowed: bool,
    /// Which instrumentation reported the accesses (what a search can see: `visibility`).
    pub sources: dara_scheduler::preempt::Instrumented,
    /// `--preempt-on atomics`: the atomic instructions trapped in each program the run started.
    pub atomic_sites: std::collections::BTreeMap<String, dara_scheduler::atomic_plans::PlanSummary>,
}

impl ProfileSummary {
    /// The line dara-trace prints after the profiling run.
    pub fn describe(&self) -> String {
        let watched = if self.atomic_sites.is_empty() {
            format!("{} of {} granules shared and written, watched", self.watched, self.touched)
        } else {
            let trapped: Vec<String> = self.atomic_sites.iter().map(|(program, s)| if s.skipped > 0 { format!("{} in {program}, {} left out", s.sites, s.skipped) } else { format!("{} in {program}", s.sites) }).collect();
            format!("{} of {} granules watched; atomic instructions trapped: {}", self.watched, self.touched, trapped.join(", "))
        };
        format!("memory profile: {watched} ({} steps, {:.1} ms, {})", self.steps, self.wall.as_secs_f64() * 1e3, self.outcome)
    }
}

/// Salt of the profiling run's application seed.
const PROFILE_SALT: u64 = 0x9E0F_11E5_0000_0000;

/// Runs the profiling execution for `cfg` (whose `preempt.memory` is set) and stores the watch
/// set in `cfg.preempt.watch`. Does nothing useful for a program without load/store
/// instrumentation, which the summary's warning says.
pub fn profile(cfg: &mut ExecutionConfig, seed: u64, stop: &AtomicBool) -> Result<ProfileSummary, ExecutionError> {
    let mut run_cfg = cfg.clone();
    run_cfg.profile = true;
    run_cfg.preempt.watch.clear();
    run_cfg.random_seed = splitmix64(seed ^ PROFILE_SALT);
    run_cfg.discard_output = true;
    let report = execution::run(&run_cfg, &mut NonPreemptive::default(), stop)?;
    let profile = report.access_profile.unwrap_or_default();
    let mut watch = if cfg.preempt.watches_every_touched() { profile.touched.clone() } else { profile.racy.clone() };
    let dropped = watch.len().saturating_sub(MAX_WATCHED);
    watch.truncate(MAX_WATCHED);
    let overflowed = profile.nearly_full() || dropped > 0;
    // A run dara had to stop says why itself; the search that follows stops the same way.
    let stopped = matches!(report.outcome, dara_scheduler::Outcome::Uncontrolled { .. });
    let warning = if stopped {
        None
    } else if profile.touched.is_empty() && !cfg.preempt.memory {
        Some("--preempt-on atomics: the profiling run executed no atomic instruction of the program's own code on shared memory (lock-prefixed or xchg; atomics inside shared libraries and plain atomic loads are not trapped), so there are no memory scheduling points; for plain memory too, build it as docs/memory-preemption.md says".to_string())
    } else if profile.touched.is_empty() {
        Some(format!("--preempt-on memory: the profiling run saw no instrumented load or store, so there are no memory scheduling points: build the program with {} (plain memory and atomics), or clang -fsanitize-coverage=trace-pc-guard,trace-loads,trace-stores and link -ldara_cov (plain memory only; docs/memory-preemption.md)", crate::visibility::TSAN_BUILD))
    } else if overflowed {
        Some(format!("--preempt-on memory: the program touches more shared memory than dara tracks ({} granules profiled, {} watched at most); some racy addresses are not scheduling points", profile.touched.len(), MAX_WATCHED))
    } else {
        None
    };
    cfg.preempt.watch = watch;
    Ok(ProfileSummary {
        watched: cfg.preempt.watch.len(),
        touched: profile.touched.len(),
        dropped,
        steps: report.steps.len(),
        wall: report.wall,
        outcome: report.outcome.summary(),
        warning,
        overflowed,
        sources: profile.sources,
        atomic_sites: report.atomic_sites,
    })
}

/// The natural order: keep running the thread that ran last while it offers a `Run`; when it
/// blocks, yields or ends, move round-robin to the next thread by id. Never a timeout while a
/// thread can run.
#[derive(Default)]
pub struct NonPreemptive {
    last: Option<ThreadId>,
}

impl Decide for NonPreemptive {
    fn choose(&mut self, _step: u64, choices: &[Choice]) -> Result<usize, Divergence> {
        let runs = |c: &Choice| c.kind == dara_scheduler::ChoiceKind::Run;
        let yielding = |c: &Choice| matches!(c.op, Op::Yield | Op::EdgeQuantum | Op::Probe);
        let keep = self.last.and_then(|t| choices.iter().position(|c| c.thread == t && runs(c) && !yielding(c)));
        let next = || {
            let after = self.last.map_or(0, |t| t + 1);
            let candidates = || choices.iter().enumerate().filter(|(_, c)| runs(c));
            candidates()
                .filter(|(_, c)| c.thread >= after)
                .min_by_key(|(_, c)| c.thread)
                .or_else(|| candidates().min_by_key(|(_, c)| c.thread))
                .map(|(i, _)| i)
        };
        let index = keep.or_else(next).unwrap_or(0);
        self.last = Some(choices[index].thread);
        Ok(index)
    }
}

#[cfg(test)]
mod tests {
    use dara_scheduler::ChoiceKind;

    use super::*;

    fn choice(thread: ThreadId, op: Op, kind: ChoiceKind) -> Choice {
        Choice { thread, kind, alt: 0, op, obj: 0 }
    }

    #[test]
    fn keeps_the_running_thread_and_rotates_on_yields_and_blocks() {
        let mut d = NonPreemptive::default();
        let two = [choice(0, Op::MutexLock, ChoiceKind::Run), choice(1, Op::MemoryRead, ChoiceKind::Run)];
        assert_eq!(d.choose(0, &two).unwrap(), 0);
        assert_eq!(d.choose(1, &two).unwrap(), 0, "no preemption while thread 0 can run");
        let yielding = [choice(0, Op::EdgeQuantum, ChoiceKind::Run), choice(1, Op::MemoryRead, ChoiceKind::Run)];
        assert_eq!(d.choose(2, &yielding).unwrap(), 1, "a yield hands over");
        let sleepers = [choice(0, Op::Sleep, ChoiceKind::Timeout), choice(1, Op::MemoryWrite, ChoiceKind::Run), choice(2, Op::Yield, ChoiceKind::Run)];
        assert_eq!(d.choose(3, &sleepers).unwrap(), 1);
        let only_timeout = [choice(0, Op::Sleep, ChoiceKind::Timeout)];
        assert_eq!(d.choose(4, &only_timeout).unwrap(), 0, "a timeout when nothing else is left");
        let wrap = [choice(0, Op::Yield, ChoiceKind::Run), choice(1, Op::Yield, ChoiceKind::Run)];
        assert_eq!(d.choose(5, &wrap).unwrap(), 1);
        assert_eq!(d.choose(6, &wrap).unwrap(), 0, "round-robin wraps around");
    }
}
