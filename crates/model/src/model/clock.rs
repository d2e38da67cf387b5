//! The virtual clock of one execution.
//!
//! Time is a plain counter of virtual nanoseconds (`v` in the abi: the target sees
//! the run's realtime epoch `+ v` and `MONOTONIC_BASE_NS + v`). It only moves forward: every decision
//! adds the step cost so a thread spinning on clock reads sees time pass; when nothing can run,
//! the driver moves it to the earliest pending deadline; a recording brings it up to real time
//! (see `Model::advance_clock`); and with `TimerPolicy::Any` firing a timer early jumps it to
//! that timer's deadline.
use crate::time::DEFAULT_STEP_NS;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct VirtualClock {
    now: u64,
    step_ns: u64,
}

impl Default for VirtualClock {
    fn default() -> VirtualClock {
        VirtualClock::new(DEFAULT_STEP_NS)
    }
}

impl VirtualClock {
    pub(crate) fn new(step_ns: u64) -> VirtualClock {
        VirtualClock { now: 0, step_ns }
    }

    pub(crate) fn now(&self) -> u64 {
        self.now
    }

    /// One decision's worth of time.
    pub(crate) fn tick(&mut self) {
        self.now = self.now.saturating_add(self.step_ns);
    }

    /// Time becomes `t` unless it is already past it.
    pub(crate) fn advance_to(&mut self, t: u64) {
        self.now = self.now.max(t);
    }
}
