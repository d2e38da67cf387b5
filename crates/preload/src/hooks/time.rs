//! Yielding, sleeping and reading clocks: all answered from the virtual clock. Sleeps become
//! timers in the model; a caught signal ends one early (an `Interrupt`), as in Linux: the handler
//! runs and `nanosleep`, `clock_nanosleep` and `usleep` fail with EINTR (the relative ones write
//! the time left into `rem`), `sleep` returns the seconds left; never restarted, `SA_RESTART` or
//! not. The clock reads share [`timecalls`] with the syscall trap and the vDSO thunks; so does
//! `sysinfo`, whose uptime is a clock read (`dara_abi::system_info` says what it shows).
use dara_abi::Request;
use libc::{c_int, c_uint, c_void, clockid_t, time_t, timespec, timeval, useconds_t};

use super::{set_errno, sigwait, Obj};
use crate::gate::Gated;
use crate::{real, sys, timecalls};
use crate::vclock::{self, ClockBase, Slept};

const NS_PER_SEC: u64 = 1_000_000_000;

/// Sleeps until `deadline`; the nanoseconds left when a signal ended the sleep, after its
/// handler ran.
fn sleep_to(gate: &Gated, deadline: u64) -> Option<u64> {
    match vclock::sleep_until(gate, deadline) {
        Slept::Full => None,
        Slept::Interrupted { left_ns } => {
            sigwait::run_handlers(gate, false);
            Some(left_ns)
        }
    }
}

/// `clock_nanosleep` semantics (returns an errno); `None` for a clock dara leaves alone.
pub fn clock_sleep(
    gate: &Gated,
    clock: clockid_t,
    flags: c_int,
    req: Obj<timespec>,
    rem: Obj<timespec>,
) -> Option<c_int> {
    let base = ClockBase::of(clock)?;
    let Some(req) = req.get() else {
        return Some(libc::EFAULT);
    };
    let absolute = flags & libc::TIMER_ABSTIME != 0;
    let deadline = if absolute {
        vclock::absolute_deadline(base, req)
    } else {
        vclock::timespec_ns(req).map(|d| gate.deadline_after(d))
    };
    let Some(deadline) = deadline else {
        return Some(libc::EINVAL);
    };
    let left = sleep_to(gate, deadline);
    if !absolute {
        if let Some(rem) = rem.get_mut() {
            *rem = vclock::ns_timespec(left.unwrap_or(0));
        }
    }
    Some(if left.is_some() { libc::EINTR } else { 0 })
}

#[no_mangle]
pub unsafe extern "C" fn sched_yield() -> c_int {
    match Gated::enter() {
        Some(gate) => {
            gate.post(Request::Yield);
            0
        }
        // SAFETY: no arguments.
        None => unsafe { real::sched_yield() },
    }
}

#[no_mangle]
pub unsafe extern "C" fn nanosleep(req: *const timespec, rem: *mut timespec) -> c_int {
    let Some(gate) = Gated::enter() else {
        // SAFETY: the program's own arguments, forwarded unchanged.
        return unsafe { real::nanosleep(req, rem) };
    };
    // SAFETY: the program's own arguments.
    let (req, rem) = unsafe { (Obj::from_const(req), Obj::new(rem)) };
    match clock_sleep(&gate, libc::CLOCK_MONOTONIC, 0, req, rem) {
        Some(0) | None => 0,
        Some(e) => {
            set_errno(e);
            -1
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn clock_nanosleep(
    clock: clockid_t,
    flags: c_int,
    req: *const timespec,
    rem: *mut timespec,
) -> c_int {
    if let Some(gate) = Gated::enter() {
        // SAFETY: the program's own arguments.
        let (r, m) = unsafe { (Obj::from_const(req), Obj::new(rem)) };
        if let Some(rc) = clock_sleep(&gate, clock, flags, r, m) {
            return rc;
        }
    }
    // SAFETY: the program's own arguments, forwarded unchanged.
    unsafe { real::clock_nanosleep(clock, flags, req, rem) }
}

#[no_mangle]
pub unsafe extern "C" fn usleep(usec: useconds_t) -> c_int {
    match Gated::enter() {
        Some(gate) => match sleep_to(&gate, gate.deadline_after(usec as u64 * 1_000)) {
            None => 0,
            Some(_) => {
                set_errno(libc::EINTR);
                -1
            }
        },
        // SAFETY: plain integer argument.
        None => unsafe { real::usleep(usec) },
    }
}

/// What `sleep` returns when a signal ended it `left_ns` early: the whole seconds left (glibc
/// returns the `tv_sec` of its `nanosleep`'s `rem`).
fn sleep_seconds_left(left_ns: u64) -> c_uint {
    c_uint::try_from(left_ns / NS_PER_SEC).unwrap_or(c_uint::MAX)
}

#[no_mangle]
pub unsafe extern "C" fn sleep(secs: c_uint) -> c_uint {
    match Gated::enter() {
        Some(gate) => sleep_to(&gate, gate.deadline_after(secs as u64 * NS_PER_SEC)).map_or(0, sleep_seconds_left),
        // SAFETY: plain integer argument.
        None => unsafe { real::sleep(secs) },
    }
}

/// A clock read answered by [`timecalls::gated`] as libc returns it: the value, or -1 with
/// `errno` set.
fn libc_result(rc: i64) -> i64 {
    if (-4095..0).contains(&rc) {
        set_errno(-rc as c_int);
        return -1;
    }
    rc
}

#[no_mangle]
pub unsafe extern "C" fn clock_gettime(clock: clockid_t, ts: *mut timespec) -> c_int {
    if let Some(gate) = Gated::enter() {
        if let Some(rc) = timecalls::gated(&gate, libc::SYS_clock_gettime, [clock as u64, ts as u64, 0, 0, 0, 0]) {
            return libc_result(rc) as c_int;
        }
    }
    // SAFETY: the program's own arguments, forwarded unchanged.
    unsafe { real::clock_gettime(clock, ts) }
}

#[no_mangle]
pub unsafe extern "C" fn gettimeofday(tv: *mut timeval, tz: *mut c_void) -> c_int {
    match Gated::enter().and_then(|gate| timecalls::gated(&gate, libc::SYS_gettimeofday, [tv as u64, tz as u64, 0, 0, 0, 0])) {
        Some(rc) => libc_result(rc) as c_int,
        // SAFETY: the program's own arguments, forwarded unchanged.
        None => unsafe { real::gettimeofday(tv, tz) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn time(t: *mut time_t) -> time_t {
    match Gated::enter().and_then(|gate| timecalls::gated(&gate, libc::SYS_time, [t as u64, 0, 0, 0, 0, 0])) {
        Some(rc) => libc_result(rc) as time_t,
        // SAFETY: the program's own argument, forwarded unchanged.
        None => unsafe { real::time(t) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn sysinfo(info: *mut libc::sysinfo) -> c_int {
    let a = [info as u64, 0, 0, 0, 0, 0];
    match Gated::enter().and_then(|gate| timecalls::gated(&gate, libc::SYS_sysinfo, a)) {
        Some(rc) => libc_result(rc) as c_int,
        // SAFETY: the program's own argument, forwarded unchanged (through the trampoline, so
        // not trapped again).
        None => libc_result(unsafe { sys::syscall(libc::SYS_sysinfo, &a[..1]) }) as c_int,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sleep_reports_the_whole_seconds_left() {
        assert_eq!(sleep_seconds_left(59 * NS_PER_SEC + NS_PER_SEC / 2), 59);
        assert_eq!(sleep_seconds_left(NS_PER_SEC - 1), 0);
        assert_eq!(sleep_seconds_left(3 * NS_PER_SEC), 3);
    }
}
