//! The virtual clock of one execution.
//!
//! Time is a plain counter of virtual nanoseconds (`v` in the abi: the target sees
//! the run's realtime epoch `+ v` and `MONOTONIC_BASE_NS + v`). It only moves forward: every decision
//! adds the step cost (on average; it varies from decision to decision, `time::step_cost`) so a
//! thread spinning on clock reads sees time pass; when nothing can run,
//! the driver moves it to the earliest pending deadline; a recording brings it up to real time
//! (see `Model::advance_clock`); and with `TimerPolicy::Any` firing a timer early jumps it to
//! that timer's deadline.
use crate::time::DEFAULT_STEP_NS;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct VirtualClock {
    now: u64,
    step_ns: u64,
    /// Decisions so far (each costs [`crate::time::step_cost`] of its number).
    decisions: u64,
}

impl Default for VirtualClock {
    fn default() -> VirtualClock {
        VirtualClock::new(DEFAULT_STEP_NS)
    }
}

impl VirtualClock {
    pub(crate) fn new(step_ns: u64) -> VirtualClock {
        VirtualClock { now: 0, step_ns, decisions: 0 }
    }

    pub(crate) fn now(&self) -> u64 {
        self.now
    }

    /// One decision's worth of time: `step_ns` on average, a little more or less from one
    /// decision to the next (see [`crate::time::step_cost`]).
    pub(crate) fn tick(&mut self) {
        self.now = self.now.saturating_add(crate::time::step_cost(self.decisions, self.step_ns));
        self.decisions += 1;
    }

    /// What the next decision will cost.
    #[cfg(test)]
    pub(crate) fn next_step_cost(&self) -> u64 {
        crate::time::step_cost(self.decisions, self.step_ns)
    }

    /// Time becomes `t` unless it is already past it.
    pub(crate) fn advance_to(&mut self, t: u64) {
        self.now = self.now.max(t);
    }
}
