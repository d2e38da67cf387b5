//! Per-thread state and the handoff with the scheduler.
//!
//! A thread is *gated* when it owns a slot: every scheduling point it reaches becomes a post
//! (op + args in its slot, wake the scheduler, park on the slot's state word until GRANTED), as
//! described in the `dara_abi` module doc. [`Gated`] is the proof that the current thread may
//! post right now: it exists only while the process is traced, the thread has a slot, and the
//! thread is not already inside the preload (the reentrancy guard, so libc calls the preload
//! makes for itself are never turned into scheduling points). Dropping it leaves the preload.
//!
//! The thread-local state is a few `Cell`s with const initializers: in a library loaded with
//! LD_PRELOAD they live in static TLS, need no lazy initialisation or destructor, and can be read
//! from the SIGSYS handler.
//!
//! The slot's state transitions are `dara_abi::handoff`'s functions (checked with loom there);
//! this module adds the thread's side of everything around them: signal masks, the solo locks,
//! the last grant's time, and [`Parking`], the kernel futex with a liveness check.
//!
//! The hot path (`Gated::post`) does not allocate, lock or make any syscall besides the two
//! futex calls of the protocol; the liveness checks run only after a one-second wait timed out.
use core::cell::Cell;
use core::marker::PhantomData;
use core::sync::atomic::{AtomicU32, Ordering};

use dara_abi::handoff::{self, Futex, Waited};
use dara_abi::{Request, Slot};
use libc::timespec;

use crate::{region, solo, sys};

const NO_SLOT: u32 = u32::MAX;

thread_local! {
    /// Index of this thread's slot, or NO_SLOT for threads dara does not control.
    static SLOT: Cell<u32> = const { Cell::new(NO_SLOT) };
    /// Virtual time of this thread's last grant. The clock does not move while a thread holds the
    /// run token, so relative timeouts are turned into deadlines from it.
    static LAST_NOW: Cell<u64> = const { Cell::new(0) };
    /// Reentrancy guard: set while the thread runs preload code.
    static INSIDE: Cell<bool> = const { Cell::new(false) };
    /// The signal mask to restore when the thread leaves the preload after a post (the post
    /// blocked the caught signals).
    static PARKED_SAVED: Cell<Option<u64>> = const { Cell::new(None) };
    /// The signal mask a `ppoll`/`pselect`/`epoll_pwait` waits under (see [`WaitMask`]).
    static WAIT_MASK: Cell<Option<u64>> = const { Cell::new(None) };
    /// While the thread runs a signal handler of dara's (SIGSYS, or SIGSEGV for the time-stamp
    /// counter): the address of the instruction it trapped, the call site of what the handler
    /// posts (see [`crate::call_site`]); 0 outside one.
    static IN_TRAP: Cell<u64> = const { Cell::new(0) };
    /// Highest address of this thread's own stack that its code uses (noted when it was gated;
    /// 0 = unknown). See [`on_own_stack`].
    static STACK_TOP: Cell<usize> = const { Cell::new(0) };
    /// Coverage edges since this thread's last `EdgeQuantum` (`--preempt-on edges:N`).
    static EDGES: Cell<u32> = const { Cell::new(0) };
    /// Clock reads answered without a post since this thread's last post (coarse steps).
    static UNPOSTED_CLOCK_READS: Cell<u32> = const { Cell::new(0) };
    /// Set while the thread reads the clock through the vDSO (see [`vdso_clock_read`]).
    static IN_VDSO_CLOCK: Cell<bool> = const { Cell::new(false) };
}

/// Runs `read`, a clock read that came through the vDSO, so that it is answered from the
/// thread's last grant without a post. Code that calls the vDSO has bypassed the hooked libc
/// symbols (`clock_gettime` and friends, which stay scheduling points): it is libc's own internal
/// calls and runtimes such as ASan's, whose allocator reads the monotonic clock while holding its
/// own lock. A post there parked the thread with that lock held while a thread being born (ASan's
/// thread start, before dara's wrapper) waited for it, and the scheduler waited for the newborn:
/// a false hang. The value is the same virtual time in every run.
pub fn vdso_clock_read<T>(read: impl FnOnce() -> T) -> T {
    IN_VDSO_CLOCK.with(|f| f.set(true));
    let value = read();
    IN_VDSO_CLOCK.with(|f| f.set(false));
    value
}


/// Bytes below the stack pointer that code may use without moving it (the x86-64 red zone).
const RED_ZONE: u64 = 128;

/// Signals that may be blocked while a thread is parked (those the program catches): all but
/// SIGSYS (the trap) and the signals a fault raises synchronously.
pub(crate) const PARKED_MASK: u64 = !((1 << (libc::SIGSYS - 1)) | (1 << (libc::SIGSEGV - 1)) | (1 << (libc::SIGBUS - 1)) | (1 << (libc::SIGFPE - 1)) | (1 << (libc::SIGILL - 1)) | (1 << (libc::SIGTRAP - 1)));

/// Exit status of a target whose scheduler disappeared while a thread waited for a grant.
const ORPHANED_EXIT: i32 = 137;

/// What the scheduler answered.
#[derive(Clone, Copy, Debug)]
pub struct Grant {
    /// The op's result (0, a count, a positive errno for pthread-style ops, or -errno).
    pub result: i64,
    /// Virtual time at the grant.
    pub now_ns: u64,
}

/// Permission to post from the current thread; holds the reentrancy guard until dropped.
pub struct Gated {
    slot: &'static Slot,
    index: u32,
    /// Thread-bound: the guard and the slot belong to the current thread.
    _not_send: PhantomData<*const ()>,
}

impl Gated {
    /// Enters the preload if the current thread is gated and not already inside it.
    #[inline]
    pub fn enter() -> Option<Gated> {
        if !region::active() || crate::stop_world::active() {
            return None;
        }
        let index = SLOT.with(|s| s.get());
        if index == NO_SLOT || INSIDE.with(|g| g.get()) {
            return None;
        }
        let slot = region::slot(index)?;
        INSIDE.with(|g| g.set(true));
        Some(Gated {
            slot,
            index,
            _not_send: PhantomData,
        })
    }

    /// This thread's slot index.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// Virtual time of this thread's last grant.
    pub fn now(&self) -> u64 {
        LAST_NOW.with(|n| n.get())
    }

    /// Notes that the thread read its own CPU time now ([`dara_abi::Slot::cpu_time_read_ns`]).
    pub fn note_cpu_time_read(&self) {
        self.slot.cpu_time_read_ns.store(self.now() + 1, core::sync::atomic::Ordering::Relaxed);
    }

    /// Absolute virtual deadline `duration_ns` from now.
    pub fn deadline_after(&self, duration_ns: u64) -> u64 {
        self.now().saturating_add(duration_ns)
    }

    /// Posts `request` and parks until the scheduler grants it. Locks a solo thread took without
    /// a post are handed to the model first (`solo::flush`).
    pub fn post(&self, request: Request) -> Grant {
        self.flush_solo();
        let grant = post_and_park(self.slot, request);
        handoff::resume(self.slot);
        grant
    }

    /// Posts `ThreadExit` and releases the slot for good: after the grant the slot is EXITED,
    /// the scheduler is woken to see it, and the thread is no longer gated. Called from the
    /// thread's last system call, once glibc's teardown and destructors ran ([`crate::thread_end`]).
    pub fn exit_thread(self) {
        self.flush_solo();
        post_and_park(self.slot, Request::ThreadExit);
        handoff::finish(self.slot);
        wake_scheduler();
        SLOT.with(|s| s.set(NO_SLOT));
    }
}

impl Gated {
    /// Tells the scheduler who sent the caught signals pending for this thread (blocked while it
    /// was parked; about to be let through): each one is taken off the queue to read its sender,
    /// posted as [`Op::SignalArrived`] unless the kernel raised it, and queued again to itself
    /// as it was. One `rt_sigpending` when nothing is pending.
    ///
    /// Only signals the program's own mask (`program_mask`, restored next) lets through are
    /// taken: a process-directed signal this thread blocks stays on the process's queue, where
    /// the kernel hands it to a thread that does not block it. (Queued again to this thread, it
    /// stayed pending here for good: memcached's workers block SIGINT, and its main thread never
    /// saw a Ctrl-C.)
    pub(crate) fn tell_signals(&self, program_mask: u64) {
        let parked = crate::dispositions::caught() & PARKED_MASK;
        self.tell_pending(parked & !program_mask, true);
    }

    /// Tells the scheduler who sent the signals of `set` pending for this thread, about to be
    /// taken by a `sigwait` of that set (caught or not): as [`Gated::tell_signals`] does.
    pub(crate) fn tell_waited_signals(&self, set: u64) {
        self.tell_pending(set & PARKED_MASK, false);
    }

    /// The pending signals among `among`, each taken off the queue, posted unless the kernel
    /// raised it, and queued again to this thread (see [`Gated::tell_signals`]); `release`: as
    /// released, so that dara's signal entry runs the program's handler when it is delivered
    /// (not for a `sigwait`, which takes it).
    fn tell_pending(&self, among: u64, release: bool) {
        let mut pending: u64 = 0;
        // SAFETY: rt_sigpending writes one 8-byte set into a live local.
        unsafe { sys::syscall(libc::SYS_rt_sigpending, &[&mut pending as *mut u64 as u64, 8]) };
        let mut due = pending & among;
        while due != 0 {
            let sig = due.trailing_zeros() as i32 + 1;
            due &= due - 1;
            let only: u64 = 1 << (sig - 1);
            let mut info = [0u64; 16]; // a siginfo_t (128 bytes)
            let zero = timespec { tv_sec: 0, tv_nsec: 0 };
            // SAFETY: rt_sigtimedwait reads one set and a timeout and writes one siginfo_t, all live
            // locals; the signal is blocked, so this takes it off the queue.
            let got = unsafe { sys::syscall(libc::SYS_rt_sigtimedwait, &[&only as *const u64 as u64, info.as_mut_ptr() as u64, &zero as *const timespec as u64, 8]) };
            if got != i64::from(sig) {
                continue;
            }
            // siginfo_t: si_signo, si_errno, si_code (ints at 0, 4, 8), then the sender's pid at 16
            // and, for a sigqueue, its value at 24 (dara marks its own signals there).
            let code = info[1] as u32 as i32;
            let sender = info[2] as u32;
            let value = if code == libc::SI_QUEUE { info[3] } else { 0 };
            if code <= 0 && code != libc::SI_TIMER {
                // Sent by a process (kill, sigqueue, tgkill), not raised by the kernel or a
                // timer (a POSIX timer of the kernel's, e.g. on a CPU-time clock).
                post_and_park(self.slot, Request::SignalArrived { signal: sig, sender, code, value });
                handoff::resume(self.slot);
            }
            if release {
                crate::deferred_signals::release(sig);
            }
            // SAFETY: queues the same siginfo to this very thread (allowed for any si_code).
            unsafe { sys::syscall(libc::SYS_rt_tgsigqueueinfo, &[sys::getpid() as u64, sys::gettid() as u64, sig as u64, info.as_ptr() as u64]) };
        }
    }

    /// Posts the acquisitions the solo fast path made without a post (see [`solo`]).
    #[inline]
    fn flush_solo(&self) {
        solo::flush(|request| {
            post_and_park(self.slot, request);
            handoff::resume(self.slot);
        });
    }
}

impl Drop for Gated {
    fn drop(&mut self) {
        // Caught signals that arrived while the thread was parked are delivered now, as it
        // returns to the program: not inside the preload, where a handler's own hooked calls
        // would run unseen. In the SIGSYS handler the kernel restores the program's mask on
        // return from it, which delivers them then; dara is told of them here in both cases (a
        // signal from outside is recorded at this step).
        if let Some(program_mask) = PARKED_SAVED.with(|m| m.get()) {
            self.tell_signals(program_mask);
        }
        INSIDE.with(|g| g.set(false));
        if let Some(mask) = PARKED_SAVED.with(|m| m.take()) {
            if !in_trap() {
                sys::set_signal_mask(mask);
            }
        }
    }
}

impl Gated {
    /// Runs the handlers of the caught signals pending for this thread that its own mask lets
    /// through, now, as if it left the preload and came back (the kernel's restart of an
    /// interrupted call with `SA_RESTART`): the scheduler is told who sent them, the guard is
    /// left and the program's mask restored, so the handlers run, and their hooked calls post,
    /// as in program code; then the guard is taken again. The next post blocks the caught
    /// signals again. Nothing to do in the SIGSYS handler, whose return restores the mask.
    pub fn let_signals_through(&self) {
        if in_trap() {
            return;
        }
        let Some(mask) = PARKED_SAVED.with(|m| m.get()) else { return };
        // (Before the saved mask is dropped: telling posts, and a post with no saved mask would
        // save the parked one as the program's.)
        self.tell_signals(mask);
        PARKED_SAVED.with(|m| m.set(None));
        INSIDE.with(|g| g.set(false));
        // Handlers run as this returns.
        sys::set_signal_mask(mask);
        INSIDE.with(|g| g.set(true));
    }
}

/// Whether the current thread runs dara's SIGSYS handler (a trapped system call).
pub fn in_trap() -> bool {
    IN_TRAP.with(|t| t.get()) != 0
}

/// The program's own signal mask, saved while the thread is in the preload after a post (the
/// post blocked the caught signals); `None` when no post blocked any.
pub fn program_mask() -> Option<u64> {
    PARKED_SAVED.with(|m| m.get())
}

/// While alive, the current thread's posts wait under `mask` (a `ppoll`/`pselect`/`epoll_pwait`'s,
/// `None` for none): a pending caught signal that mask lets through ends the wait, as the kernel
/// applies the call's mask while it sleeps.
pub struct WaitMask(PhantomData<*const ()>);

impl WaitMask {
    pub fn apply(mask: Option<u64>) -> WaitMask {
        WAIT_MASK.with(|w| w.set(mask));
        WaitMask(PhantomData)
    }
}

impl Drop for WaitMask {
    fn drop(&mut self) {
        WAIT_MASK.with(|w| w.set(None));
    }
}

/// Makes the current thread gated on slot `index` (constructor and new-thread wrapper).
/// `stack_top` bounds the thread's own stack from above: every frame of the code the thread runs
/// from now on lies below it (0 if unknown).
pub fn adopt(index: u32, stack_top: usize) {
    STACK_TOP.with(|t| t.set(stack_top));
    EDGES.with(|e| e.set(0));
    SLOT.with(|s| s.set(index));
}

/// The stack top noted for the current thread by [`adopt`] (a forked child keeps its parent
/// thread's stack, so it keeps the bound too).
pub fn stack_top() -> usize {
    STACK_TOP.with(|t| t.get())
}

/// Posts `request` on `slot` for a thread that has just adopted it and is still inside the
/// preload (a forked child announcing itself), and parks until the grant.
pub fn post_on(slot: &Slot, request: Request) -> Grant {
    let grant = post_and_park(slot, request);
    handoff::resume(slot);
    grant
}

/// Whether `addr` lies in the current thread's live stack: between the stack pointer (less the
/// red zone) and the top noted by [`adopt`]. Such memory is private to the thread as far as
/// this thread's accesses go, so they are never scheduling points. Costs a register read and a
/// TLS load.
#[inline(always)]
pub fn on_own_stack(addr: u64) -> bool {
    let sp: u64;
    // SAFETY: reads the stack pointer into a register; no memory is touched.
    unsafe { core::arch::asm!("mov {}, rsp", out(reg) sp, options(nomem, nostack, preserves_flags)) };
    let top = STACK_TOP.with(|t| t.get()) as u64;
    addr >= sp.saturating_sub(RED_ZONE) && addr < top
}

/// Counts one coverage edge for `--preempt-on edges:N`; true every `quantum`-th edge, when the
/// thread should post `EdgeQuantum`.
#[inline(always)]
pub fn edge_quantum_due(quantum: u32) -> bool {
    EDGES.with(|e| {
        let n = e.get() + 1;
        if n >= quantum {
            e.set(0);
            true
        } else {
            e.set(n);
            false
        }
    })
}

/// Virtual time of the current thread's last grant, for answers that cannot post (0 before any).
pub fn last_now() -> u64 {
    LAST_NOW.with(|n| n.get())
}

/// Marks the current thread as inside a signal handler of dara's (SIGSYS, or SIGSEGV for the
/// time-stamp counter) that trapped the instruction at `pc` (not 0): the kernel restores the
/// program's mask when it returns, and what the handler posts was called from `pc`.
pub fn enter_trap(pc: u64) {
    IN_TRAP.with(|t| t.set(pc));
}

/// The current thread has left dara's signal handler ([`enter_trap`]).
pub fn leave_trap() {
    IN_TRAP.with(|t| t.set(0));
}

/// Whether the current thread owns a slot (whatever the guard says).
pub fn has_slot() -> bool {
    SLOT.with(|s| s.get()) != NO_SLOT
}

/// Wakes the scheduler to look at the slots again (a slot changed state without a post).
pub fn wake_scheduler() {
    if let Some(header) = region::header() {
        handoff::wake_scheduler(&header.sched_wake, &Parking);
    }
}

/// The kernel's futex for the handoff. A wait lasts at most a second; then it checks that the
/// scheduler is still there (and the execution not over) before the protocol waits again.
struct Parking;

impl Futex<AtomicU32> for Parking {
    #[inline(always)]
    fn wait(&self, word: &AtomicU32, expected: u32) -> Waited {
        const ONE_SECOND: timespec = timespec { tv_sec: 1, tv_nsec: 0 };
        if sys::futex_wait(word, expected, Some(&ONE_SECOND)) == -(libc::ETIMEDOUT as i64) {
            check_scheduler_alive();
            return Waited::TimedOut;
        }
        Waited::Woken
    }

    #[inline(always)]
    fn wake(&self, word: &AtomicU32, count: u32) {
        sys::futex_wake(word, count);
    }
}

/// The protocol of `dara_abi::handoff`: write the request, publish it, wake the scheduler, park
/// until GRANTED. Leaves the slot in GRANTED; the caller decides the next state.
/// Every post goes through here: the one place a request becomes slot words.
fn post_and_park(slot: &Slot, request: Request) -> Grant {
    if region::header().is_some_and(|h| h.call_sites.load(core::sync::atomic::Ordering::Relaxed) != 0) {
        let site = match IN_TRAP.with(|t| t.get()) {
            0 => crate::call_site::program_caller(STACK_TOP.with(|t| t.get()) as u64),
            trapped => trapped,
        };
        slot.call_site.store(site, core::sync::atomic::Ordering::Relaxed);
    }
    let (op, args) = request.encode();
    handoff::write_request(slot, op as u32, args);
    crate::unposted::publish(slot);
    // Caught signals wait while the thread is parked: a handler must not run user code beside
    // the token holder, and a signal pending at the grant (a child's SIGCHLD: the scheduler lets
    // the next thread go only once an exiting child is a zombie) is delivered right after it, at
    // the same point of every run. SIGSYS and the synchronous fault signals stay open; signals at
    // their default action too (a terminated process dies at once, and the scheduler waits).
    // The mask stays so until the thread leaves the preload (see `Gated::drop`).
    // Coming back, the thread tells the scheduler who sent any of them (`Gated::tell_signals`:
    // dara records a signal from outside). A program that catches no signal (most) pays nothing
    // for this; one that does pays an `rt_sigpending` per post besides the two mask changes.
    // Signals from outside held back since the thread's last post are blocked only by dara
    // (see `deferred_signals`): the program's own mask lets them through, and the scheduler is
    // told to look at them (one may end this very wait).
    let held = crate::deferred_signals::take_deferred();
    slot.held_signals.store(u32::from(held != 0), Ordering::Relaxed);
    let parked = crate::dispositions::caught() & PARKED_MASK;
    if parked != 0 && PARKED_SAVED.with(|m| m.get()).is_none() {
        let mut saved_mask: u64 = 0;
        // SAFETY: rt_sigprocmask reads and writes one 8-byte signal set each, both live locals.
        unsafe { sys::syscall(libc::SYS_rt_sigprocmask, &[libc::SIG_BLOCK as u64, &parked as *const u64 as u64, &mut saved_mask as *mut u64 as u64, 8]) };
        let saved_mask = saved_mask & !held;
        PARKED_SAVED.with(|m| m.set(Some(saved_mask)));
    }
    // What the program's own mask lets through decides whether a pending signal interrupts this
    // wait (the kernel's view of the mask now holds the parked signals too). Unknown (the program
    // catches nothing): every signal counts as blocked.
    // A ppoll/pselect/epoll_pwait waits under its own mask instead (make's jobserver wait lets
    // SIGCHLD through only there).
    let waits_under = WAIT_MASK.with(|w| w.get()).or_else(program_mask);
    slot.program_mask.store(waits_under.unwrap_or(u64::MAX), Ordering::Relaxed);
    // (A slot lies in the region, which is never unmapped: the header is there.)
    let Some(header) = region::header() else { sys::die(b"dara: a post without the region\n", 125) };
    handoff::publish(slot, &header.sched_wake, &Parking);
    let answer = handoff::await_grant(slot, &Parking);
    let grant = Grant { result: answer.result as i64, now_ns: answer.now_ns };
    LAST_NOW.with(|n| n.set(grant.now_ns));
    UNPOSTED_CLOCK_READS.with(|n| n.set(0));
    grant
}

/// Coarse steps: whether the current thread's next clock read may be answered without a post,
/// from its last grant's virtual time (the clock does not move while a thread holds the token);
/// counts the read if so.
#[inline]
pub fn clock_read_unposted() -> bool {
    if IN_VDSO_CLOCK.with(|f| f.get()) {
        return true;
    }
    if !crate::solo::coarse() {
        return false;
    }
    UNPOSTED_CLOCK_READS.with(|n| {
        let reads = n.get();
        n.set(reads + 1);
        reads < dara_abi::clock::READS_PER_POST
    })
}

/// Ends the process if the execution is over or the scheduler is gone: a parked thread must not
/// outlive dara.
fn check_scheduler_alive() {
    let Some(header) = region::header() else {
        return;
    };
    // (The scheduler's pid is one of dara's PID namespace, not of the execution's.)
    let gone = header.scheduler_pid != 0 && sys::host_process_gone(header.scheduler_pid);
    if header.shutdown.load(Ordering::Acquire) != 0 || gone {
        sys::exit_group(ORPHANED_EXIT);
    }
}
