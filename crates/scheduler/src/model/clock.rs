//! The virtual clock of one execution.
//!
//! Time is a plain counter of virtual nanoseconds (`v` in the abi: the target sees
//! `REALTIME_EPOCH_NS + v` and `MONOTONIC_BASE_NS + v`). It only moves forward, in two ways:
//! every decision adds [`TICK_NS`] so a thread spinning on clock reads sees time pass, and firing
//! a timer (a `Timeout` choice) jumps to that timer's deadline. There is no idle "advance to the
//! next timer" step: timers are ordinary choices, so when nothing else is enabled the only
//! choices left are timeouts and taking one is the jump.
use super::TICK_NS;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct VirtualClock {
    now: u64,
}

impl VirtualClock {
    pub(crate) fn now(&self) -> u64 {
        self.now
    }

    /// One decision's worth of time.
    pub(crate) fn tick(&mut self) {
        self.now = self.now.saturating_add(TICK_NS);
    }

    /// Fires a timer: time becomes `deadline` unless it is already past it.
    pub(crate) fn advance_to(&mut self, deadline: u64) {
        self.now = self.now.max(deadline);
    }
}
