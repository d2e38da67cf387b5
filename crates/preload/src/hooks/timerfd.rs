//! `timerfd_create`, `timerfd_settime`, `timerfd_gettime` on the virtual clock (docs/time.md,
//! "timerfd"): the program gets an eventfd where it asked for a timerfd, and the scheduler keeps
//! the timer. It writes the expirations into the eventfd once the virtual clock reaches the
//! deadline, so a `read` returns their count (and resets it), a non-blocking one with none fails
//! with EAGAIN, a blocking one waits in the model (it is a receive on an eventfd, see
//! [`super::net`]), and poll, epoll and select see the descriptor readable exactly when it holds
//! expirations. `TFD_CLOEXEC` and `TFD_NONBLOCK` are the eventfd's `EFD_CLOEXEC` and
//! `EFD_NONBLOCK`; a close, a `dup` or a `fork` does to the eventfd what it does to a timerfd.
//!
//! The three calls are posts the scheduler answers at once (no decision): it converts the
//! expiry to virtual time (it knows the timer's clock), and writes the previous or current
//! setting into the program's `struct itimerspec` itself. Shared by the symbol hooks and the
//! SIGSYS handler (raw system calls), so nothing here allocates or locks.
use dara_abi::{Addr, Request, TimerClock, TimerExpiry};
use libc::{c_int, c_long, clockid_t, itimerspec};

use super::set_errno;
use crate::fd::{self, Kind};
use crate::gate::Gated;
use crate::trap::user_ref;
use crate::{real, sys, vclock};

/// `TFD_TIMER_ABSTIME` and `TFD_TIMER_CANCEL_ON_SET` (`<sys/timerfd.h>`; not in the libc crate).
const TFD_TIMER_ABSTIME: c_int = 1;
const TFD_TIMER_CANCEL_ON_SET: c_int = 2;

fn errno(e: c_int) -> i64 {
    -i64::from(e)
}

/// The clock a timer on `clock` counts on; `None` for a clock a timerfd cannot have (EINVAL).
fn timer_clock(clock: clockid_t) -> Option<TimerClock> {
    match clock {
        libc::CLOCK_REALTIME | libc::CLOCK_REALTIME_ALARM => Some(TimerClock::Realtime),
        libc::CLOCK_MONOTONIC | libc::CLOCK_BOOTTIME | libc::CLOCK_BOOTTIME_ALARM => Some(TimerClock::Monotonic),
        _ => None,
    }
}

/// `timerfd_create` in kernel form: the new descriptor or `-errno`.
pub fn create(gate: &Gated, clock: clockid_t, flags: c_int) -> i64 {
    let Some(clock) = timer_clock(clock) else { return errno(libc::EINVAL) };
    if flags & !(libc::TFD_CLOEXEC | libc::TFD_NONBLOCK) != 0 {
        return errno(libc::EINVAL);
    }
    // TFD_CLOEXEC and TFD_NONBLOCK are O_CLOEXEC and O_NONBLOCK, as EFD_CLOEXEC and EFD_NONBLOCK are.
    // SAFETY: eventfd2 takes an initial count and flags.
    let fd = unsafe { sys::syscall(libc::SYS_eventfd2, &[0, flags as u64]) };
    if fd < 0 {
        return fd;
    }
    let fd = fd as c_int;
    fd::opened(fd, Kind::Net);
    let rc = gate.post(Request::TimerCreate { fd, clock }).result;
    if rc < 0 {
        fd::closed(fd);
        sys::close(fd);
        return rc;
    }
    i64::from(fd)
}

/// `timerfd_settime` in kernel form: 0 or `-errno`. `old` may be null.
pub fn settime(gate: &Gated, fd: c_int, flags: c_int, new: Option<&itimerspec>, old: u64) -> i64 {
    if flags & !(TFD_TIMER_ABSTIME | TFD_TIMER_CANCEL_ON_SET) != 0 {
        return errno(libc::EINVAL);
    }
    let Some(new) = new else { return errno(libc::EFAULT) };
    let (Some(value), Some(interval)) = (vclock::timespec_ns(&new.it_value), vclock::timespec_ns(&new.it_interval)) else {
        return errno(libc::EINVAL);
    };
    let expiry = match value {
        0 => TimerExpiry::Disarmed,
        ns if flags & TFD_TIMER_ABSTIME != 0 => TimerExpiry::At(ns),
        ns => TimerExpiry::After(ns),
    };
    gate.post(Request::TimerSet { fd, expiry, interval, old: Addr(old) }).result
}

/// `timerfd_gettime` in kernel form: 0 or `-errno`.
pub fn gettime(gate: &Gated, fd: c_int, current: u64) -> i64 {
    if current == 0 {
        return errno(libc::EFAULT);
    }
    gate.post(Request::TimerGet { fd, current: Addr(current) }).result
}

/// A trapped timerfd system call on a gated thread; `None` for any other call.
pub fn trapped(gate: &Gated, nr: c_long, a: [u64; 6]) -> Option<i64> {
    Some(match nr {
        libc::SYS_timerfd_create => create(gate, a[0] as clockid_t, a[1] as c_int),
        libc::SYS_timerfd_settime => {
            // SAFETY: the program passed this itimerspec (or null) to timerfd_settime.
            let new = unsafe { user_ref::<itimerspec>(a[2]) };
            settime(gate, a[0] as c_int, a[1] as c_int, new, a[3])
        }
        libc::SYS_timerfd_gettime => gettime(gate, a[0] as c_int, a[1]),
        _ => return None,
    })
}

/// A kernel-form answer as libc returns it: the value, or -1 with `errno` set.
fn libc_result(rc: i64) -> c_int {
    if rc < 0 {
        set_errno(-rc as c_int);
        return -1;
    }
    rc as c_int
}

#[no_mangle]
pub unsafe extern "C" fn timerfd_create(clock: clockid_t, flags: c_int) -> c_int {
    match Gated::enter() {
        Some(gate) => libc_result(create(&gate, clock, flags)),
        // SAFETY: plain integers.
        None => unsafe { real::timerfd_create(clock, flags) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn timerfd_settime(fd: c_int, flags: c_int, new: *const itimerspec, old: *mut itimerspec) -> c_int {
    match Gated::enter() {
        // SAFETY: the program's own pointer, valid or null by timerfd_settime's contract.
        Some(gate) => libc_result(settime(&gate, fd, flags, unsafe { new.as_ref() }, old as u64)),
        // SAFETY: the program's own arguments, forwarded unchanged.
        None => unsafe { real::timerfd_settime(fd, flags, new, old) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn timerfd_gettime(fd: c_int, current: *mut itimerspec) -> c_int {
    match Gated::enter() {
        Some(gate) => libc_result(gettime(&gate, fd, current as u64)),
        // SAFETY: the program's own arguments, forwarded unchanged.
        None => unsafe { real::timerfd_gettime(fd, current) },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timerfd_clocks_map_to_virtual_bases() {
        assert_eq!(timer_clock(libc::CLOCK_REALTIME), Some(TimerClock::Realtime));
        assert_eq!(timer_clock(libc::CLOCK_BOOTTIME), Some(TimerClock::Monotonic));
        assert_eq!(timer_clock(libc::CLOCK_MONOTONIC), Some(TimerClock::Monotonic));
        assert_eq!(timer_clock(libc::CLOCK_PROCESS_CPUTIME_ID), None, "the kernel refuses CPU-time timerfds");
    }
}
