//! The time and CPU system calls, answered in kernel form (a result or `-errno`) from the
//! virtual clock and from dara's settings. Shared by the SIGSYS handler ([`crate::trap`]: raw
//! `syscall` instructions and libc's own fallbacks) and the vDSO thunks ([`crate::vdso`]: code
//! that calls the vDSO, libc included), so that every path a program can take to the time reads
//! the same clock.
//!
//! Two kinds of answer:
//! * [`gated`]: clock reads (`clock_gettime`, `gettimeofday`, `time`, `times`, `getrusage`,
//!   `sysinfo` for its uptime) are `ClockRead` scheduling points and need a gated thread; on any
//!   other thread the caller runs the real call.
//! * [`setting`]: answers that are dara settings, the same in every run, needing no slot:
//!   `clock_getres` of a virtual clock (1 ns: every virtual clock, coarse ones included, moves in
//!   nanoseconds) and `getcpu` (CPU 0, node 0).
//!
//! `sysinfo` shows the boot-time clock as its uptime and the run's memory snapshot
//! ([`dara_abi::system_info`] says what each field reads).
//!
//! CPU time (`CLOCK_*_CPUTIME_ID`, `times`, `getrusage`) reads the run's virtual time `v`: every
//! thread and process is charged all of it, as user time; system time, children's times and
//! the other `rusage` counters (max RSS, faults, context switches) read zero.
//!
//! Runs in signal context: no allocation, no locks.
use dara_abi::system_info::{self, SysInfo};
use libc::{c_long, timespec, timeval};

use crate::gate::Gated;
use crate::trap::user_mut;
use crate::vclock::{self, ClockBase, Reading};

const NS_PER_SEC: u64 = 1_000_000_000;
/// The kernel's `USER_HZ`: `times` counts in these ticks whatever `CONFIG_HZ` is.
const USER_HZ: u64 = 100;
/// Resolution of every virtual clock.
const VIRTUAL_RESOLUTION_NS: u64 = 1;
/// The CPU and NUMA node every thread runs on, as `getcpu` reports them.
pub const VIRTUAL_CPU: u32 = 0;
pub const VIRTUAL_NODE: u32 = 0;

const EFAULT: i64 = -(libc::EFAULT as i64);

/// Nanoseconds as a `timeval`.
pub fn ns_timeval(ns: u64) -> timeval {
    timeval { tv_sec: (ns / NS_PER_SEC) as libc::time_t, tv_usec: (ns % NS_PER_SEC / 1_000) as libc::suseconds_t }
}

/// Answers a clock read on a gated thread; `None` for a call that is not one (or a clock dara
/// leaves alone): the caller runs it for real.
pub fn gated(gate: &Gated, nr: c_long, a: [u64; 6]) -> Option<i64> {
    Some(match nr {
        libc::SYS_clock_gettime => {
            let ns = vclock::read(gate, ClockBase::of(a[0] as libc::clockid_t)?);
            // SAFETY: the program passed a timespec to fill.
            match unsafe { user_mut::<timespec>(a[1]) } {
                Some(ts) => {
                    *ts = vclock::ns_timespec(ns);
                    0
                }
                None => EFAULT,
            }
        }
        libc::SYS_gettimeofday => {
            let ns = vclock::read(gate, ClockBase::Realtime);
            // SAFETY: the program passed a timeval to fill (or null).
            if let Some(tv) = unsafe { user_mut::<timeval>(a[0]) } {
                *tv = ns_timeval(ns);
            }
            // SAFETY: the program passed a struct timezone (two ints) to fill (or null).
            if let Some(tz) = unsafe { user_mut::<[i32; 2]>(a[1]) } {
                *tz = [0, 0];
            }
            0
        }
        libc::SYS_time => {
            let secs = (vclock::read(gate, ClockBase::Realtime) / NS_PER_SEC) as i64;
            // SAFETY: the program passed a time_t to fill (or null).
            if let Some(t) = unsafe { user_mut::<libc::time_t>(a[0]) } {
                *t = secs;
            }
            secs
        }
        libc::SYS_times => {
            let v = vclock::read(gate, ClockBase::CpuTime);
            let ticks = |ns: u64| (ns / (NS_PER_SEC / USER_HZ)) as libc::clock_t;
            // SAFETY: the program passed a struct tms to fill (or null).
            if let Some(tms) = unsafe { user_mut::<libc::tms>(a[0]) } {
                *tms = libc::tms { tms_utime: ticks(v), tms_stime: 0, tms_cutime: 0, tms_cstime: 0 };
            }
            ticks(ClockBase::Monotonic.reading(v)) as i64
        }
        libc::SYS_getrusage => {
            let who = a[0] as i32;
            if ![libc::RUSAGE_SELF, libc::RUSAGE_THREAD, libc::RUSAGE_CHILDREN].contains(&who) {
                return Some(-(libc::EINVAL as i64));
            }
            let v = vclock::read(gate, ClockBase::CpuTime);
            // SAFETY: the program passed a struct rusage to fill.
            let Some(usage) = (unsafe { user_mut::<libc::rusage>(a[1]) }) else { return Some(EFAULT) };
            // SAFETY: all-zero is a valid rusage.
            *usage = unsafe { core::mem::zeroed() };
            if who != libc::RUSAGE_CHILDREN {
                usage.ru_utime = ns_timeval(v);
            }
            0
        }
        libc::SYS_sysinfo => {
            let boottime = vclock::read(gate, ClockBase::Monotonic);
            let totals = crate::region::header().map_or(NO_MEMORY, |h| h.memory.load());
            // SAFETY: the program passed a struct sysinfo to fill (the kernel's layout).
            match unsafe { user_mut::<SysInfo>(a[0]) } {
                Some(info) => {
                    *info = system_info::shown(totals, boottime);
                    0
                }
                None => EFAULT,
            }
        }
        _ => return None,
    })
}

/// Memory totals when no region is mapped (a gated thread always has one).
const NO_MEMORY: system_info::MemoryTotals = system_info::MemoryTotals { total_ram: 0, total_swap: 0, mem_unit: 1 };

/// Answers a call whose result is a dara setting; `None` for a call that is not one (or a
/// clock dara leaves alone).
pub fn setting(nr: c_long, a: [u64; 6]) -> Option<i64> {
    Some(match nr {
        libc::SYS_clock_getres => {
            ClockBase::of(a[0] as libc::clockid_t)?;
            // SAFETY: the program passed a timespec to fill (or null).
            if let Some(res) = unsafe { user_mut::<timespec>(a[1]) } {
                *res = vclock::ns_timespec(VIRTUAL_RESOLUTION_NS);
            }
            0
        }
        libc::SYS_getcpu => {
            // SAFETY: the program passed two unsigned ints to fill (either may be null).
            let (cpu, node) = unsafe { (user_mut::<u32>(a[0]), user_mut::<u32>(a[1])) };
            if let Some(cpu) = cpu {
                *cpu = VIRTUAL_CPU;
            }
            if let Some(node) = node {
                *node = VIRTUAL_NODE;
            }
            0
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeval_keeps_microseconds() {
        let tv = ns_timeval(3 * NS_PER_SEC + 456_789_123);
        assert_eq!((tv.tv_sec, tv.tv_usec), (3, 456_789));
    }

    #[test]
    fn getcpu_and_resolution_are_settings() {
        let (mut cpu, mut node) = (7u32, 7u32);
        let a = [&mut cpu as *mut u32 as u64, &mut node as *mut u32 as u64, 0, 0, 0, 0];
        assert_eq!(setting(libc::SYS_getcpu, a), Some(0));
        assert_eq!((cpu, node), (VIRTUAL_CPU, VIRTUAL_NODE));
        let mut res = timespec { tv_sec: 9, tv_nsec: 9 };
        let a = [libc::CLOCK_MONOTONIC_COARSE as u64, &mut res as *mut timespec as u64, 0, 0, 0, 0];
        assert_eq!(setting(libc::SYS_clock_getres, a), Some(0));
        assert_eq!((res.tv_sec, res.tv_nsec), (0, 1));
        assert_eq!(setting(libc::SYS_clock_getres, [libc::CLOCK_REALTIME_ALARM as u64, 0, 0, 0, 0, 0]), None);
    }
}
