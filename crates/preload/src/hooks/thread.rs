//! Thread and process lifecycle: `pthread_create` (with the start barrier), `pthread_join`,
//! `pthread_detach`, and `exit`/`_exit`/`_Exit`. A thread's end (return from its routine,
//! `pthread_exit`, cancellation) is posted at its last system call, after glibc's teardown
//! ([`crate::thread_end`]).
//!
//! A child's slot is claimed by its creator after the ThreadCreate grant and set STARTING before
//! the real `pthread_create`; the scheduler takes no decision while a slot is STARTING, so the
//! child posts its ThreadStart (naming its creator) before anything else happens. The start routine and its argument wait in a
//! static per-slot table (no malloc); the real thread runs [`thread_main`] with the slot index.
use core::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

use dara_abi::{handoff, state, Request, MAX_SLOTS};
use libc::{c_int, c_void, pthread_attr_t, pthread_t};

use super::Obj;
use crate::gate::{self, Gated};
use crate::real::{self, StartRoutine};
use crate::{region, solo, sys};

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
    let grant = gate.post(Request::ThreadCreate);
    if grant.result != 0 {
        return grant.result as c_int;
    }
    // Claimed only now: the scheduler takes no decision while a claimed slot has not posted, so
    // claiming before the post would stall the ThreadCreate decision itself. We hold the token,
    // so nobody else claims a slot until the child has posted ThreadStart.
    let Some(header) = region::header() else {
        return libc::EAGAIN;
    };
    let child = handoff::next_free(&header.next_slot);
    let Some(slot) = region::slot(child) else {
        return libc::EAGAIN;
    };
    let record = &STARTS[child as usize];
    record.routine.store(routine as usize, Ordering::Relaxed);
    record.arg.store(arg as usize, Ordering::Relaxed);
    record.creator.store(gate.index(), Ordering::Relaxed);
    // The creator is parked-masked now (its post blocked the signals it catches) and the new
    // thread inherits that kernel mask; it takes the creator's own mask once it starts.
    record.mask.store(gate::program_mask().unwrap_or(NO_MASK), Ordering::Relaxed);
    slot.process.store(region::process(), Ordering::Relaxed);
    slot.pid.store(sys::host_ids().0, Ordering::Relaxed);
    handoff::claim(slot);
    solo::thread_created();
    // SAFETY: `thread` and `attr` are the program's arguments; `thread_main` has the start
    // routine's signature and takes the slot index as its argument.
    let rc = unsafe {
        real::pthread_create(
            thread.ptr(),
            attr.ptr(),
            thread_main,
            child as usize as *mut c_void,
        )
    };
    if rc != 0 {
        handoff::finish(slot);
        solo::thread_gone();
        return rc;
    }
    if let Some(t) = thread.get() {
        slot.handle.store(*t, Ordering::Release);
    }
    0
}

/// The start routine of every thread created through the hook: register, wait for the
/// scheduler, run the program's routine. The exit is reported at the thread's last system call,
/// after glibc ran its destructors (see [`crate::thread_end`]).
extern "C" fn thread_main(arg: *mut c_void) -> *mut c_void {
    let index = arg as usize as u32;
    let Some(slot) = region::slot(index) else {
        sys::die(b"dara: thread started without a slot\n", 125)
    };
    let record = &STARTS[index as usize];
    let routine = record.routine.load(Ordering::Relaxed);
    let user_arg = record.arg.load(Ordering::Relaxed) as *mut c_void;
    let creator = record.creator.load(Ordering::Relaxed);
    if routine == 0 {
        sys::die(b"dara: thread started without a start routine\n", 125);
    }
    // SAFETY: `routine` was stored from a StartRoutine by `create` for this very slot.
    let routine: StartRoutine = unsafe { core::mem::transmute::<usize, StartRoutine>(routine) };
    slot.tid.store(sys::host_ids().1, Ordering::Relaxed);
    // Every frame of the program's routine lies below this function's own locals.
    let stack_marker = 0u8;
    gate::adopt(index, core::ptr::addr_of!(stack_marker) as usize);
    if let Some(gate) = Gated::enter() {
        gate.post(Request::ThreadStart { creator });
    }
    // Linux starts a thread with its creator's mask; it inherited the creator's parked one
    // (the caught signals blocked). Restored here, out of the preload, before the program's
    // routine: a signal sent to the thread meanwhile (pthread_kill) is delivered now.
    let mask = record.mask.load(Ordering::Relaxed);
    if mask != NO_MASK {
        // SAFETY: rt_sigprocmask reads one live 8-byte set.
        unsafe { sys::syscall(libc::SYS_rt_sigprocmask, &[libc::SIG_SETMASK as u64, &mask as *const u64 as u64, 0, 8]) };
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
