//! Condition variables, barriers and `pthread_once`: entirely modelled. The real wait functions
//! are never called (they would block in the kernel); the real mutex of a condition wait is
//! released before the post and re-taken after the grant, when the model says it is free.
//!
//! A caught signal does not end a condition wait, as in glibc: the model interrupts it (an
//! `Interrupt`), the handler runs here, inside the wait, and the thread posts the same wait
//! again, which resumes it where it stood (woken if the handler signalled the condvar).
use core::sync::atomic::{AtomicI32, AtomicU32, Ordering};

use dara_abi::{Addr, Deadline, Request, NO_DEADLINE};
use libc::{
    c_int, c_uint, clockid_t, pthread_barrier_t, pthread_barrierattr_t, pthread_cond_t,
    pthread_mutex_t, pthread_once_t, timespec,
};

use super::sync::{deadline_on, kind};
use super::Obj;
use crate::gate::Gated;
use crate::real::{self, InitRoutine};

/// Byte offset of glibc's `__wrefs` in `pthread_cond_t`; bit 1 set means CLOCK_MONOTONIC.
const COND_WREFS_OFFSET: usize = 36;
const COND_CLOCK_MONOTONIC_MASK: u32 = 2;

/// The clock a condvar's `pthread_cond_timedwait` measures against.
fn cond_clock(c: Obj<pthread_cond_t>) -> clockid_t {
    let Some(cond) = c.get() else {
        return libc::CLOCK_REALTIME;
    };
    // SAFETY: `pthread_cond_t` is 48 bytes on x86_64, 4-aligned at offset 36; read atomically.
    let wrefs = unsafe {
        &*((cond as *const pthread_cond_t as *const u8).add(COND_WREFS_OFFSET) as *const AtomicU32)
    };
    if wrefs.load(Ordering::Relaxed) & COND_CLOCK_MONOTONIC_MASK != 0 {
        libc::CLOCK_MONOTONIC
    } else {
        libc::CLOCK_REALTIME
    }
}

/// `pthread_cond_wait` / `timedwait` / `clockwait` with a virtual deadline.
pub fn cond_wait(
    gate: &Gated,
    c: Obj<pthread_cond_t>,
    m: Obj<pthread_mutex_t>,
    deadline: u64,
) -> c_int {
    let mutex_kind = kind(m);
    // SAFETY: the program's mutex, which it must hold to wait.
    let rc = unsafe { real::pthread_mutex_unlock(m.ptr()) };
    if rc != 0 {
        return rc;
    }
    let wait = Request::CondWait { cond: Addr(c.addr()), mutex: Addr(m.addr()), deadline: Deadline::from_ns(deadline), mutex_kind };
    let mut grant = gate.post(wait);
    while grant.result == super::sigwait::INTERRUPTED {
        super::sigwait::run_handlers(gate, false);
        grant = gate.post(wait);
    }
    // Signalled or timed out: either way the model has given the mutex back to this thread.
    // SAFETY: the program's mutex, free according to the model.
    unsafe { real::pthread_mutex_lock(m.ptr()) };
    grant.result as c_int
}

pub fn cond_timedwait(
    gate: &Gated,
    c: Obj<pthread_cond_t>,
    m: Obj<pthread_mutex_t>,
    clock: clockid_t,
    abstime: Obj<timespec>,
) -> c_int {
    match deadline_on(clock, abstime) {
        Ok(deadline) => cond_wait(gate, c, m, deadline),
        Err(e) => e,
    }
}

#[no_mangle]
pub unsafe extern "C" fn pthread_cond_wait(
    c: *mut pthread_cond_t,
    m: *mut pthread_mutex_t,
) -> c_int {
    match Gated::enter() {
        // SAFETY: the program's own arguments.
        Some(gate) => unsafe { cond_wait(&gate, Obj::new(c), Obj::new(m), NO_DEADLINE) },
        // SAFETY: the program's own arguments, forwarded unchanged.
        None => unsafe { real::pthread_cond_wait(c, m) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn pthread_cond_timedwait(
    c: *mut pthread_cond_t,
    m: *mut pthread_mutex_t,
    abstime: *const timespec,
) -> c_int {
    match Gated::enter() {
        // SAFETY: the program's own arguments.
        Some(gate) => unsafe {
            let c = Obj::new(c);
            cond_timedwait(
                &gate,
                c,
                Obj::new(m),
                cond_clock(c),
                Obj::from_const(abstime),
            )
        },
        // SAFETY: the program's own arguments, forwarded unchanged.
        None => unsafe { real::pthread_cond_timedwait(c, m, abstime) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn pthread_cond_clockwait(
    c: *mut pthread_cond_t,
    m: *mut pthread_mutex_t,
    clock: clockid_t,
    abstime: *const timespec,
) -> c_int {
    match Gated::enter() {
        // SAFETY: the program's own arguments.
        Some(gate) => unsafe {
            cond_timedwait(
                &gate,
                Obj::new(c),
                Obj::new(m),
                clock,
                Obj::from_const(abstime),
            )
        },
        // SAFETY: the program's own arguments, forwarded unchanged.
        None => unsafe { real::pthread_cond_clockwait(c, m, clock, abstime) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn pthread_cond_signal(c: *mut pthread_cond_t) -> c_int {
    match Gated::enter() {
        Some(gate) => gate.post(Request::CondSignal { cond: Addr(c as u64) }).result as c_int,
        // SAFETY: the program's own argument, forwarded unchanged.
        None => unsafe { real::pthread_cond_signal(c) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn pthread_cond_broadcast(c: *mut pthread_cond_t) -> c_int {
    match Gated::enter() {
        Some(gate) => gate.post(Request::CondBroadcast { cond: Addr(c as u64) }).result as c_int,
        // SAFETY: the program's own argument, forwarded unchanged.
        None => unsafe { real::pthread_cond_broadcast(c) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn pthread_barrier_init(
    b: *mut pthread_barrier_t,
    attr: *const pthread_barrierattr_t,
    count: c_uint,
) -> c_int {
    // SAFETY: the program's own arguments, forwarded unchanged.
    let rc = unsafe { real::pthread_barrier_init(b, attr, count) };
    if rc == 0 {
        if let Some(gate) = Gated::enter() {
            gate.post(Request::BarrierInit { barrier: Addr(b as u64), count });
        }
    }
    rc
}

#[no_mangle]
pub unsafe extern "C" fn pthread_barrier_wait(b: *mut pthread_barrier_t) -> c_int {
    match Gated::enter() {
        Some(gate) => gate.post(Request::BarrierWait { barrier: Addr(b as u64) }).result as c_int,
        // SAFETY: the program's own argument, forwarded unchanged.
        None => unsafe { real::pthread_barrier_wait(b) },
    }
}

/// glibc's `__PTHREAD_ONCE_DONE`: the bit of a `pthread_once_t` set once its routine has run.
const ONCE_DONE: i32 = 2;

/// The `pthread_once_t` word, read and written atomically (`None` for null).
fn once_word<'a>(o: Obj<pthread_once_t>) -> Option<&'a AtomicI32> {
    let word = o.get()?;
    // SAFETY: `pthread_once_t` is a 4-aligned int that glibc itself accesses atomically.
    Some(unsafe { &*(word as *const pthread_once_t as *const AtomicI32) })
}

/// `pthread_once`: the model picks the one caller that runs `init`; the others wait in the model
/// until `OnceDone`. The init routine runs outside the preload (it is user code).
///
/// Once the routine has run, the hook marks the object done the way glibc does, and a call that
/// finds it done returns at once without a post: it only reads a value nobody changes again, so
/// it commutes with everything (OpenSSL calls `pthread_once` on every entry to its init
/// functions: about a thousand times while redis-server starts). Marking it done also keeps
/// glibc's own `pthread_once` (uncontrolled code, a forked child) from running it again, and a
/// routine that ran before dara took control counts as done.
pub fn once(gate: Gated, o: Obj<pthread_once_t>, init: InitRoutine) -> c_int {
    if once_word(o).is_some_and(|w| w.load(Ordering::Acquire) & ONCE_DONE != 0) {
        return 0;
    }
    if gate.post(Request::OnceBegin { once: Addr(o.addr()) }).result != 1 {
        return 0;
    }
    drop(gate);
    init();
    if let Some(gate) = Gated::enter() {
        gate.post(Request::OnceDone { once: Addr(o.addr()) });
    }
    if let Some(w) = once_word(o) {
        w.store(ONCE_DONE, Ordering::Release);
    }
    0
}

#[no_mangle]
pub unsafe extern "C" fn pthread_once(o: *mut pthread_once_t, init: InitRoutine) -> c_int {
    match Gated::enter() {
        // SAFETY: the program's own argument.
        Some(gate) => once(gate, unsafe { Obj::new(o) }, init),
        // SAFETY: the program's own arguments, forwarded unchanged.
        None => unsafe { real::pthread_once(o, init) },
    }
}
