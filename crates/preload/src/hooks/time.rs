//! Yielding, sleeping and reading clocks: all answered from the virtual clock. Sleeps become
//! timers in the model and always sleep the full time (never interrupted, `rem` zeroed).
use dara_abi::Op;
use libc::{c_int, c_uint, c_void, clockid_t, time_t, timespec, timeval, useconds_t};

use super::{set_errno, Obj};
use crate::gate::Gated;
use crate::real;
use crate::vclock::{self, ClockBase};

const NS_PER_SEC: u64 = 1_000_000_000;

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
    let deadline = if flags & libc::TIMER_ABSTIME != 0 {
        vclock::absolute_deadline(base, req)
    } else {
        vclock::timespec_ns(req).map(|d| gate.deadline_after(d))
    };
    let Some(deadline) = deadline else {
        return Some(libc::EINVAL);
    };
    vclock::sleep_until(gate, deadline);
    if flags & libc::TIMER_ABSTIME == 0 {
        if let Some(rem) = rem.get_mut() {
            *rem = vclock::ns_timespec(0);
        }
    }
    Some(0)
}

#[no_mangle]
pub unsafe extern "C" fn sched_yield() -> c_int {
    match Gated::enter() {
        Some(gate) => {
            gate.post(Op::Yield, [0; 4]);
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
        Some(gate) => {
            vclock::sleep_until(&gate, gate.deadline_after(usec as u64 * 1_000));
            0
        }
        // SAFETY: plain integer argument.
        None => unsafe { real::usleep(usec) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn sleep(secs: c_uint) -> c_uint {
    match Gated::enter() {
        Some(gate) => {
            vclock::sleep_until(&gate, gate.deadline_after(secs as u64 * NS_PER_SEC));
            0
        }
        // SAFETY: plain integer argument.
        None => unsafe { real::sleep(secs) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn clock_gettime(clock: clockid_t, ts: *mut timespec) -> c_int {
    if let (Some(base), Some(gate)) = (ClockBase::of(clock), Gated::enter()) {
        let ns = vclock::read(&gate, base);
        // SAFETY: the program's own out-parameter.
        match unsafe { Obj::new(ts) }.get_mut() {
            Some(ts) => *ts = vclock::ns_timespec(ns),
            None => {
                set_errno(libc::EFAULT);
                return -1;
            }
        }
        return 0;
    }
    // SAFETY: the program's own arguments, forwarded unchanged.
    unsafe { real::clock_gettime(clock, ts) }
}

#[no_mangle]
pub unsafe extern "C" fn gettimeofday(tv: *mut timeval, tz: *mut c_void) -> c_int {
    let Some(gate) = Gated::enter() else {
        // SAFETY: the program's own arguments, forwarded unchanged.
        return unsafe { real::gettimeofday(tv, tz) };
    };
    let ns = vclock::read(&gate, ClockBase::Realtime);
    // SAFETY: the program's own out-parameter.
    if let Some(tv) = unsafe { Obj::new(tv) }.get_mut() {
        tv.tv_sec = (ns / NS_PER_SEC) as time_t;
        tv.tv_usec = (ns % NS_PER_SEC / 1_000) as libc::suseconds_t;
    }
    // SAFETY: the program's own out-parameter (a struct timezone of two ints).
    if let Some(tz) = unsafe { Obj::new(tz as *mut [c_int; 2]) }.get_mut() {
        *tz = [0, 0];
    }
    0
}

#[no_mangle]
pub unsafe extern "C" fn time(t: *mut time_t) -> time_t {
    let Some(gate) = Gated::enter() else {
        // SAFETY: the program's own argument, forwarded unchanged.
        return unsafe { real::time(t) };
    };
    let secs = (vclock::read(&gate, ClockBase::Realtime) / NS_PER_SEC) as time_t;
    // SAFETY: the program's own out-parameter.
    if let Some(t) = unsafe { Obj::new(t) }.get_mut() {
        *t = secs;
    }
    secs
}
