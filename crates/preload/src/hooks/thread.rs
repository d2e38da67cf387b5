//! Thread and process lifecycle: `pthread_create` (with the start barrier), `pthread_join`,
//! `pthread_detach`, and `exit`/`_exit`/`_Exit`. A thread's end (return from its routine,
//! `pthread_exit`, cancellation) is posted at its last system call, after glibc's teardown
//! ([`crate::thread_end`]).
//!
//! A child's slot is claimed by its creator after the ThreadCreate grant and set STARTING before
//! the real `pthread_create` ([`crate::thread_start`], which also starts the threads made past
//! this hook); the scheduler takes no decision while a slot is STARTING, so the child posts its
//! ThreadStart (naming its creator) before anything else happens. The start routine and its
//! argument wait in a static per-slot table (no malloc); the real thread runs [`thread_main`]
//! with the slot index.
use core::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

use dara_abi::{state, Request, MAX_SLOTS};
use libc::{c_int, c_void, pthread_attr_t, pthread_t};

use super::Obj;
use crate::gate::{self, Gated};
use crate::real::{self, StartRoutine};
use crate::{region, solo, sys, thread_start};

/// What a new thread will run, parked here by its creator.
struct StartRecord {
    routine: AtomicUsize,
    arg: AtomicUsize,
    creator: AtomicU32,
    /// The creator's own signal mask ([`NO_MASK`]: it catches no signal, nothing to restore).
    mask: AtomicU64,
}

/// No mask recorded (never a program's mask: SIGSYS is never blocked).
const NO_MASK: u64 = u64::MAX;

static STARTS: [StartRecord; MAX_SLOTS] = [const {
    StartRecord {
        routine: AtomicUsize::new(0),
        arg: AtomicUsize::new(0),
        creator: AtomicU32::new(0),
        mask: AtomicU64::new(NO_MASK),
    }
}; MAX_SLOTS];

/// `pthread_create`.
pub fn create(
    gate: &Gated,
    thread: Obj<pthread_t>,
    attr: Obj<pthread_attr_t>,
    routine: StartRoutine,
    arg: *mut c_void,
) -> c_int {
    let child = match thread_start::claim_child(gate) {
        Ok(child) => child,
        Err(rc) => return rc,
    };
    let record = &STARTS[child.index as usize];
    record.routine.store(routine as usize, Ordering::Relaxed);
    record.arg.store(arg as usize, Ordering::Relaxed);
    record.creator.store(gate.index(), Ordering::Relaxed);
    // The creator is parked-masked now (its post blocked the signals it catches) and the new
    // thread inherits that kernel mask; it takes the creator's own mask once it starts.
    record.mask.store(gate::program_mask().unwrap_or(NO_MASK), Ordering::Relaxed);
    // SAFETY: `thread` and `attr` are the program's arguments; `thread_main` has the start
    // routine's signature and takes the slot index as its argument.
    let rc = unsafe {
        real::pthread_create(
            thread.ptr(),
            attr.ptr(),
            thread_main,
            child.index as usize as *mut c_void,
        )
    };
    if rc != 0 {
        thread_start::abandon(child);
        return rc;
    }
    if let Some(t) = thread.get() {
        child.slot.handle.store(*t, Ordering::Release);
    }
    0
}

/// The start routine of every thread created through the hook: register, wait for the
/// scheduler, run the program's routine. The exit is reported at the thread's last system call,
/// after glibc ran its destructors (see [`crate::thread_end`]).
extern "C" fn thread_main(arg: *mut c_void) -> *mut c_void {
    let index = arg as usize as u32;
    let record = &STARTS[index as usize];
    let routine = record.routine.load(Ordering::Relaxed);
    let user_arg = record.arg.load(Ordering::Relaxed) as *mut c_void;
    let creator = record.creator.load(Ordering::Relaxed);
    if routine == 0 {
        sys::die(b"dara: thread started without a start routine\n", 125);
    }
    // SAFETY: `routine` was stored from a StartRoutine by `create` for this very slot.
    let routine: StartRoutine = unsafe { core::mem::transmute::<usize, StartRoutine>(routine) };
    // Every frame of the program's routine lies below this function's own locals.
    let stack_marker = 0u8;
    thread_start::start_in_slot(index, creator, core::ptr::addr_of!(stack_marker) as usize);
    // Linux starts a thread with its creator's mask; it inherited the creator's parked one
    // (the caught signals blocked). Restored here, out of the preload, before the program's
    // routine: a signal sent to the thread meanwhile (pthread_kill) is delivered now.
    let mask = record.mask.load(Ordering::Relaxed);
    if mask != NO_MASK {
        thread_start::set_mask(mask);
    }
    routine(user_arg)
}

/// The newest slot of this process whose thread has handle `thread` (glibc reuses `pthread_t`
/// values once a thread is joined, so the newest one is the live one).
fn slot_of(thread: pthread_t) -> Option<u32> {
    let header = region::header()?;
    let claimed = header
        .next_slot
        .load(Ordering::Acquire)
        .min(region::nslots(header));
    let me = region::process();
    (0..claimed).rev().find(|&i| {
        region::slot(i).is_some_and(|s| {
            s.process.load(Ordering::Relaxed) == me
                && s.handle.load(Ordering::Acquire) == thread
                && s.state.load(Ordering::Acquire) != state::FREE
        })
    })
}

/// `pthread_join`; `None` when the thread is not one dara knows (the caller forwards to libc).
pub fn join(gate: &Gated, thread: pthread_t, retval: Obj<*mut c_void>) -> Option<c_int> {
    let target = slot_of(thread)?;
    let grant = gate.post(Request::ThreadJoin { target });
    if grant.result != 0 {
        return Some(grant.result as c_int);
    }
    // The thread has posted ThreadExit; it may still be in glibc's teardown. Reap it without
    // ever blocking in the kernel.
    loop {
        // SAFETY: `thread` names a joinable thread of this process (the model checked it) and
        // `retval` is the program's out-parameter (or null).
        let rc = unsafe { real::pthread_tryjoin_np(thread, retval.ptr()) };
        if rc != libc::EBUSY {
            if rc == 0 {
                solo::thread_gone();
            }
            return Some(rc);
        }
        sys::sched_yield();
    }
}

/// `pthread_detach`.
pub fn detach(gate: &Gated, thread: pthread_t) -> c_int {
    if let Some(target) = slot_of(thread) {
        let grant = gate.post(Request::ThreadDetach { target });
        if grant.result != 0 {
            return grant.result as c_int;
        }
    }
    // SAFETY: the program's own argument.
    unsafe { real::pthread_detach(thread) }
}

/// `exit`, `_exit`, `_Exit`: report the status; the caller then runs the real function.
pub fn process_exit(gate: &Gated, status: c_int) {
    gate.post(Request::ProcessExit { status });
}

#[no_mangle]
pub unsafe extern "C" fn pthread_create(
    thread: *mut pthread_t,
    attr: *const pthread_attr_t,
    start: StartRoutine,
    arg: *mut c_void,
) -> c_int {
    match Gated::enter() {
        // SAFETY: the program's own arguments.
        Some(gate) => create(
            &gate,
            unsafe { Obj::new(thread) },
            unsafe { Obj::from_const(attr) },
            start,
            arg,
        ),
        // SAFETY: the program's own arguments, forwarded unchanged.
        None => unsafe { real::pthread_create(thread, attr, start, arg) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn pthread_join(thread: pthread_t, retval: *mut *mut c_void) -> c_int {
    if let Some(gate) = Gated::enter() {
        // SAFETY: the program's own argument.
        if let Some(rc) = join(&gate, thread, unsafe { Obj::new(retval) }) {
            return rc;
        }
    }
    // SAFETY: the program's own arguments, forwarded unchanged.
    unsafe { real::pthread_join(thread, retval) }
}

/// C11's `thrd_join` (glibc's joins on the thread's tid word, a futex only the kernel clears:
/// the same join as `pthread_join`'s, the routine's `int` result taken from its pointer).
#[no_mangle]
pub unsafe extern "C" fn thrd_join(thread: pthread_t, result: *mut c_int) -> c_int {
    if let Some(gate) = Gated::enter() {
        let mut value: *mut c_void = core::ptr::null_mut();
        // SAFETY: a live local out-parameter.
        if let Some(rc) = join(&gate, thread, unsafe { Obj::new(&mut value) }) {
            if rc != 0 {
                return THRD_ERROR;
            }
            if !result.is_null() {
                // SAFETY: the program's own out-parameter.
                unsafe { *result = value as isize as c_int };
            }
            return THRD_SUCCESS;
        }
    }
    // SAFETY: the program's own arguments, forwarded unchanged.
    unsafe { real::thrd_join(thread, result) }
}

/// C11's `thrd_detach` (glibc's calls its internal `pthread_detach`).
#[no_mangle]
pub unsafe extern "C" fn thrd_detach(thread: pthread_t) -> c_int {
    // SAFETY: the program's own argument.
    match unsafe { pthread_detach(thread) } {
        0 => THRD_SUCCESS,
        _ => THRD_ERROR,
    }
}

/// C11's `thrd_success` and `thrd_error` (glibc's `<threads.h>`).
const THRD_SUCCESS: c_int = 0;
const THRD_ERROR: c_int = 2;

#[no_mangle]
pub unsafe extern "C" fn pthread_detach(thread: pthread_t) -> c_int {
    match Gated::enter() {
        Some(gate) => detach(&gate, thread),
        // SAFETY: the program's own argument, forwarded unchanged.
        None => unsafe { real::pthread_detach(thread) },
    }
}

macro_rules! exit_hook {
    ($name:ident) => {
        #[no_mangle]
        #[allow(non_snake_case)]
        pub unsafe extern "C" fn $name(status: c_int) -> ! {
            if let Some(gate) = Gated::enter() {
                process_exit(&gate, status);
            }
            // SAFETY: the program asked to exit with this status.
            unsafe { real::$name(status) }
        }
    };
}

exit_hook!(exit);
exit_hook!(_exit);
exit_hook!(_Exit);
