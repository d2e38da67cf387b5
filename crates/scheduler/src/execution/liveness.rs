//! The liveness walk, the mechanism half (`dara_model::liveness` has the settings and the marks;
//! docs/properties.md, "Liveness"): when the workload phase is over (`--run-for` reached, else the
//! step bound, or a critical-transition probe's `from_step`), dara writes the walk's start mark
//! into the SDK's pipe and waits until its reader has seen it; the `eventually` properties unmet
//! at that point are pending. If none is, the run ends as it would have. Otherwise the run goes on
//! without the workload's bounds for up to `steps` decisions, each picked by the walk itself
//! (uniform among the runnable threads, then among that thread's choices; faults only when
//! nothing else can run), or by the strategy in a replay, which follows the recorded walk. Every
//! [`CHECK_EVERY`] decisions another mark is written and waited for: all pending properties having
//! held ends the run as `Recovered`; a walk that spends its steps ends as `LivenessViolated`.
//! With `--eventually CMD` the property is that command: the cluster world runs it during the
//! walk, again after each failure, and its exit 0 ends the run as `Recovered`.
use std::io::Write;
use std::ops::ControlFlow;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use dara_model::liveness::{mark_line, LivenessConfig};
use dara_model::property::ExecutionProperties;

use super::driver::Execution;
use crate::choice::{Choice, ChoiceKind};
use crate::outcome::Outcome;

/// Decisions between two checks of the walk: a check costs a pipe round trip to the SDK line
/// reader, so a walk that recovers ends up to this many decisions after the evaluation that held.
pub const CHECK_EVERY: u64 = 8;

/// Longest wait for the SDK line reader to see a mark (it reads a pipe on a thread of its own).
const MARK_WAIT: Duration = Duration::from_secs(20);

/// The execution's property tally, filled by the SDK pipe's reader, with a signal for each line.
#[derive(Default)]
pub(super) struct PropertyLines {
    tally: Mutex<ExecutionProperties>,
    seen: Condvar,
}

impl PropertyLines {
    pub(super) fn record(&self, line: &[u8]) {
        if let Ok(mut p) = self.tally.lock() {
            p.record(line);
        }
        self.seen.notify_all();
    }

    /// The tally, once every line is in.
    pub(super) fn take(&self) -> ExecutionProperties {
        std::mem::take(&mut *self.tally.lock().unwrap_or_else(|poisoned| poisoned.into_inner()))
    }

    /// Waits until the reader has seen `mark`; then `look` at the tally. None if it did not come.
    fn after_mark<T>(&self, mark: u64, look: impl FnOnce(&ExecutionProperties) -> T) -> Option<T> {
        let guard = self.tally.lock().ok()?;
        let (guard, _) = self.seen.wait_timeout_while(guard, MARK_WAIT, |p| p.mark() < mark).ok()?;
        (guard.mark() >= mark).then(|| look(&guard))
    }
}

/// The walk's state in one execution.
pub(super) struct Walk {
    cfg: Option<LivenessConfig>,
    lines: Arc<PropertyLines>,
    /// dara's own copy of the SDK pipe's write end (closed at the end of the drive, so the reader
    /// sees the end of the pipe once the program's copies are gone).
    writer: Option<std::fs::File>,
    /// Decisions made before the walk started, once it has.
    started_at: Option<u64>,
    /// The workload's end was looked at and there was nothing to walk for.
    declined: bool,
    marks: u64,
    rng: u64,
    /// The first property pending at the start (named by a violation).
    first_pending: String,
    /// `--eventually CMD`: the property is that command exiting 0, which the cluster world runs
    /// during the walk and judges; no marks are written (the name is the command's).
    command: Option<String>,
}

impl Walk {
    pub(super) fn new(cfg: Option<LivenessConfig>, lines: Arc<PropertyLines>, writer: Option<std::fs::File>, random_seed: u64) -> Walk {
        let cfg = cfg.filter(|c| c.steps > 0);
        let salt = cfg.map_or(0, |c| c.salt);
        let rng = dara_abi::splitmix64(random_seed ^ dara_abi::splitmix64(salt ^ 0x6c69_7665_6e65_7373));
        Walk { cfg, lines, writer, started_at: None, declined: false, marks: 0, rng, first_pending: String::new(), command: None }
    }

    /// The walk's property is `command` exiting 0 (`--eventually`), not the SDK's lines.
    pub(super) fn with_command(mut self, command: Option<&[String]>) -> Walk {
        self.command = command.map(|argv| match argv {
            [sh, c, line] if sh == "/bin/sh" && c == "-c" => line.clone(),
            _ => argv.join(" "),
        });
        self
    }

    /// Decisions walked by step `step` (0 before the walk).
    pub(super) fn walked(&self, step: u64) -> u64 {
        self.started_at.map_or(0, |start| step.saturating_sub(start))
    }

    /// Most decisions the walk makes.
    pub(super) fn length(&self) -> u64 {
        self.cfg.map_or(0, |c| c.steps)
    }

    /// Without a walk (the driver's own tests).
    pub(super) fn off() -> Walk {
        Walk::new(None, Arc::default(), None, 0)
    }

    pub(super) fn walking(&self) -> bool {
        self.started_at.is_some()
    }

    /// Closes dara's copy of the SDK pipe.
    pub(super) fn close(&mut self) {
        self.writer = None;
    }

    /// Writes the next mark and waits for the reader to see it; then `look` at the tally.
    fn sync<T>(&mut self, look: impl FnOnce(&ExecutionProperties) -> T) -> Result<T, Outcome> {
        let lost = || Outcome::Hang { reason: format!("the liveness walk's mark did not come through dara's SDK pipe within {} s", MARK_WAIT.as_secs()) };
        self.marks += 1;
        let writer = self.writer.as_mut().ok_or_else(lost)?;
        writer.write_all(mark_line(self.marks).as_bytes()).map_err(|_| lost())?;
        self.lines.after_mark(self.marks, look).ok_or_else(lost)
    }

    /// The walk's pick among `choices`, or None when the strategy decides (no walk, or a replay).
    pub(super) fn pick(&mut self, choices: &[Choice]) -> Option<usize> {
        if !self.walking() || self.cfg.is_none_or(|c| c.follow_strategy) || choices.is_empty() {
            return None;
        }
        let runnable: Vec<usize> = (0..choices.len()).filter(|&i| choices[i].kind != ChoiceKind::Fault).collect();
        let pool = if runnable.is_empty() { (0..choices.len()).collect() } else { runnable };
        let mut threads: Vec<_> = pool.iter().map(|&i| choices[i].thread).collect();
        threads.dedup();
        threads.sort_unstable();
        threads.dedup();
        let thread = threads[self.next(threads.len())];
        let of_thread: Vec<usize> = pool.into_iter().filter(|&i| choices[i].thread == thread).collect();
        Some(of_thread[self.next(of_thread.len())])
    }

    fn next(&mut self, n: usize) -> usize {
        self.rng = dara_abi::splitmix64(self.rng);
        (self.rng % n as u64) as usize
    }
}

impl Execution<'_> {
    /// The walk's part of the turn's bounds, before the workload's: Continue(true) while walking
    /// (the workload's step and time bounds no longer apply), Continue(false) in the workload.
    pub(super) fn walk_bounds(&mut self) -> ControlFlow<Outcome, bool> {
        let step = self.steps.len() as u64;
        let Some(cfg) = self.walk.cfg else { return ControlFlow::Continue(false) };
        let Some(start) = self.walk.started_at else {
            let probe_end = cfg.from_step == Some(step);
            if probe_end || step >= self.cfg.max_steps {
                match self.start_walk() {
                    Ok(true) => return ControlFlow::Continue(true),
                    Err(outcome) => return ControlFlow::Break(outcome),
                    // A probe's prefix after which the properties hold: nothing to recover from.
                    Ok(false) if probe_end => return ControlFlow::Break(Outcome::Recovered { walk_steps: 0 }),
                    Ok(false) => {}
                }
            }
            return ControlFlow::Continue(false);
        };
        let walked = step - start;
        if self.walk.command.is_some() {
            // The cluster world ends a walk that recovered (the command exited 0).
            return if walked >= cfg.steps { ControlFlow::Break(self.violation(walked)) } else { ControlFlow::Continue(true) };
        }
        if walked == 0 || (!walked.is_multiple_of(CHECK_EVERY) && walked < cfg.steps) {
            return ControlFlow::Continue(true);
        }
        match self.walk.sync(|p| p.pending().is_some_and(|pending| pending.is_empty())) {
            Ok(true) => ControlFlow::Break(Outcome::Recovered { walk_steps: walked }),
            Ok(false) if walked >= cfg.steps => ControlFlow::Break(self.violation(walked)),
            Ok(false) => ControlFlow::Continue(true),
            Err(outcome) => ControlFlow::Break(outcome),
        }
    }

    /// The walk spent its `walked` decisions and the property never held.
    fn violation(&self, walked: u64) -> Outcome {
        Outcome::LivenessViolated { name: self.walk.first_pending.clone(), walk_steps: walked }
    }

    /// The workload is over: starts the walk if an `eventually` property is unmet now. Ok(false)
    /// when there is nothing to walk for (or no walk configured, or already declined).
    pub(super) fn start_walk(&mut self) -> Result<bool, Outcome> {
        if self.walk.cfg.is_none() || self.walk.declined || self.walk.walking() {
            return Ok(self.walk.walking());
        }
        if let Some(command) = &self.walk.command {
            // Pending by definition: the command has not run yet (the cluster world runs it).
            self.walk.first_pending = command.clone();
            self.walk.started_at = Some(self.steps.len() as u64);
            return Ok(true);
        }
        let first = self.walk.sync(|p| p.pending().and_then(|pending| pending.iter().next().cloned()))?;
        match first {
            Some(name) => {
                self.walk.first_pending = name;
                self.walk.started_at = Some(self.steps.len() as u64);
                Ok(true)
            }
            None => {
                self.walk.declined = true;
                Ok(false)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dara_abi::Op;

    fn choice(thread: u32, kind: ChoiceKind, alt: u32, op: Op) -> Choice {
        Choice { thread, kind, alt, op, obj: 0 }
    }

    fn walking(follow_strategy: bool) -> Walk {
        let mut walk = Walk::new(Some(LivenessConfig { steps: 100, salt: 0, from_step: None, follow_strategy }), Arc::default(), None, 7);
        walk.started_at = Some(0);
        walk
    }

    #[test]
    fn the_walk_is_fair_among_threads_not_choices_and_picks_faults_only_when_alone() {
        // Thread 1 offers three alternatives, thread 2 one, and a pause fault is on offer.
        let choices = [choice(1, ChoiceKind::Run, 0, Op::CondSignal), choice(1, ChoiceKind::Run, 1, Op::CondSignal), choice(1, ChoiceKind::Run, 2, Op::CondSignal), choice(2, ChoiceKind::Run, 0, Op::MutexLock), choice(2, ChoiceKind::Fault, 0, Op::Pause)];
        let mut walk = walking(false);
        let mut per_thread = [0u32; 3];
        for _ in 0..3000 {
            let i = walk.pick(&choices).unwrap();
            assert_ne!(choices[i].kind, ChoiceKind::Fault);
            per_thread[choices[i].thread as usize] += 1;
        }
        assert!((1300..1700).contains(&per_thread[2]), "{per_thread:?}");
        assert_eq!(walk.pick(&[choice(3, ChoiceKind::Fault, 0, Op::Pause)]), Some(0));
    }

    #[test]
    fn a_replay_and_the_workload_leave_the_decision_to_the_strategy() {
        let choices = [choice(1, ChoiceKind::Run, 0, Op::MutexLock)];
        assert_eq!(walking(true).pick(&choices), None);
        assert_eq!(Walk::off().pick(&choices), None);
        let mut before = walking(false);
        before.started_at = None;
        assert_eq!(before.pick(&choices), None);
    }
}
