//! Virtual time as a program reads it: which clocks dara answers, and how the run's virtual
//! time `v` (nanoseconds since the execution began) reads on each. Shared by the preload (its
//! hooks and SIGSYS handler) and the ptrace agent, so every path to the time reads one clock.
//!
//! * Realtime clocks read the run's realtime epoch ([`crate::Header::realtime_epoch_ns`]) `+ v`.
//! * Monotonic clocks (boot time included) read [`crate::MONOTONIC_BASE_NS`] `+ v`.
//! * CPU-time clocks read `v` itself: every thread is charged all of the run's time.
//!
//! Clock ids are the kernel's (`<linux/time.h>`), named here because this crate has no libc.

const NS_PER_SEC: u64 = 1_000_000_000;

/// In coarse mode (a recording), how many clock reads in a row a thread answers from its last
/// grant's virtual time before the next one posts: a thread spinning on the clock still yields,
/// and sees time move, every this many reads. The preload and the ptrace agent both count so.
pub const READS_PER_POST: u32 = 8;

/// Kernel clock ids.
pub mod id {
    pub const REALTIME: i32 = 0;
    pub const MONOTONIC: i32 = 1;
    pub const PROCESS_CPUTIME: i32 = 2;
    pub const THREAD_CPUTIME: i32 = 3;
    pub const MONOTONIC_RAW: i32 = 4;
    pub const REALTIME_COARSE: i32 = 5;
    pub const MONOTONIC_COARSE: i32 = 6;
    pub const BOOTTIME: i32 = 7;
    pub const TAI: i32 = 11;
}

/// The families of clocks dara virtualises.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClockBase {
    Realtime,
    Monotonic,
    CpuTime,
}

impl ClockBase {
    /// The base of kernel clock `clock`, or `None` for a clock dara leaves alone (alarms, a
    /// process's or thread's CPU clock named by pid).
    pub fn of(clock: i32) -> Option<ClockBase> {
        match clock {
            id::REALTIME | id::REALTIME_COARSE | id::TAI => Some(ClockBase::Realtime),
            id::MONOTONIC | id::MONOTONIC_RAW | id::MONOTONIC_COARSE | id::BOOTTIME => Some(ClockBase::Monotonic),
            id::PROCESS_CPUTIME | id::THREAD_CPUTIME => Some(ClockBase::CpuTime),
            _ => None,
        }
    }

    fn offset(self, realtime_epoch_ns: u64) -> u64 {
        match self {
            ClockBase::Realtime => realtime_epoch_ns,
            ClockBase::Monotonic => crate::MONOTONIC_BASE_NS,
            ClockBase::CpuTime => 0,
        }
    }

    /// What this clock reads at virtual time `v`, given the run's realtime epoch.
    pub fn read_at(self, v: u64, realtime_epoch_ns: u64) -> u64 {
        self.offset(realtime_epoch_ns).saturating_add(v)
    }

    /// The virtual time at which this clock reads `abs_ns` (0 if that lies before the epoch).
    pub fn virtual_time_of(self, abs_ns: u64, realtime_epoch_ns: u64) -> u64 {
        abs_ns.saturating_sub(self.offset(realtime_epoch_ns))
    }
}

/// A `timespec`'s fields as nanoseconds; `None` for a negative or non-normalised one (EINVAL).
pub fn timespec_ns(sec: i64, nsec: i64) -> Option<u64> {
    if sec < 0 || !(0..NS_PER_SEC as i64).contains(&nsec) {
        return None;
    }
    Some((sec as u64).saturating_mul(NS_PER_SEC).saturating_add(nsec as u64))
}

/// Nanoseconds as a `timespec`'s (seconds, nanoseconds).
pub fn ns_timespec(ns: u64) -> (i64, i64) {
    ((ns / NS_PER_SEC) as i64, (ns % NS_PER_SEC) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clocks_map_to_bases_and_read_round_trip() {
        assert_eq!(ClockBase::of(id::BOOTTIME), Some(ClockBase::Monotonic));
        assert_eq!(ClockBase::of(id::THREAD_CPUTIME), Some(ClockBase::CpuTime));
        assert_eq!(ClockBase::of(8), None); // CLOCK_REALTIME_ALARM
        let epoch = 1_790_000_000 * NS_PER_SEC;
        let read = ClockBase::Realtime.read_at(5, epoch);
        assert_eq!(ClockBase::Realtime.virtual_time_of(read, epoch), 5);
        assert_eq!(timespec_ns(1, NS_PER_SEC as i64), None);
        assert_eq!(ns_timespec(3 * NS_PER_SEC + 7), (3, 7));
    }
}
