//! A monotonic clock with a resolution of a few milliseconds that reads no time-stamp counter.
//!
//! The scheduler thread runs with the counter disabled ([`crate::own_traps`]), so each precise
//! clock read there is a system call. Checks that only compare against limits of many
//! milliseconds (how long the token holder has run, the watchdog's grace) read
//! `CLOCK_MONOTONIC_COARSE` instead: the vDSO answers it from the last timer tick, without the
//! counter and without entering the kernel.
use std::time::Duration;

/// A point in coarse monotonic time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct CoarseInstant(Duration);

impl CoarseInstant {
    pub fn now() -> CoarseInstant {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: clock_gettime writes into the live timespec; the coarse clock always exists.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
        CoarseInstant(Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
    }

    /// Time from `earlier` to `self`, zero if `earlier` is later.
    pub fn since(self, earlier: CoarseInstant) -> Duration {
        self.0.saturating_sub(earlier.0)
    }
}
