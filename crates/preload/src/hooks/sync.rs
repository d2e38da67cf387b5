//! Mutexes and reader-writer locks. The model decides who gets the lock (and whether a timed
//! acquisition times out); the real object is then taken or released so it stays consistent,
//! which never blocks because the model only grants an acquisition of a free lock.
//!
//! A single-threaded process's private locks (every thread's, in a recording) are taken and
//! released without a post (see [`solo`](crate::solo)): the real try-variant runs, and the table
//! of held objects remembers what the model must learn at the thread's next post.
use core::sync::atomic::{AtomicI32, Ordering};

use dara_abi::{Addr, Deadline, MutexKind, Request, NO_DEADLINE};
use libc::{c_int, clockid_t, pthread_mutex_t, pthread_rwlock_t, timespec};

use super::Obj;
use crate::gate::Gated;
use crate::real;
use crate::solo::{self, Held};
use crate::vclock::{self, ClockBase};

/// Byte offset of glibc's `__kind` in `pthread_mutex_t` (x86_64).
const MUTEX_KIND_OFFSET: usize = 16;
/// glibc's PTHREAD_MUTEX_KIND_MASK_NP.
const MUTEX_KIND_MASK: i32 = 3;
const GLIBC_ADAPTIVE: i32 = 3;
/// glibc's `__kind` bits of robust (16), priority-inheritance (32), priority-protect (64) and
/// process-shared (128) mutexes: such mutexes always take the posted path.
const MUTEX_SPECIAL_BITS: i32 = 16 | 32 | 64 | 128;
/// Byte offset of glibc's `__shared` in `pthread_rwlock_t` (x86_64); non-zero when the rwlock
/// is process-shared.
const RWLOCK_SHARED_OFFSET: usize = 28;

/// glibc's `__kind` word of a mutex (0, a default mutex, for null).
fn raw_kind(m: Obj<pthread_mutex_t>) -> i32 {
    let Some(mutex) = m.get() else {
        return 0;
    };
    // SAFETY: `pthread_mutex_t` is 40 bytes on x86_64 and 4-aligned at offset 16; reading it
    // through an atomic tolerates any concurrent (uncontrolled) writer.
    let word = unsafe {
        &*((mutex as *const pthread_mutex_t as *const u8).add(MUTEX_KIND_OFFSET)
            as *const AtomicI32)
    };
    word.load(Ordering::Relaxed)
}

/// The model's kind of a glibc mutex: `__kind & 3`, adaptive folded into normal.
pub fn kind(m: Obj<pthread_mutex_t>) -> MutexKind {
    match raw_kind(m) & MUTEX_KIND_MASK {
        GLIBC_ADAPTIVE => MutexKind::Normal,
        k => MutexKind::from_arg(k as u64).unwrap_or_default(),
    }
}

/// Whether `m` may be taken without a post: the thread is on the fast path, the table has room,
/// and the mutex is an ordinary process-private one.
fn solo_mutex(m: Obj<pthread_mutex_t>) -> bool {
    solo::fast_path() && solo::has_room() && !m.ptr().is_null() && raw_kind(m) & MUTEX_SPECIAL_BITS == 0
}

/// Whether `l` may be taken without a post: the thread is on the fast path, the table has room,
/// and the rwlock is process-private.
fn solo_rwlock(l: Obj<pthread_rwlock_t>) -> bool {
    let Some(lock) = l.get() else {
        return false;
    };
    if !solo::fast_path() || !solo::has_room() {
        return false;
    }
    // SAFETY: `pthread_rwlock_t` is 56 bytes on x86_64, 4-aligned at offset 28; read atomically.
    let shared = unsafe {
        &*((lock as *const pthread_rwlock_t as *const u8).add(RWLOCK_SHARED_OFFSET)
            as *const AtomicI32)
    };
    shared.load(Ordering::Relaxed) == 0
}

/// The solo fast path of a mutex acquisition: true if the mutex was taken without a post.
fn solo_mutex_acquire(m: Obj<pthread_mutex_t>) -> bool {
    // SAFETY: the program's mutex; trylock never blocks.
    if solo_mutex(m) && unsafe { real::pthread_mutex_trylock(m.ptr()) } == 0 {
        solo::acquired(m.addr(), Held::Mutex(kind(m)));
        return true;
    }
    false
}

/// The solo fast path of a rwlock acquisition: true if the lock was taken without a post.
fn solo_rw_acquire(l: Obj<pthread_rwlock_t>, side: Side) -> bool {
    if !solo_rwlock(l) {
        return false;
    }
    // SAFETY: the program's rwlock; the try-variants never block.
    let rc = unsafe {
        match side {
            Side::Read => real::pthread_rwlock_tryrdlock(l.ptr()),
            Side::Write => real::pthread_rwlock_trywrlock(l.ptr()),
        }
    };
    if rc != 0 {
        return false;
    }
    solo::acquired(l.addr(), if side == Side::Read { Held::Read } else { Held::Write });
    true
}

/// The virtual deadline of a `clock`-based absolute timeout, or the errno to return.
pub fn deadline_on(clock: clockid_t, abstime: Obj<timespec>) -> Result<u64, c_int> {
    let base = ClockBase::of(clock).ok_or(libc::EINVAL)?;
    vclock::optional_deadline(base, abstime.get()).ok_or(libc::EINVAL)
}

/// `pthread_mutex_lock` / `timedlock` / `clocklock` (deadline already virtual).
pub fn mutex_lock(gate: &Gated, m: Obj<pthread_mutex_t>, deadline: u64) -> c_int {
    if deadline == NO_DEADLINE && solo_mutex_acquire(m) {
        return 0;
    }
    let grant = gate.post(Request::MutexLock { mutex: Addr(m.addr()), kind: kind(m), deadline: Deadline::from_ns(deadline) });
    if grant.result != 0 && grant.result != i64::from(libc::EOWNERDEAD) {
        return grant.result as c_int;
    }
    // SAFETY: the program's mutex, free (or recursively ours) according to the model; a robust
    // one whose owner died is free too, and glibc's lock answers EOWNERDEAD itself.
    unsafe { real::pthread_mutex_lock(m.ptr()) }
}

/// `pthread_mutex_timedlock` / `clocklock`.
pub fn mutex_timedlock(
    gate: &Gated,
    m: Obj<pthread_mutex_t>,
    clock: clockid_t,
    abstime: Obj<timespec>,
) -> c_int {
    match deadline_on(clock, abstime) {
        Ok(deadline) => mutex_lock(gate, m, deadline),
        Err(e) => e,
    }
}

pub fn mutex_trylock(gate: &Gated, m: Obj<pthread_mutex_t>) -> c_int {
    if solo_mutex_acquire(m) {
        return 0;
    }
    let grant = gate.post(Request::MutexTryLock { mutex: Addr(m.addr()), kind: kind(m) });
    if grant.result != 0 && grant.result != i64::from(libc::EOWNERDEAD) {
        return grant.result as c_int;
    }
    // SAFETY: the program's mutex, free according to the model (a robust one whose owner died
    // included: glibc's try-lock answers EOWNERDEAD itself).
    unsafe { real::pthread_mutex_trylock(m.ptr()) }
}

pub fn mutex_unlock(gate: &Gated, m: Obj<pthread_mutex_t>) -> c_int {
    if solo::released(m.addr()) {
        // SAFETY: the program's mutex, taken by this thread on the solo fast path.
        return unsafe { real::pthread_mutex_unlock(m.ptr()) };
    }
    let grant = gate.post(Request::MutexUnlock { mutex: Addr(m.addr()), kind: kind(m) });
    if grant.result != 0 {
        return grant.result as c_int;
    }
    // SAFETY: the program's mutex, held by this thread according to the model.
    unsafe { real::pthread_mutex_unlock(m.ptr()) }
}

/// Reader or writer side of a rwlock.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Read,
    Write,
}

pub fn rw_lock(gate: &Gated, l: Obj<pthread_rwlock_t>, side: Side, deadline: u64) -> c_int {
    if deadline == NO_DEADLINE && solo_rw_acquire(l, side) {
        return 0;
    }
    let (lock, deadline) = (Addr(l.addr()), Deadline::from_ns(deadline));
    let request = match side {
        Side::Read => Request::RwReadLock { lock, deadline },
        Side::Write => Request::RwWriteLock { lock, deadline },
    };
    let grant = gate.post(request);
    if grant.result != 0 {
        return grant.result as c_int;
    }
    // SAFETY: the program's rwlock, available on this side according to the model.
    unsafe {
        match side {
            Side::Read => real::pthread_rwlock_rdlock(l.ptr()),
            Side::Write => real::pthread_rwlock_wrlock(l.ptr()),
        }
    }
}

pub fn rw_timedlock(
    gate: &Gated,
    l: Obj<pthread_rwlock_t>,
    side: Side,
    clock: clockid_t,
    abstime: Obj<timespec>,
) -> c_int {
    match deadline_on(clock, abstime) {
        Ok(deadline) => rw_lock(gate, l, side, deadline),
        Err(e) => e,
    }
}

pub fn rw_trylock(gate: &Gated, l: Obj<pthread_rwlock_t>, side: Side) -> c_int {
    if solo_rw_acquire(l, side) {
        return 0;
    }
    let lock = Addr(l.addr());
    let request = match side {
        Side::Read => Request::RwTryReadLock { lock },
        Side::Write => Request::RwTryWriteLock { lock },
    };
    let grant = gate.post(request);
    if grant.result != 0 {
        return grant.result as c_int;
    }
    // SAFETY: the program's rwlock, available on this side according to the model.
    unsafe {
        match side {
            Side::Read => real::pthread_rwlock_tryrdlock(l.ptr()),
            Side::Write => real::pthread_rwlock_trywrlock(l.ptr()),
        }
    }
}

pub fn rw_unlock(gate: &Gated, l: Obj<pthread_rwlock_t>) -> c_int {
    if solo::released(l.addr()) {
        // SAFETY: the program's rwlock, taken by this thread on the solo fast path.
        return unsafe { real::pthread_rwlock_unlock(l.ptr()) };
    }
    let grant = gate.post(Request::RwUnlock { lock: Addr(l.addr()) });
    if grant.result != 0 {
        return grant.result as c_int;
    }
    // SAFETY: the program's rwlock, held by this thread according to the model.
    unsafe { real::pthread_rwlock_unlock(l.ptr()) }
}

#[no_mangle]
pub unsafe extern "C" fn pthread_mutex_lock(m: *mut pthread_mutex_t) -> c_int {
    match Gated::enter() {
        // SAFETY: the program's own argument.
        Some(gate) => mutex_lock(&gate, unsafe { Obj::new(m) }, NO_DEADLINE),
        // SAFETY: the program's own argument, forwarded unchanged.
        None => unsafe { real::pthread_mutex_lock(m) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn pthread_mutex_trylock(m: *mut pthread_mutex_t) -> c_int {
    match Gated::enter() {
        // SAFETY: the program's own argument.
        Some(gate) => mutex_trylock(&gate, unsafe { Obj::new(m) }),
        // SAFETY: the program's own argument, forwarded unchanged.
        None => unsafe { real::pthread_mutex_trylock(m) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn pthread_mutex_timedlock(
    m: *mut pthread_mutex_t,
    abstime: *const timespec,
) -> c_int {
    match Gated::enter() {
        // SAFETY: the program's own arguments.
        Some(gate) => unsafe {
            mutex_timedlock(
                &gate,
                Obj::new(m),
                libc::CLOCK_REALTIME,
                Obj::from_const(abstime),
            )
        },
        // SAFETY: the program's own arguments, forwarded unchanged.
        None => unsafe { real::pthread_mutex_timedlock(m, abstime) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn pthread_mutex_clocklock(
    m: *mut pthread_mutex_t,
    clock: clockid_t,
    abstime: *const timespec,
) -> c_int {
    match Gated::enter() {
        // SAFETY: the program's own arguments.
        Some(gate) => unsafe {
            mutex_timedlock(&gate, Obj::new(m), clock, Obj::from_const(abstime))
        },
        // SAFETY: the program's own arguments, forwarded unchanged.
        None => unsafe { real::pthread_mutex_clocklock(m, clock, abstime) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn pthread_mutex_unlock(m: *mut pthread_mutex_t) -> c_int {
    match Gated::enter() {
        // SAFETY: the program's own argument.
        Some(gate) => mutex_unlock(&gate, unsafe { Obj::new(m) }),
        // SAFETY: the program's own argument, forwarded unchanged.
        None => unsafe { real::pthread_mutex_unlock(m) },
    }
}

macro_rules! rw_hook {
    ($name:ident => |$gate:ident, $l:ident| $body:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(l: *mut pthread_rwlock_t) -> c_int {
            match Gated::enter() {
                Some($gate) => {
                    // SAFETY: the program's own argument.
                    let $l = unsafe { Obj::new(l) };
                    $body
                }
                // SAFETY: the program's own argument, forwarded unchanged.
                None => unsafe { real::$name(l) },
            }
        }
    };
}

rw_hook!(pthread_rwlock_rdlock => |gate, l| rw_lock(&gate, l, Side::Read, NO_DEADLINE));
rw_hook!(pthread_rwlock_wrlock => |gate, l| rw_lock(&gate, l, Side::Write, NO_DEADLINE));
rw_hook!(pthread_rwlock_tryrdlock => |gate, l| rw_trylock(&gate, l, Side::Read));
rw_hook!(pthread_rwlock_trywrlock => |gate, l| rw_trylock(&gate, l, Side::Write));
rw_hook!(pthread_rwlock_unlock => |gate, l| rw_unlock(&gate, l));

macro_rules! rw_timed_hook {
    ($name:ident, $side:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            l: *mut pthread_rwlock_t,
            abstime: *const timespec,
        ) -> c_int {
            match Gated::enter() {
                // SAFETY: the program's own arguments.
                Some(gate) => unsafe {
                    rw_timedlock(
                        &gate,
                        Obj::new(l),
                        $side,
                        libc::CLOCK_REALTIME,
                        Obj::from_const(abstime),
                    )
                },
                // SAFETY: the program's own arguments, forwarded unchanged.
                None => unsafe { real::$name(l, abstime) },
            }
        }
    };
}

rw_timed_hook!(pthread_rwlock_timedrdlock, Side::Read);
rw_timed_hook!(pthread_rwlock_timedwrlock, Side::Write);

macro_rules! rw_clock_hook {
    ($name:ident, $side:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            l: *mut pthread_rwlock_t,
            clock: clockid_t,
            abstime: *const timespec,
        ) -> c_int {
            match Gated::enter() {
                // SAFETY: the program's own arguments.
                Some(gate) => unsafe {
                    rw_timedlock(&gate, Obj::new(l), $side, clock, Obj::from_const(abstime))
                },
                // SAFETY: the program's own arguments, forwarded unchanged.
                None => unsafe { real::$name(l, clock, abstime) },
            }
        }
    };
}

rw_clock_hook!(pthread_rwlock_clockrdlock, Side::Read);
rw_clock_hook!(pthread_rwlock_clockwrlock, Side::Write);
