//! POSIX semaphores: the model owns the count; the real semaphore is kept in step (a granted
//! wait takes a unit with `sem_trywait`, which then cannot fail; a post adds one).
//!
//! A caught signal ends a wait as in Linux (an `Interrupt`): the handler runs, then `sem_wait`
//! waits again if every handler asked for `SA_RESTART` (its untimed futex wait is restarted) and
//! otherwise fails with EINTR; `sem_timedwait`/`sem_clockwait` always fail with EINTR (the
//! kernel never restarts a timed futex wait once a handler ran).
use dara_abi::{Addr, Deadline, Request, NO_DEADLINE};
use libc::{c_int, c_uint, clockid_t, sem_t, timespec};

use super::sync::deadline_on;
use super::{set_errno, sigwait, Obj};
use crate::gate::Gated;
use crate::real;

/// Turns a model result into the `0` / `-1 + errno` convention of the sem functions.
fn finish(s: Obj<sem_t>, result: i64) -> c_int {
    if result != 0 {
        set_errno(result.unsigned_abs() as c_int);
        return -1;
    }
    // SAFETY: the program's semaphore, with a unit available according to the model.
    unsafe { real::sem_trywait(s.ptr()) }
}

pub fn sem_wait_until(gate: &Gated, s: Obj<sem_t>, deadline: u64) -> c_int {
    loop {
        let grant = gate.post(Request::SemWait { sem: Addr(s.addr()), deadline: Deadline::from_ns(deadline) });
        if grant.result == sigwait::INTERRUPTED && sigwait::run_handlers(gate, deadline == NO_DEADLINE) {
            continue;
        }
        return finish(s, grant.result);
    }
}

pub fn sem_timedwait_on(
    gate: &Gated,
    s: Obj<sem_t>,
    clock: clockid_t,
    abstime: Obj<timespec>,
) -> c_int {
    match deadline_on(clock, abstime) {
        Ok(deadline) => sem_wait_until(gate, s, deadline),
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn sem_init(s: *mut sem_t, pshared: c_int, value: c_uint) -> c_int {
    // SAFETY: the program's own arguments, forwarded unchanged.
    let rc = unsafe { real::sem_init(s, pshared, value) };
    if rc == 0 {
        if let Some(gate) = Gated::enter() {
            gate.post(Request::SemInit { sem: Addr(s as u64), value });
        }
    }
    rc
}

#[no_mangle]
pub unsafe extern "C" fn sem_wait(s: *mut sem_t) -> c_int {
    match Gated::enter() {
        // SAFETY: the program's own argument.
        Some(gate) => sem_wait_until(&gate, unsafe { Obj::new(s) }, NO_DEADLINE),
        // SAFETY: the program's own argument, forwarded unchanged.
        None => unsafe { real::sem_wait(s) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn sem_timedwait(s: *mut sem_t, abstime: *const timespec) -> c_int {
    match Gated::enter() {
        // SAFETY: the program's own arguments.
        Some(gate) => unsafe {
            sem_timedwait_on(
                &gate,
                Obj::new(s),
                libc::CLOCK_REALTIME,
                Obj::from_const(abstime),
            )
        },
        // SAFETY: the program's own arguments, forwarded unchanged.
        None => unsafe { real::sem_timedwait(s, abstime) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn sem_clockwait(
    s: *mut sem_t,
    clock: clockid_t,
    abstime: *const timespec,
) -> c_int {
    match Gated::enter() {
        // SAFETY: the program's own arguments.
        Some(gate) => unsafe {
            sem_timedwait_on(&gate, Obj::new(s), clock, Obj::from_const(abstime))
        },
        // SAFETY: the program's own arguments, forwarded unchanged.
        None => unsafe { real::sem_clockwait(s, clock, abstime) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn sem_trywait(s: *mut sem_t) -> c_int {
    match Gated::enter() {
        Some(gate) => {
            let grant = gate.post(Request::SemTryWait { sem: Addr(s as u64) });
            // SAFETY: the program's own argument.
            finish(unsafe { Obj::new(s) }, grant.result)
        }
        // SAFETY: the program's own argument, forwarded unchanged.
        None => unsafe { real::sem_trywait(s) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn sem_post(s: *mut sem_t) -> c_int {
    if let Some(gate) = Gated::enter() {
        let grant = gate.post(Request::SemPost { sem: Addr(s as u64) });
        if grant.result != 0 {
            set_errno(grant.result.unsigned_abs() as c_int);
            return -1;
        }
    }
    // SAFETY: the program's own argument, forwarded unchanged. No thread ever waits on the real
    // semaphore under dara, so this never wakes anyone in the kernel.
    unsafe { real::sem_post(s) }
}
