//! What every operation does in the model: when its `Run` choice is enabled, and what applying
//! `Run` or `Timeout` changes and returns.
//!
//! Results are what the hook hands back to the program: 0 or a positive errno for pthread-style
//! operations (as glibc returns them), a negative errno for raw futex calls (as the syscall
//! returns them).
//!
//! A `Timeout` means "the deadline passed before the operation completed". Where POSIX or the
//! kernel check availability before the clock (mutex and rwlock timed locks, `sem_timedwait`, the
//! futex word comparison), a `Timeout` on an operation that can complete right now completes it
//! (after the clock jump) instead of failing: glibc never answers ETIMEDOUT to a timed lock of a
//! free mutex, so neither does the model.
//!
//! Objects whose value the model has never seen (a semaphore or barrier initialised statically or
//! by a process the model did not watch) are read from target memory when first applied, which is
//! why `Run` of a `SemWait` on an unknown semaphore is enabled: applying it learns the value, and
//! if that is 0 the thread stays pending (`Effect::Blocked`) until a post.
use dara_abi::{Addr, FutexMatch, HeldKind, MutexKind};

use super::objects::{Barrier, FutexWaiter, ObjKey, Once, RwLock};
use super::thread::{Phase, Thread, Wait};
use super::{MemoryReader, Model, Request};
use crate::choice::{ProcessId, ThreadId};

const EAGAIN: i64 = libc::EAGAIN as i64;
const EDEADLK: i64 = libc::EDEADLK as i64;
const ETIMEDOUT: i64 = libc::ETIMEDOUT as i64;
/// glibc's `PTHREAD_BARRIER_SERIAL_THREAD` (not exported by the `libc` crate).
pub(crate) const BARRIER_SERIAL_THREAD: i64 = -1;
/// Offset of `count` in glibc's `struct pthread_barrier { in, current_round, count, .. }`.
const GLIBC_BARRIER_COUNT_OFFSET: u64 = 8;
/// A futex bitset of 0 (not given) means "any waiter", like plain `FUTEX_WAIT`/`FUTEX_WAKE`.
const FUTEX_BITSET_ANY: u32 = u32::MAX;

/// What applying a choice did, before it is turned into an [`super::Effect`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// The operation completed with this result.
    Grant(i64),
    /// The operation took effect and the thread now waits.
    Park(Wait),
    /// The operation could not take effect after all (it needed a value only memory could tell):
    /// the thread stays pending.
    StayPending,
}

/// The deadline of the timer a thread offers as a `Timeout` choice, if any: its request's
/// deadline while it is still pending or waiting on a condvar or futex.
pub(crate) fn timer(thread: &Thread) -> Option<u64> {
    match thread.phase {
        Phase::Pending(r) | Phase::Waiting(r, Wait::Cond { .. } | Wait::Futex) => r.deadline(),
        _ => None,
    }
}

/// The bitset a futex op's [`FutexMatch`] wakes or waits for.
fn bitset(matching: FutexMatch) -> u32 {
    match matching.bitset {
        0 => FUTEX_BITSET_ANY,
        b => b,
    }
}

/// The mutex a condition wait releases and re-acquires (`None` for any other request).
fn cond_mutex(r: Request) -> Option<(Addr, MutexKind)> {
    match r {
        Request::CondWait { mutex, mutex_kind, .. } => Some((mutex, mutex_kind)),
        _ => None,
    }
}

impl Model {
    /// How many `Run` alternatives `thread` offers now: 0 when it cannot proceed, more than one
    /// only for a `CondSignal` with several waiters (one alternative per waiter).
    pub(super) fn run_alternatives(&self, me: ThreadId, thread: &Thread) -> u32 {
        let enabled = match thread.phase {
            Phase::Pending(r) => match r {
                _ if r.op().is_net() => return self.net_alternatives(me, &r),
                Request::CondSignal { cond } => {
                    let waiters = self.objects.conds.get(&self.objects.key(thread.process, cond.0)).map_or(0, |c| c.waiters.len());
                    return waiters.max(1) as u32;
                }
                Request::ProcessWait { target, options } => return self.wait_alternatives(thread.process, target, options),
                _ => self.pending_enabled(me, thread.process, r),
            },
            Phase::Waiting(r, Wait::CondReacquire { .. }) => {
                cond_mutex(r).is_some_and(|(mutex, kind)| self.mutex_lock_result(me, thread.process, mutex, kind).is_some())
            }
            Phase::Waiting(_, Wait::Woken { .. }) => true,
            Phase::Waiting(_, Wait::Cond { .. } | Wait::Futex | Wait::Barrier) => false,
            Phase::Running | Phase::Exited => false,
        };
        u32::from(enabled)
    }

    /// Whether a pending request's `Run` can be taken now.
    fn pending_enabled(&self, me: ThreadId, process: ProcessId, r: Request) -> bool {
        let key = |addr: Addr| self.objects.key(process, addr.0);
        match r {
            Request::ThreadJoin { target } => target == me || self.has_exited(target),
            Request::MutexLock { mutex, kind, .. } => self.mutex_lock_result(me, process, mutex, kind).is_some(),
            Request::RwReadLock { lock, .. } => self.rwlock_result(key(lock), |l| l.read_result(me)).is_some(),
            Request::RwWriteLock { lock, .. } => self.rwlock_result(key(lock), |l| l.write_result(me)).is_some(),
            Request::OnceBegin { once } => !matches!(self.objects.onces.get(&key(once)), Some(Once::Running(_))),
            // Unknown value: enabled, applying it reads memory.
            Request::SemWait { sem, .. } => self.objects.sems.get(&key(sem)) != Some(&0),
            Request::Sleep { .. } | Request::Unsupported(_) | Request::SigSuspend { .. } | Request::SigWait { .. } => false,
            Request::FileLock { .. } => self.file_locks.may_retry(me),
            _ => true,
        }
    }

    fn has_exited(&self, slot: ThreadId) -> bool {
        self.threads.get(&slot).is_some_and(|t| !t.is_live())
    }

    fn mutex_lock_result(&self, me: ThreadId, process: ProcessId, mutex: Addr, kind: MutexKind) -> Option<i64> {
        match self.objects.mutexes.get(&self.objects.key(process, mutex.0)) {
            Some(m) => m.lock_result(me, kind),
            None => Some(0),
        }
    }

    /// A rwlock query; a rwlock the model has not seen yet is free.
    fn rwlock_result(&self, k: ObjKey, query: impl Fn(&RwLock) -> Option<i64>) -> Option<i64> {
        self.objects.rwlocks.get(&k).map_or(Some(0), query)
    }

    /// `me` took a lock without a post (`Request::Held`: a solo process, or coarse steps): record
    /// it as `me`'s, `depth` times. Only the token holder runs, so the lock must be free in the
    /// model or already `me`'s; anything else means the model and the program disagree.
    pub fn adopt(&mut self, me: ThreadId, lock: Addr, what: HeldKind, depth: u64) -> Result<(), String> {
        let addr = lock.0;
        let Some((process, _)) = self.thread_parts(me) else { return Err(format!("thread {me} is not known")) };
        // A lock taken without a post is a process-private one (the preload's solo path).
        let k = ObjKey::local(process, addr);
        for _ in 0..depth {
            let free = match what {
                HeldKind::Mutex => {
                    let m = self.objects.mutexes.entry(k).or_default();
                    let free = m.owner.is_none_or(|o| o == me);
                    if free {
                        m.acquire(me);
                    }
                    free
                }
                HeldKind::Read => {
                    let l = self.objects.rwlocks.entry(k).or_default();
                    let free = l.writer.is_none();
                    if free {
                        l.acquire_read(me);
                    }
                    free
                }
                HeldKind::Write => {
                    let l = self.objects.rwlocks.entry(k).or_default();
                    let free = l.writer.is_none() && l.readers.is_empty();
                    if free {
                        l.acquire_write(me);
                    }
                    free
                }
            };
            if !free {
                return Err(format!("thread {me} took the lock at {addr:#x} without a scheduling point, but dara's model has it held by another thread"));
            }
        }
        Ok(())
    }

    fn thread_parts(&self, me: ThreadId) -> Option<(ProcessId, Phase)> {
        self.threads.get(&me).map(|t| (t.process, t.phase))
    }

    /// Applies `Run` alternative `alt` of thread `me` (already checked to be enabled).
    pub(super) fn run(&mut self, me: ThreadId, alt: u32, mem: &mut dyn MemoryReader) -> Step {
        match self.thread_parts(me) {
            Some((process, Phase::Pending(r))) => self.run_pending(me, process, r, alt, mem),
            Some((process, Phase::Waiting(r, Wait::CondReacquire { timed_out }))) => {
                let err = self.reacquire(me, process, r);
                Step::Grant(if err != 0 { err } else if timed_out { ETIMEDOUT } else { 0 })
            }
            Some((_, Phase::Waiting(_, Wait::Woken { result }))) => Step::Grant(result),
            _ => Step::StayPending,
        }
    }

    fn run_pending(&mut self, me: ThreadId, process: ProcessId, r: Request, alt: u32, mem: &mut dyn MemoryReader) -> Step {
        if r.op().is_net() {
            return Step::Grant(self.net_run(me, &r, alt));
        }
        let k = self.objects.key(process, r.object().map_or(0, |a| a.0));
        let obj = &mut self.objects;
        match r {
            Request::ProcessStart { .. }
            | Request::ThreadStart { .. }
            | Request::ThreadCreate
            | Request::ThreadDetach { .. }
            | Request::ThreadExit
            | Request::ProcessExit { .. }
            | Request::Yield
            | Request::EdgeQuantum
            | Request::Probe { .. }
            | Request::Fault { .. }
            | Request::SignalArrived { .. }
            | Request::Held { .. }
            | Request::ProcessFork
            | Request::ProcessExec { .. }
            | Request::ProcessKill { .. }
            // The preload tries the lock again (and posts again while it is still taken).
            | Request::FileLock { .. }
            | Request::MemoryRead { .. }
            | Request::MemoryWrite { .. }
            | Request::ClockRead
            | Request::NameLookup { .. } => Step::Grant(0),
            // Never enabled: only an `Interrupt` ends it (see `signals.rs`).
            Request::SigSuspend { .. } | Request::SigWait { .. } => Step::StayPending,
            Request::ThreadJoin { target } => Step::Grant(if target == me { EDEADLK } else { 0 }),
            Request::ProcessWait { target, options } => Step::Grant(self.apply_wait(process, target, options, alt)),

            Request::MutexLock { kind, .. } => {
                let m = obj.mutexes.entry(k).or_default();
                if m.free_from_the_dead() {
                    return Step::Grant(m.take_from_the_dead(me));
                }
                match m.lock_result(me, kind) {
                    Some(0) => {
                        m.acquire(me);
                        Step::Grant(0)
                    }
                    Some(err) => Step::Grant(err),
                    None => Step::StayPending,
                }
            }
            Request::MutexTryLock { kind, .. } => Step::Grant(obj.mutexes.entry(k).or_default().try_lock(me, kind)),
            Request::MutexUnlock { kind, .. } => Step::Grant(obj.mutexes.entry(k).or_default().unlock(me, kind)),

            Request::RwReadLock { .. } => {
                let l = obj.rwlocks.entry(k).or_default();
                match l.read_result(me) {
                    Some(0) => {
                        l.acquire_read(me);
                        Step::Grant(0)
                    }
                    Some(err) => Step::Grant(err),
                    None => Step::StayPending,
                }
            }
            Request::RwWriteLock { .. } => {
                let l = obj.rwlocks.entry(k).or_default();
                match l.write_result(me) {
                    Some(0) => {
                        l.acquire_write(me);
                        Step::Grant(0)
                    }
                    Some(err) => Step::Grant(err),
                    None => Step::StayPending,
                }
            }
            Request::RwTryReadLock { .. } => Step::Grant(obj.rwlocks.entry(k).or_default().try_read(me)),
            Request::RwTryWriteLock { .. } => Step::Grant(obj.rwlocks.entry(k).or_default().try_write(me)),
            Request::RwUnlock { .. } => Step::Grant(obj.rwlocks.entry(k).or_default().unlock(me)),

            Request::CondWait { .. } => self.begin_cond_wait(me, r),
            Request::CondSignal { .. } => {
                let cond = obj.conds.entry(k).or_default();
                cond.signals += 1;
                let woken = if cond.waiters.is_empty() {
                    cond.unheard += 1;
                    None
                } else {
                    let i = (alt as usize).min(cond.waiters.len() - 1);
                    Some(cond.waiters.remove(i))
                };
                if let Some(w) = woken {
                    self.wake(w, Wait::CondReacquire { timed_out: false });
                }
                Step::Grant(0)
            }
            Request::CondBroadcast { .. } => {
                let cond = obj.conds.entry(k).or_default();
                cond.signals += 1;
                if cond.waiters.is_empty() {
                    cond.unheard += 1;
                }
                for w in std::mem::take(&mut cond.waiters) {
                    self.wake(w, Wait::CondReacquire { timed_out: false });
                }
                Step::Grant(0)
            }

            Request::BarrierInit { count, .. } => {
                obj.barriers.entry(k).or_default().count = Some(count.max(1));
                Step::Grant(0)
            }
            Request::BarrierWait { barrier } => self.barrier_wait(me, process, barrier.0, mem),

            Request::OnceBegin { .. } => match obj.onces.get(&k) {
                None => {
                    obj.onces.insert(k, Once::Running(me));
                    Step::Grant(1)
                }
                Some(Once::Done) => Step::Grant(0),
                Some(Once::Running(_)) => Step::StayPending,
            },
            Request::OnceDone { .. } => {
                obj.onces.insert(k, Once::Done);
                Step::Grant(0)
            }

            Request::SemInit { value, .. } => {
                obj.sems.insert(k, u64::from(value));
                Step::Grant(0)
            }
            Request::SemWait { sem, .. } => {
                if self.sem_take(process, sem.0, mem) {
                    Step::Grant(0)
                } else {
                    Step::StayPending
                }
            }
            Request::SemTryWait { sem } => Step::Grant(if self.sem_take(process, sem.0, mem) { 0 } else { EAGAIN }),
            Request::SemPost { sem } => {
                let v = self.sem_value(k, process, sem.0, mem);
                self.objects.sems.insert(k, v.saturating_add(1));
                Step::Grant(0)
            }

            Request::FutexWait { addr, expected, matching, .. } => {
                if mem.read_u32(process, addr.0) != Some(expected) {
                    return Step::Grant(-EAGAIN);
                }
                let waiter = FutexWaiter { thread: me, bitset: bitset(matching) };
                obj.futexes.entry(k).or_default().push(waiter);
                Step::Park(Wait::Futex)
            }
            Request::FutexWake { count, matching, .. } => {
                let woken = obj.futex_wake(k, u64::from(count), bitset(matching));
                for &w in &woken {
                    self.wake(w, Wait::Woken { result: 0 });
                }
                Step::Grant(woken.len() as i64)
            }

            // Never enabled; network ops were handled above.
            Request::Sleep { .. } | Request::Unsupported(_) => Step::StayPending,
            Request::NetRecv { .. }
            | Request::NetSend { .. }
            | Request::NetAccept { .. }
            | Request::NetConnect { .. }
            | Request::NetPoll { .. }
            | Request::NetEpollWait { .. }
            | Request::NetClose { .. }
            | Request::NetListen { .. }
            | Request::FifoOpen { .. } => Step::StayPending,
            // Answered at once by the driver (its `timerfds`), never posted to the model.
            Request::TimerCreate { .. } | Request::TimerSet { .. } | Request::TimerGet { .. } => Step::StayPending,
        }
    }

    /// Applies the chosen thread's `Timeout` (the clock is already at its deadline).
    pub(super) fn time_out(&mut self, me: ThreadId, mem: &mut dyn MemoryReader) -> Step {
        let Some(thread) = self.threads.get(&me) else { return Step::StayPending };
        if let Some(deadline) = timer(thread) {
            self.clock.advance_to(deadline);
        }
        match self.thread_parts(me) {
            Some((_, Phase::Pending(r))) if r.op().is_net() => Step::Grant(self.net_timeout(me, &r)),
            Some((process, Phase::Pending(r))) => match r {
                Request::Sleep { .. } => Step::Grant(0),
                Request::SigWait { .. } => Step::Grant(-EAGAIN),
                Request::CondWait { mutex, mutex_kind, .. } => {
                    let m = self.objects.key(process, mutex.0);
                    self.objects.mutexes.entry(m).or_default().unlock(me, mutex_kind);
                    self.cond_timed_out(me, process, r)
                }
                Request::FutexWait { addr, expected, .. } => match mem.read_u32(process, addr.0) {
                    Some(v) if v == expected => Step::Grant(-ETIMEDOUT),
                    _ => Step::Grant(-EAGAIN),
                },
                Request::MutexLock { .. } | Request::RwReadLock { .. } | Request::RwWriteLock { .. } | Request::SemWait { .. } => {
                    if self.pending_enabled(me, process, r) {
                        match self.run_pending(me, process, r, 0, mem) {
                            Step::StayPending => Step::Grant(ETIMEDOUT),
                            done => done,
                        }
                    } else {
                        Step::Grant(ETIMEDOUT)
                    }
                }
                _ => Step::StayPending,
            },
            Some((process, Phase::Waiting(r, Wait::Cond { .. }))) => {
                self.objects.forget_waiter(me);
                self.cond_timed_out(me, process, r)
            }
            Some((_, Phase::Waiting(_, Wait::Futex))) => {
                self.objects.forget_waiter(me);
                Step::Grant(-ETIMEDOUT)
            }
            _ => Step::StayPending,
        }
    }

    /// A condvar wait takes effect: the waiter joins the queue and releases the mutex (the
    /// preload already released the real one the way glibc does; this mirrors it).
    pub(super) fn begin_cond_wait(&mut self, me: ThreadId, r: Request) -> Step {
        let Some((process, _)) = self.thread_parts(me) else { return Step::StayPending };
        let Request::CondWait { cond, mutex, mutex_kind, .. } = r else { return Step::StayPending };
        let (c, m) = (self.objects.key(process, cond.0), self.objects.key(process, mutex.0));
        self.objects.mutexes.entry(m).or_default().unlock(me, mutex_kind);
        let cond = self.objects.conds.entry(c).or_default();
        cond.waiters.push(me);
        Step::Park(Wait::Cond { signals_seen: cond.signals })
    }

    /// A condvar wait whose timer fired: it re-acquires the mutex now if it can, else waits for it.
    fn cond_timed_out(&mut self, me: ThreadId, process: ProcessId, r: Request) -> Step {
        if cond_mutex(r).is_some_and(|(mutex, kind)| self.mutex_lock_result(me, process, mutex, kind).is_some()) {
            let err = self.reacquire(me, process, r);
            Step::Grant(if err != 0 { err } else { ETIMEDOUT })
        } else {
            Step::Park(Wait::CondReacquire { timed_out: true })
        }
    }

    /// Takes back the mutex of a finished `CondWait` request; a robust mutex's error
    /// (`EOWNERDEAD`, `ENOTRECOVERABLE`) or 0.
    fn reacquire(&mut self, me: ThreadId, process: ProcessId, r: Request) -> i64 {
        let Some((mutex, kind)) = cond_mutex(r) else { return 0 };
        let k = self.objects.key(process, mutex.0);
        self.objects.mutexes.entry(k).or_default().reacquire(me, kind)
    }

    /// Moves a parked thread (other than the chosen one) to `wait`.
    fn wake(&mut self, id: ThreadId, wait: Wait) {
        if self.woken_in_handler(id, wait) {
            return;
        }
        if let Some(t) = self.threads.get_mut(&id) {
            if let Phase::Waiting(r, _) = t.phase {
                t.phase = Phase::Waiting(r, wait);
            }
        }
    }

    fn barrier_wait(&mut self, me: ThreadId, process: ProcessId, addr: u64, mem: &mut dyn MemoryReader) -> Step {
        let k = self.objects.key(process, addr);
        let barrier: &mut Barrier = self.objects.barriers.entry(k).or_default();
        let count = *barrier.count.get_or_insert_with(|| {
            // Unreadable or zero: treat as a barrier of one rather than block forever on a count
            // the model cannot know.
            mem.read_u32(process, addr.wrapping_add(GLIBC_BARRIER_COUNT_OFFSET)).unwrap_or(1).max(1)
        });
        if barrier.waiting.len() + 1 < count as usize {
            barrier.waiting.push(me);
            return Step::Park(Wait::Barrier);
        }
        for w in std::mem::take(&mut barrier.waiting) {
            self.wake(w, Wait::Woken { result: 0 });
        }
        Step::Grant(BARRIER_SERIAL_THREAD)
    }

    /// A semaphore's value, read from memory at `addr` of `process` (low 32 bits of glibc's
    /// 64-bit `data`) when unknown.
    fn sem_value(&mut self, k: ObjKey, process: ProcessId, addr: u64, mem: &mut dyn MemoryReader) -> u64 {
        *self.objects.sems.entry(k).or_insert_with(|| u64::from(mem.read_u32(process, addr).unwrap_or(0)))
    }

    /// Decrements the semaphore at `addr` of `process` if it is positive; whether it did.
    fn sem_take(&mut self, process: ProcessId, addr: u64, mem: &mut dyn MemoryReader) -> bool {
        let k = self.objects.key(process, addr);
        let v = self.sem_value(k, process, addr, mem);
        if v > 0 {
            self.objects.sems.insert(k, v - 1);
        }
        v > 0
    }
}
