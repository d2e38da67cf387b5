//! Virtual time as the target sees it: which clocks dara answers, how a virtual time `v` reads
//! on each, and how timeouts given as `timespec`s become absolute virtual deadlines.
//!
//! Shared by the symbol hooks and the SIGSYS handler, so nothing here allocates or locks.
use dara_abi::{Deadline, Request, NO_DEADLINE, REALTIME_EPOCH_NS};
use libc::timespec;

use crate::gate::Gated;


pub use dara_abi::clock::ClockBase;

/// A clock's readings with this run's realtime epoch (`dara_abi::clock` holds the arithmetic,
/// shared with the ptrace agent).
pub trait Reading {
    /// What this clock reads at virtual time `v`.
    fn reading(self, v: u64) -> u64;
    /// The virtual time at which this clock reads `abs_ns` (0 if that lies before the epoch).
    fn to_virtual(self, abs_ns: u64) -> u64;
}

impl Reading for ClockBase {
    fn reading(self, v: u64) -> u64 {
        self.read_at(v, realtime_epoch_ns())
    }

    fn to_virtual(self, abs_ns: u64) -> u64 {
        self.virtual_time_of(abs_ns, realtime_epoch_ns())
    }
}

/// What `CLOCK_REALTIME` reads at virtual time 0: the run's setting, [`REALTIME_EPOCH_NS`] when
/// no region is mapped or the scheduler wrote none.
fn realtime_epoch_ns() -> u64 {
    match crate::region::header().map(|h| h.realtime_epoch_ns.load(core::sync::atomic::Ordering::Relaxed)) {
        Some(epoch) if epoch != 0 => epoch,
        _ => REALTIME_EPOCH_NS,
    }
}

/// A valid `timespec` as nanoseconds; `None` for a negative or non-normalised one (EINVAL).
pub fn timespec_ns(ts: &timespec) -> Option<u64> {
    dara_abi::clock::timespec_ns(ts.tv_sec, ts.tv_nsec)
}

/// Nanoseconds as a `timespec`.
pub fn ns_timespec(ns: u64) -> timespec {
    let (tv_sec, tv_nsec) = dara_abi::clock::ns_timespec(ns);
    timespec { tv_sec, tv_nsec }
}

/// The virtual deadline of an absolute timeout on `base`; `None` for an invalid timespec.
pub fn absolute_deadline(base: ClockBase, abstime: &timespec) -> Option<u64> {
    timespec_ns(abstime).map(|ns| base.to_virtual(ns))
}

/// The virtual deadline of an optional absolute timeout (null means wait forever).
pub fn optional_deadline(base: ClockBase, abstime: Option<&timespec>) -> Option<u64> {
    match abstime {
        None => Some(NO_DEADLINE),
        Some(ts) => absolute_deadline(base, ts),
    }
}

/// Reads `base` at the current virtual time: a `ClockRead` scheduling point. The grant's result
/// is the node's wall-clock skew (a `ClockSkew` fault), which only realtime clocks show. With
/// coarse steps (a recording, never a cluster: no skew) most reads are answered from the
/// thread's last grant instead ([`crate::gate::clock_read_unposted`]).
pub fn read(gate: &Gated, base: ClockBase) -> u64 {
    let ns = read_posted_or_not(gate, base);
    if base == ClockBase::CpuTime {
        gate.note_cpu_time_read();
    }
    ns
}

fn read_posted_or_not(gate: &Gated, base: ClockBase) -> u64 {
    if crate::gate::clock_read_unposted() {
        return base.reading(gate.now());
    }
    let grant = gate.post(Request::ClockRead);
    let reading = base.reading(grant.now_ns);
    match base {
        ClockBase::Realtime => reading.saturating_add_signed(grant.result),
        ClockBase::Monotonic | ClockBase::CpuTime => reading,
    }
}

/// How a sleep ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slept {
    /// The deadline came.
    Full,
    /// A caught signal ended it (an `Interrupt`) this many nanoseconds before its deadline.
    Interrupted { left_ns: u64 },
}

/// Sleeps until the virtual `deadline`: a `Sleep` scheduling point, which a caught signal may end
/// early (the caller then runs the handler and fails with EINTR: sleeps are never restarted).
pub fn sleep_until(gate: &Gated, deadline: u64) -> Slept {
    let grant = gate.post(Request::Sleep { deadline: Deadline::from_ns(deadline) });
    if grant.result == crate::interrupt::INTERRUPTED {
        Slept::Interrupted { left_ns: deadline.saturating_sub(grant.now_ns) }
    } else {
        Slept::Full
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clocks_map_to_bases() {
        assert_eq!(
            ClockBase::of(libc::CLOCK_REALTIME),
            Some(ClockBase::Realtime)
        );
        assert_eq!(
            ClockBase::of(libc::CLOCK_BOOTTIME),
            Some(ClockBase::Monotonic)
        );
        assert_eq!(
            ClockBase::of(libc::CLOCK_THREAD_CPUTIME_ID),
            Some(ClockBase::CpuTime)
        );
        assert_eq!(ClockBase::of(libc::CLOCK_REALTIME_ALARM), None);
    }

    #[test]
    fn deadlines_round_trip() {
        let v = 12_345_678_901;
        let abs = ns_timespec(ClockBase::Realtime.reading(v));
        assert_eq!(absolute_deadline(ClockBase::Realtime, &abs), Some(v));
        let past = timespec {
            tv_sec: 1,
            tv_nsec: 0,
        };
        assert_eq!(absolute_deadline(ClockBase::Monotonic, &past), Some(0));
        let bad = timespec {
            tv_sec: 1,
            tv_nsec: 1_000_000_000,
        };
        assert_eq!(timespec_ns(&bad), None);
    }
}
