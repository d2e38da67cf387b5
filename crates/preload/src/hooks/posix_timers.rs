//! POSIX interval timers on the virtual clock (docs/time.md, "POSIX timers, setitimer and
//! alarm"): `timer_create`, `timer_settime`, `timer_gettime`, `timer_getoverrun`,
//! `timer_delete`, and the process's real-time interval timer behind `setitimer`, `getitimer`
//! and `alarm`.
//!
//! In the kernel these fire in real time: under dara a program's `alarm(1)` came a real second
//! later, whatever virtual time had passed, at a different instruction in every run, and glibc's
//! `SIGEV_THREAD` helper waited in the kernel holding the run token. Here each timer is a
//! timerfd the scheduler keeps on the virtual clock ([`super::timerfd`]) and a thread of dara's
//! that waits on it with a blocking `read` (a modelled receive) and notifies as the kernel would:
//! - `SIGEV_SIGNAL`: queues the signal to the process with `si_code` `SI_TIMER`, the timer's id,
//!   its overrun and `sigev_value`; the process's interval timer queues SIGALRM the same way
//!   (the kernel's carries `SI_KERNEL`). The thread blocks every signal (but dara's SIGSYS and
//!   glibc's own two), so one of the program's threads takes it, as in the kernel.
//! - `SIGEV_THREAD_ID`: the same, to the thread named.
//! - `SIGEV_THREAD`: calls the program's function on that thread, under the mask of the thread
//!   that created the timer (glibc runs it on a thread of its own per expiry).
//! - `SIGEV_NONE`: nothing; `timer_gettime` still counts down.
//!
//! A signal is posted as the process's kill first (`ProcessKill`), so that a wait it ends
//! (`pause`, `sigsuspend`, a sleep) is offered its `Interrupt` at the notifying thread's next
//! scheduling point, in every run. `timer_delete` disarms the timer and wakes its thread with a
//! write, and the thread closes the timerfd and ends.
//!
//! Timers on CPU-time clocks go to the kernel, as do calls from threads dara does not gate and
//! raw system calls. The timerfd is one more descriptor in the program's table (close-on-exec);
//! an exec ends the process's timers, where the kernel keeps the interval timer; a forked child
//! has no timers (POSIX), and ignores the table it inherits. Only the token holder runs, so the
//! table needs no lock; nothing here allocates.
use core::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use dara_abi::{Addr, Request, TimerExpiry};
use libc::{c_int, c_uint, c_void, clockid_t, itimerspec, itimerval, pthread_t, sigevent, timespec, timeval};

use super::{net, set_errno, signal, thread, timerfd, Obj};
use crate::gate::Gated;
use crate::{real, sys, thread_start};

/// The most timers a process has at once (the kernel's limit is the pending-signal rlimit).
const MAX_TIMERS: usize = 64;
/// Timer ids dara gives out: this plus the table index (kernel ids count from 0).
const ID_BASE: i32 = 0x6461_0000;
/// `SIGEV_THREAD_ID` (`<bits/sigevent-consts.h>`).
const SIGEV_THREAD_ID: c_int = 4;

/// The mask a timer's thread keeps: every signal but SIGSYS (dara's trap), so that no handler
/// runs on it while it waits (and none beside the token holder: see [`with_timer_threads_stopped`]
/// for glibc's SIGSETXID).
const TIMER_THREAD_MASK: u64 = !(1u64 << (libc::SIGSYS - 1));

/// A table entry's state.
const FREE: u32 = 0;
const ACTIVE: u32 = 1;
/// Deleted; its thread has not closed the timerfd and ended yet.
const DELETED: u32 = 2;
/// Armed or not, with its thread stopped while the process changes its ids (see
/// [`with_timer_threads_stopped`]); a new thread takes over the timerfd after.
const STOPPED: u32 = 3;

/// One timer of this process.
struct PosixTimer {
    state: AtomicU32,
    /// The process that made it (a forked child's copy of the table is not its own).
    owner: AtomicU32,
    fd: AtomicI32,
    notify: AtomicI32,
    signal: AtomicI32,
    value: AtomicU64,
    /// `SIGEV_THREAD`'s function.
    function: AtomicUsize,
    /// `SIGEV_THREAD_ID`'s thread.
    thread_id: AtomicI32,
    /// The creator's signal mask, under which a `SIGEV_THREAD` function runs.
    mask: AtomicU64,
    /// Expirations beyond the last notified one.
    overrun: AtomicI32,
    /// The process's interval timer (`setitimer`, `alarm`): SIGALRM raised by the kernel.
    interval_timer: AtomicU32,
    /// The timer's thread (joinable: `timer_delete` waits for it to end).
    thread: AtomicU64,
}

static TIMERS: [PosixTimer; MAX_TIMERS] = [const {
    PosixTimer {
        state: AtomicU32::new(FREE),
        owner: AtomicU32::new(0),
        fd: AtomicI32::new(-1),
        notify: AtomicI32::new(0),
        signal: AtomicI32::new(0),
        value: AtomicU64::new(0),
        function: AtomicUsize::new(0),
        thread_id: AtomicI32::new(0),
        mask: AtomicU64::new(0),
        overrun: AtomicI32::new(0),
        interval_timer: AtomicU32::new(0),
        thread: AtomicU64::new(0),
    }
}; MAX_TIMERS];

/// What a new timer notifies.
#[derive(Clone, Copy)]
struct Notify {
    how: c_int,
    signal: c_int,
    value: u64,
    function: usize,
    thread_id: c_int,
}

/// This process's live timer with id `id`, as its table index.
fn lookup(id: i32) -> Option<usize> {
    let index = usize::try_from(id.checked_sub(ID_BASE)?).ok().filter(|&i| i < MAX_TIMERS)?;
    let t = &TIMERS[index];
    (t.state.load(Ordering::Acquire) == ACTIVE && t.owner.load(Ordering::Relaxed) == sys::getpid()).then_some(index)
}

/// This process's interval timer, if it has one.
fn interval_timer() -> Option<usize> {
    let me = sys::getpid();
    TIMERS.iter().position(|t| t.state.load(Ordering::Acquire) == ACTIVE && t.owner.load(Ordering::Relaxed) == me && t.interval_timer.load(Ordering::Relaxed) != 0)
}

/// The calling thread's signal mask.
fn current_mask() -> u64 {
    let mut mask: u64 = 0;
    // SAFETY: rt_sigprocmask with no new set writes the current one into a live local.
    unsafe { sys::syscall(libc::SYS_rt_sigprocmask, &[libc::SIG_BLOCK as u64, 0, &mut mask as *mut u64 as u64, 8]) };
    mask
}

/// Makes a timer on `clock` that notifies as `notify` says: its table index, or an errno.
fn create(gate: &Gated, clock: clockid_t, notify: Notify, interval_timer: bool) -> Result<usize, c_int> {
    let me = sys::getpid();
    // A slot is free when it is, or when it is a table inherited through fork.
    let index = TIMERS
        .iter()
        .position(|t| t.state.load(Ordering::Acquire) == FREE || t.owner.load(Ordering::Relaxed) != me)
        .ok_or(libc::EAGAIN)?;
    let fd = timerfd::create(gate, clock, libc::TFD_CLOEXEC);
    if fd < 0 {
        return Err(-fd as c_int);
    }
    let t = &TIMERS[index];
    t.owner.store(me, Ordering::Relaxed);
    t.fd.store(fd as c_int, Ordering::Relaxed);
    t.notify.store(notify.how, Ordering::Relaxed);
    t.signal.store(notify.signal, Ordering::Relaxed);
    t.value.store(notify.value, Ordering::Relaxed);
    t.function.store(notify.function, Ordering::Relaxed);
    t.thread_id.store(notify.thread_id, Ordering::Relaxed);
    t.mask.store(current_mask(), Ordering::Relaxed);
    t.overrun.store(0, Ordering::Relaxed);
    t.interval_timer.store(u32::from(interval_timer), Ordering::Relaxed);
    t.state.store(ACTIVE, Ordering::Release);
    if let Err(e) = start_thread(gate, index) {
        t.state.store(FREE, Ordering::Release);
        gate.post(Request::NetClose { fd: fd as c_int, how: dara_abi::CloseHow::Close });
        crate::fd::closed(fd as c_int);
        sys::close(fd as c_int);
        return Err(e);
    }
    Ok(index)
}

/// Starts the thread of timer `index` (joinable).
fn start_thread(gate: &Gated, index: usize) -> Result<(), c_int> {
    let mut handle: pthread_t = 0;
    // SAFETY: `handle` is a live local; no attributes; `timer_thread` has the start routine's
    // signature and takes the table index as its argument.
    let rc = thread::create(gate, unsafe { Obj::new(&mut handle) }, unsafe { Obj::from_const(core::ptr::null()) }, timer_thread, index as *mut c_void);
    if rc != 0 {
        return Err(libc::EAGAIN);
    }
    TIMERS[index].thread.store(handle, Ordering::Release);
    Ok(())
}

/// Whether the calling thread is the thread of timer `index` (a `SIGEV_THREAD` function).
fn on_timer_thread(index: usize) -> bool {
    // SAFETY: pthread_self takes no arguments.
    TIMERS[index].thread.load(Ordering::Acquire) == unsafe { real::pthread_self() }
}

/// Wakes the thread of timer `index` (which then looks at the timer's state) and waits until it
/// has ended; a thread cannot wait for itself, and detaches instead. Called with no gate held
/// (the wake-up is a write, the wait a join, both through dara's hooks).
fn end_thread(index: usize) {
    let t = &TIMERS[index];
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a live local to the timer's eventfd through dara's hook.
    unsafe { net::write(t.fd.load(Ordering::Relaxed), (&one as *const u64).cast(), 8) };
    let handle = t.thread.load(Ordering::Acquire);
    if on_timer_thread(index) {
        // SAFETY: the calling thread's own handle.
        unsafe { thread::pthread_detach(handle) };
    } else {
        // SAFETY: a joinable thread of this process, joined once.
        unsafe { thread::pthread_join(handle, core::ptr::null_mut()) };
    }
}

/// Runs `change` (a change of the process's user or group ids) with no timer thread alive.
/// glibc changes the ids of every thread of a process: it signals each one with SIGSETXID and
/// waits until its handler has run. A timer thread, parked in dara while another thread holds
/// the run token, would take it at once, beside the token holder, or never: sshd's `setuid`
/// after its `alarm` waited 120 s for the alarm. So the timer threads end first (their timers
/// stay armed in the scheduler, counting expirations), and new ones take over after.
pub fn with_timer_threads_stopped<R>(change: impl FnOnce() -> R) -> R {
    // Entered only to know the thread is dara's, and left at once (the stops post on their own).
    if Gated::enter().is_none() {
        return change();
    }
    let me = sys::getpid();
    let mut stopped = [false; MAX_TIMERS];
    for (index, t) in TIMERS.iter().enumerate() {
        if t.owner.load(Ordering::Relaxed) == me && t.state.load(Ordering::Acquire) == ACTIVE && !on_timer_thread(index) {
            t.state.store(STOPPED, Ordering::Release);
            end_thread(index);
            stopped[index] = true;
        }
    }
    let result = change();
    if stopped.iter().any(|&s| s) {
        if let Some(gate) = Gated::enter() {
            for index in (0..MAX_TIMERS).filter(|&i| stopped[i]) {
                TIMERS[index].state.store(ACTIVE, Ordering::Release);
                if start_thread(&gate, index).is_err() {
                    TIMERS[index].state.store(DELETED, Ordering::Release); // no thread: it never notifies
                }
            }
        }
    }
    result
}

/// The thread of timer `arg` (its table index): waits for expirations and notifies them, until
/// the timer is deleted.
extern "C" fn timer_thread(arg: *mut c_void) -> *mut c_void {
    let t = &TIMERS[arg as usize];
    thread_start::set_mask(TIMER_THREAD_MASK);
    let fd = t.fd.load(Ordering::Relaxed);
    loop {
        let mut count: u64 = 0;
        // SAFETY: reads 8 bytes into a live local, through dara's hook (a modelled receive).
        let got = unsafe { net::read(fd, (&mut count as *mut u64).cast(), 8) };
        match t.state.load(Ordering::Acquire) {
            ACTIVE => {}
            STOPPED => return core::ptr::null_mut(), // the timer stays; a new thread takes over
            _ => break,
        }
        // SAFETY: __errno_location always returns this thread's errno.
        if got < 0 && unsafe { *libc::__errno_location() } == libc::EBADF {
            // The program closed the timer's descriptor behind dara's back (a `closefrom`): the
            // timer can notify no more. The thread ends rather than spin on the error, and
            // leaves the number alone (it may name another file of the program's now).
            t.state.store(DELETED, Ordering::Release);
            return core::ptr::null_mut();
        }
        if got != 8 || count == 0 {
            continue; // a short read cannot come; an empty one is the wake-up of a stop
        }
        t.overrun.store((count - 1).min(i32::MAX as u64) as i32, Ordering::Relaxed);
        notify(t, arg as usize);
    }
    // SAFETY: closes the timer's own descriptor through dara's hook (the scheduler forgets it).
    unsafe { net::close(fd) };
    t.state.store(FREE, Ordering::Release);
    core::ptr::null_mut()
}

/// One expiration of timer `t` (index `index`), notified as it asked.
fn notify(t: &PosixTimer, index: usize) {
    let (how, sig) = (t.notify.load(Ordering::Relaxed), t.signal.load(Ordering::Relaxed));
    match how {
        libc::SIGEV_THREAD => {
            let function = t.function.load(Ordering::Relaxed);
            // SAFETY: stored from the program's `sigev_notify_function`, which takes a
            // `union sigval` (one register).
            let function: extern "C" fn(u64) = unsafe { core::mem::transmute::<usize, extern "C" fn(u64)>(function) };
            thread_start::set_mask(t.mask.load(Ordering::Relaxed));
            function(t.value.load(Ordering::Relaxed));
            thread_start::set_mask(TIMER_THREAD_MASK);
        }
        libc::SIGEV_SIGNAL | SIGEV_THREAD_ID => {
            let Some(gate) = Gated::enter() else { return };
            let pid = sys::getpid();
            let dies = signal::post_kill(&gate, pid as libc::pid_t, sig);
            let mut info = [0u64; 16]; // a siginfo_t (128 bytes)
            // si_signo, si_errno, si_code; then the timer's id, its overrun and sigev_value.
            // (The kernel raises an interval timer's SIGALRM with SI_KERNEL, which only the
            // process's main thread may queue to its own process: this thread cannot.)
            info[0] = sig as u32 as u64;
            info[1] = libc::SI_TIMER as u32 as u64;
            info[2] = (ID_BASE + index as i32) as u32 as u64 | (t.overrun.load(Ordering::Relaxed) as u32 as u64) << 32;
            info[3] = t.value.load(Ordering::Relaxed);
            let (nr, args) = match how {
                SIGEV_THREAD_ID => (libc::SYS_rt_tgsigqueueinfo, [pid as u64, t.thread_id.load(Ordering::Relaxed) as u64, sig as u64, info.as_ptr() as u64]),
                _ => (libc::SYS_rt_sigqueueinfo, [pid as u64, sig as u64, info.as_ptr() as u64, 0]),
            };
            // SAFETY: queues a signal with a live siginfo to this very process (any si_code is
            // allowed for a process signalling itself).
            unsafe { sys::syscall(nr, &args) };
            if dies {
                crate::process::wait_until_dead(pid);
            }
        }
        _ => {} // SIGEV_NONE
    }
}

/// The timer's expiry and interval as the timerfd takes them.
fn settime(gate: &Gated, index: usize, flags: c_int, new: Option<&itimerspec>, old: u64) -> i64 {
    timerfd::settime(gate, TIMERS[index].fd.load(Ordering::Relaxed), flags & libc::TIMER_ABSTIME, new, old)
}

/// Deletes timer `index`: disarmed at once, and its thread, woken, closes the timerfd and ends
/// before this returns (unless the thread deletes its own timer). Called with no gate held.
fn delete(index: usize) {
    let t = &TIMERS[index];
    if let Some(gate) = Gated::enter() {
        gate.post(Request::TimerSet { fd: t.fd.load(Ordering::Relaxed), expiry: TimerExpiry::Disarmed, interval: 0, old: Addr(0) });
    }
    t.state.store(DELETED, Ordering::Release);
    end_thread(index);
}

/// A kernel-form answer as libc returns it: the value, or -1 with `errno` set.
fn libc_result(rc: i64) -> c_int {
    if rc < 0 {
        set_errno(-rc as c_int);
        return -1;
    }
    rc as c_int
}

/// What `sevp` asks for (null: SIGALRM; its value, the timer's id, is filled in once known).
///
/// # Safety
/// `sevp` is null or the program's `struct sigevent`.
unsafe fn notify_of(sevp: *const sigevent) -> Result<Notify, c_int> {
    // SAFETY: by the caller's contract.
    let Some(ev) = (unsafe { sevp.as_ref() }) else {
        return Ok(Notify { how: libc::SIGEV_SIGNAL, signal: libc::SIGALRM, value: 0, function: 0, thread_id: 0 });
    };
    // The union after sigev_notify: the thread id, or the function and its attributes.
    let union_at = (sevp as usize + 16) as *const u64;
    // SAFETY: a struct sigevent is 64 bytes; the union starts at byte 16.
    let word = unsafe { union_at.read_unaligned() };
    let notify = Notify { how: ev.sigev_notify, signal: ev.sigev_signo, value: ev.sigev_value.sival_ptr as u64, function: word as usize, thread_id: word as u32 as c_int };
    match notify.how {
        libc::SIGEV_NONE => Ok(notify),
        libc::SIGEV_THREAD if notify.function != 0 => Ok(notify),
        libc::SIGEV_SIGNAL | SIGEV_THREAD_ID if (1..=64).contains(&notify.signal) => Ok(notify),
        _ => Err(libc::EINVAL),
    }
}

#[no_mangle]
pub unsafe extern "C" fn timer_create(clock: clockid_t, sevp: *mut sigevent, id: *mut *mut c_void) -> c_int {
    let gate = match Gated::enter() {
        Some(gate) if timerfd::timer_clock(clock).is_some() => gate,
        // SAFETY: the program's own arguments, forwarded unchanged (a CPU-time clock).
        _ => return unsafe { real::timer_create(clock, sevp, id) },
    };
    if id.is_null() {
        set_errno(libc::EFAULT);
        return -1;
    }
    // SAFETY: the program's own sigevent or null.
    let notify = match unsafe { notify_of(sevp) } {
        Ok(n) => n,
        Err(e) => {
            set_errno(e);
            return -1;
        }
    };
    match create(&gate, clock, notify, false) {
        Ok(index) => {
            if sevp.is_null() {
                TIMERS[index].value.store((ID_BASE + index as i32) as u64, Ordering::Relaxed);
            }
            // SAFETY: the program's out-parameter, checked non-null above.
            unsafe { *id = (ID_BASE + index as i32) as usize as *mut c_void };
            0
        }
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn timer_settime(id: *mut c_void, flags: c_int, new: *const itimerspec, old: *mut itimerspec) -> c_int {
    match (Gated::enter(), lookup(id as usize as i32)) {
        // SAFETY: the program's own pointer, valid or null by timer_settime's contract.
        (Some(gate), Some(index)) => libc_result(settime(&gate, index, flags, unsafe { new.as_ref() }, old as u64)),
        // SAFETY: the program's own arguments, forwarded unchanged.
        _ => unsafe { real::timer_settime(id, flags, new, old) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn timer_gettime(id: *mut c_void, current: *mut itimerspec) -> c_int {
    match (Gated::enter(), lookup(id as usize as i32)) {
        (Some(gate), Some(index)) => libc_result(timerfd::gettime(&gate, TIMERS[index].fd.load(Ordering::Relaxed), current as u64)),
        // SAFETY: the program's own arguments, forwarded unchanged.
        _ => unsafe { real::timer_gettime(id, current) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn timer_getoverrun(id: *mut c_void) -> c_int {
    match lookup(id as usize as i32) {
        Some(index) => TIMERS[index].overrun.load(Ordering::Relaxed),
        // SAFETY: the program's own argument, forwarded unchanged.
        None => unsafe { real::timer_getoverrun(id) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn timer_delete(id: *mut c_void) -> c_int {
    // Entered only to know the thread is dara's, and left at once: `delete` posts on its own.
    let gated = Gated::enter().is_some();
    match (gated, lookup(id as usize as i32)) {
        (true, Some(index)) => {
            delete(index);
            0
        }
        // SAFETY: the program's own argument, forwarded unchanged.
        _ => unsafe { real::timer_delete(id) },
    }
}

fn to_timespec(tv: &timeval) -> timespec {
    timespec { tv_sec: tv.tv_sec, tv_nsec: tv.tv_usec * 1000 }
}

fn to_timeval(ts: &timespec) -> timeval {
    // Rounded up, as the kernel reports a timer's time left.
    let usec = (ts.tv_nsec + 999) / 1000;
    timeval { tv_sec: ts.tv_sec + usec / 1_000_000, tv_usec: usec % 1_000_000 }
}

/// `setitimer(ITIMER_REAL)` on the process's interval timer, made at its first arming.
fn set_interval_timer(gate: &Gated, new: &itimerval, old: Option<&mut itimerval>) -> c_int {
    if new.it_value.tv_usec < 0 || new.it_value.tv_usec >= 1_000_000 || new.it_interval.tv_usec < 0 || new.it_interval.tv_usec >= 1_000_000 {
        return libc_result(-i64::from(libc::EINVAL));
    }
    let index = match interval_timer() {
        Some(index) => index,
        None if new.it_value.tv_sec == 0 && new.it_value.tv_usec == 0 => {
            if let Some(old) = old {
                // SAFETY: all-zero is a valid itimerval (disarmed).
                *old = unsafe { core::mem::zeroed() };
            }
            return 0;
        }
        None => {
            let alarm = Notify { how: libc::SIGEV_SIGNAL, signal: libc::SIGALRM, value: 0, function: 0, thread_id: 0 };
            match create(gate, libc::CLOCK_MONOTONIC, alarm, true) {
                Ok(index) => index,
                Err(e) => return libc_result(-i64::from(e)),
            }
        }
    };
    let spec = itimerspec { it_interval: to_timespec(&new.it_interval), it_value: to_timespec(&new.it_value) };
    // SAFETY: all-zero is a valid itimerspec; the scheduler writes the old setting into it.
    let mut previous: itimerspec = unsafe { core::mem::zeroed() };
    let rc = settime(gate, index, 0, Some(&spec), &mut previous as *mut itimerspec as u64);
    if rc == 0 {
        if let Some(old) = old {
            *old = itimerval { it_interval: to_timeval(&previous.it_interval), it_value: to_timeval(&previous.it_value) };
        }
    }
    libc_result(rc)
}

/// `getitimer(ITIMER_REAL)`.
fn get_interval_timer(gate: &Gated, current: &mut itimerval) -> c_int {
    // SAFETY: all-zero is a valid itimerspec (disarmed); the scheduler writes into it.
    let mut spec: itimerspec = unsafe { core::mem::zeroed() };
    if let Some(index) = interval_timer() {
        let rc = timerfd::gettime(gate, TIMERS[index].fd.load(Ordering::Relaxed), &mut spec as *mut itimerspec as u64);
        if rc < 0 {
            return libc_result(rc);
        }
    }
    *current = itimerval { it_interval: to_timeval(&spec.it_interval), it_value: to_timeval(&spec.it_value) };
    0
}

#[no_mangle]
pub unsafe extern "C" fn setitimer(which: c_int, new: *const itimerval, old: *mut itimerval) -> c_int {
    let gate = match Gated::enter() {
        Some(gate) if which == libc::ITIMER_REAL => gate,
        // SAFETY: the program's own arguments, forwarded unchanged (a CPU-time timer).
        _ => return unsafe { real::setitimer(which, new, old) },
    };
    // SAFETY: the program's own pointers, valid or null by setitimer's contract.
    match unsafe { (new.as_ref(), old.as_mut()) } {
        (Some(new), old) => set_interval_timer(&gate, new, old),
        (None, _) => libc_result(-i64::from(libc::EFAULT)),
    }
}

#[no_mangle]
pub unsafe extern "C" fn getitimer(which: c_int, current: *mut itimerval) -> c_int {
    let gate = match Gated::enter() {
        Some(gate) if which == libc::ITIMER_REAL => gate,
        // SAFETY: the program's own arguments, forwarded unchanged.
        _ => return unsafe { real::getitimer(which, current) },
    };
    // SAFETY: the program's out-parameter, valid or null by getitimer's contract.
    match unsafe { current.as_mut() } {
        Some(current) => get_interval_timer(&gate, current),
        None => libc_result(-i64::from(libc::EFAULT)),
    }
}

#[no_mangle]
pub unsafe extern "C" fn alarm(seconds: c_uint) -> c_uint {
    let Some(gate) = Gated::enter() else {
        // SAFETY: a plain integer.
        return unsafe { real::alarm(seconds) };
    };
    let new = itimerval { it_interval: timeval { tv_sec: 0, tv_usec: 0 }, it_value: timeval { tv_sec: seconds.into(), tv_usec: 0 } };
    // SAFETY: all-zero is a valid itimerval.
    let mut old: itimerval = unsafe { core::mem::zeroed() };
    if set_interval_timer(&gate, &new, Some(&mut old)) != 0 {
        return 0;
    }
    // As glibc: the seconds left, rounded to the nearest, and never 0 for a timer still armed.
    let left = old.it_value.tv_sec as c_uint;
    if old.it_value.tv_usec >= 500_000 || (left == 0 && old.it_value.tv_usec > 0) {
        left + 1
    } else {
        left
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_convert_between_timeval_and_timespec() {
        let tv = timeval { tv_sec: 3, tv_usec: 250_000 };
        let ts = to_timespec(&tv);
        assert_eq!((ts.tv_sec, ts.tv_nsec), (3, 250_000_000));
        let back = to_timeval(&timespec { tv_sec: 0, tv_nsec: 999_999_001 });
        assert_eq!((back.tv_sec, back.tv_usec), (1, 0), "rounded up, carried into seconds");
        let back = to_timeval(&timespec { tv_sec: 2, tv_nsec: 1 });
        assert_eq!((back.tv_sec, back.tv_usec), (2, 1), "a nanosecond left shows as a microsecond");
    }

    #[test]
    fn ids_outside_the_table_are_not_dara_s() {
        assert_eq!(lookup(0), None, "a kernel timer id");
        assert_eq!(lookup(ID_BASE - 1), None);
        assert_eq!(lookup(ID_BASE + MAX_TIMERS as i32), None);
        assert_eq!(lookup(ID_BASE), None, "a free entry");
    }
}
