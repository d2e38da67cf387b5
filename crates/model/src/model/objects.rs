//! The synchronization objects the model tracks, and the rules of each one taken alone.
//!
//! Objects are keyed by `(process, address)`: address spaces are per process, so the same address
//! in two processes is two objects, unless the object is process-shared and lives in memory
//! processes share (a `sem_open` file, a shared mapping a fork passed on, an LMDB lock file): then
//! it is keyed by that memory and its offset there, wherever each process maps it ([`Space`];
//! `sharing.rs` tells which). An object springs into existence (free, unlocked, no waiters)
//! the first time an operation names it; objects initialised statically in the target
//! (`PTHREAD_MUTEX_INITIALIZER`) therefore need no init operation. Semaphores and barriers carry a
//! value the program chose at init time: when their init was not seen, the model reads it from
//! target memory on first use (see `ops.rs`).
//!
//! The rules mirror glibc, including its answers to misuse (EDEADLK, EPERM, EBUSY), because the
//! hook hands the model's result to the program in place of glibc's.
//! Every collection is ordered (`BTreeMap`, or `Vec` in arrival order) so iteration is
//! deterministic.
use std::collections::BTreeMap;

use dara_abi::MutexKind;

use crate::choice::{ProcessId, ThreadId};

const EBUSY: i64 = libc::EBUSY as i64;
const EOWNERDEAD: i64 = libc::EOWNERDEAD as i64;
const ENOTRECOVERABLE: i64 = libc::ENOTRECOVERABLE as i64;
const EDEADLK: i64 = libc::EDEADLK as i64;
const EPERM: i64 = libc::EPERM as i64;

/// Identity of an object: which memory, which address in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct ObjKey {
    pub space: Space,
    /// The address in the process, or the offset in the shared memory.
    pub addr: u64,
}

impl ObjKey {
    /// The object at `addr` in `process`'s own memory.
    pub fn local(process: ProcessId, addr: u64) -> ObjKey {
        ObjKey { space: Space::Process(process), addr }
    }
}

/// The memory an object lives in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Space {
    /// A process's own memory.
    Process(ProcessId),
    /// Memory several processes share, numbered in the order the execution first met it (so the
    /// same schedule numbers it alike in every run, whatever the file's inode).
    Shared(u32),
}

/// A pthread mutex. The kind is not stored: every operation carries it (the preload reads it
/// from the mutex itself), so a mutex whose init the model never saw still behaves right.
#[derive(Clone, Debug, Default)]
pub(crate) struct Mutex {
    pub owner: Option<ThreadId>,
    /// Lock depth of a recursive mutex; 1 for any held mutex of another kind.
    /// Invariant: `count == 0` iff `owner.is_none()`.
    pub count: u32,
    /// A robust mutex (`PTHREAD_MUTEX_ROBUST`, read from glibc's `__kind` at each post): when its
    /// owner dies, the kernel marks it and the next locker gets it with `EOWNERDEAD`.
    pub robust: bool,
    /// Its owner died holding it: free, and the next lock or try-lock returns `EOWNERDEAD`.
    pub owner_died: bool,
    /// Its holder took it with `EOWNERDEAD` and has not made it consistent (read from glibc's
    /// `__owner` at the holder's unlock post, see `robust.rs`): that unlock makes it not
    /// recoverable.
    pub inconsistent: bool,
    /// Unlocked while inconsistent: every lock and try-lock fails with `ENOTRECOVERABLE`.
    pub not_recoverable: bool,
}

impl Mutex {
    /// What a blocking lock by `me` returns right now, or `None` if it has to wait (held by
    /// another thread, or relocking a normal mutex, which deadlocks in glibc too).
    pub fn lock_result(&self, me: ThreadId, kind: MutexKind) -> Option<i64> {
        if self.not_recoverable {
            return Some(ENOTRECOVERABLE);
        }
        match self.owner {
            None => Some(0),
            Some(owner) if owner == me => match kind {
                MutexKind::Recursive => Some(0),
                MutexKind::ErrorCheck => Some(EDEADLK),
                MutexKind::Normal => None,
            },
            Some(_) => None,
        }
    }

    /// Takes the mutex (or one more level of it); only after `lock_result` returned `Some(0)`.
    pub fn acquire(&mut self, me: ThreadId) {
        debug_assert!(self.owner.is_none() || self.owner == Some(me));
        if self.owner == Some(me) {
            self.count += 1;
        } else {
            self.owner = Some(me);
            self.count = 1;
        }
    }

    /// Whether the mutex is free because its owner died holding it (robust).
    pub fn free_from_the_dead(&self) -> bool {
        self.owner.is_none() && self.owner_died
    }

    /// Takes a mutex whose owner died: `EOWNERDEAD`, as glibc's lock answers once it has it.
    pub fn take_from_the_dead(&mut self, me: ThreadId) -> i64 {
        self.owner_died = false;
        self.acquire(me);
        EOWNERDEAD
    }

    /// The owner of a robust mutex died (its thread or process ended) holding it.
    pub fn owner_gone(&mut self) {
        self.owner = None;
        self.count = 0;
        self.owner_died = true;
        self.inconsistent = false;
    }

    /// What a condition wait re-taking the mutex gets besides its own result: `EOWNERDEAD`
    /// (taken) when the owner died, `ENOTRECOVERABLE` (not taken) when it is not recoverable, as
    /// glibc's `pthread_cond_wait` returns its mutex lock's error; else 0, taken.
    pub fn reacquire(&mut self, me: ThreadId, kind: MutexKind) -> i64 {
        if self.free_from_the_dead() {
            return self.take_from_the_dead(me);
        }
        match self.lock_result(me, kind) {
            Some(0) => {
                self.acquire(me);
                0
            }
            Some(ENOTRECOVERABLE) => ENOTRECOVERABLE,
            _ => 0,
        }
    }

    pub fn try_lock(&mut self, me: ThreadId, kind: MutexKind) -> i64 {
        if self.not_recoverable {
            return ENOTRECOVERABLE;
        }
        if self.free_from_the_dead() {
            return self.take_from_the_dead(me);
        }
        match self.owner {
            None => {
                self.acquire(me);
                0
            }
            Some(owner) if owner == me && kind == MutexKind::Recursive => {
                self.acquire(me);
                0
            }
            Some(_) => EBUSY,
        }
    }

    /// glibc: errorcheck, recursive and robust mutexes check the owner (EPERM otherwise, also
    /// when free); a normal mutex is released by whoever unlocks it. A robust mutex its holder
    /// left inconsistent becomes not recoverable when released.
    pub fn unlock(&mut self, me: ThreadId, kind: MutexKind) -> i64 {
        let checked = kind != MutexKind::Normal || self.robust;
        if self.owner == Some(me) {
            self.count = self.count.saturating_sub(1);
            if self.count == 0 || kind != MutexKind::Recursive {
                self.owner = None;
                self.count = 0;
                self.not_recoverable |= std::mem::take(&mut self.inconsistent);
            }
            0
        } else if checked {
            EPERM
        } else {
            self.owner = None;
            self.count = 0;
            0
        }
    }
}

/// A pthread rwlock with glibc's default policy (readers first: a reader is admitted whenever no
/// writer holds the lock, even if writers wait).
#[derive(Clone, Debug, Default)]
pub(crate) struct RwLock {
    pub writer: Option<ThreadId>,
    /// Read locks held, per thread (a thread may hold several). Never holds a zero count.
    pub readers: BTreeMap<ThreadId, u32>,
}

impl RwLock {
    /// What a blocking read lock returns now, `None` if it has to wait. glibc answers EDEADLK
    /// when the caller is the writer.
    pub fn read_result(&self, me: ThreadId) -> Option<i64> {
        match self.writer {
            Some(w) if w == me => Some(EDEADLK),
            Some(_) => None,
            None => Some(0),
        }
    }

    /// Same for a write lock. A reader asking to write waits for itself (glibc does not detect
    /// that), which the deadlock report then shows.
    pub fn write_result(&self, me: ThreadId) -> Option<i64> {
        match self.writer {
            Some(w) if w == me => Some(EDEADLK),
            Some(_) => None,
            None if self.readers.is_empty() => Some(0),
            None => None,
        }
    }

    pub fn acquire_read(&mut self, me: ThreadId) {
        debug_assert!(self.writer.is_none());
        *self.readers.entry(me).or_insert(0) += 1;
    }

    pub fn acquire_write(&mut self, me: ThreadId) {
        debug_assert!(self.writer.is_none() && self.readers.is_empty());
        self.writer = Some(me);
    }

    pub fn try_read(&mut self, me: ThreadId) -> i64 {
        if self.writer.is_some() {
            return EBUSY;
        }
        self.acquire_read(me);
        0
    }

    pub fn try_write(&mut self, me: ThreadId) -> i64 {
        if self.writer.is_some() || !self.readers.is_empty() {
            return EBUSY;
        }
        self.acquire_write(me);
        0
    }

    /// Releases what `me` holds: its write lock, else one of its read locks. glibc keeps only an
    /// anonymous reader count, so an unlock by a thread holding nothing drops some other reader's
    /// lock (the lowest thread id here, to stay deterministic).
    pub fn unlock(&mut self, me: ThreadId) -> i64 {
        if self.writer == Some(me) {
            self.writer = None;
            return 0;
        }
        let reader = if self.readers.contains_key(&me) {
            Some(me)
        } else {
            self.readers.keys().next().copied()
        };
        if let Some(r) = reader {
            if let Some(n) = self.readers.get_mut(&r) {
                *n -= 1;
                if *n == 0 {
                    self.readers.remove(&r);
                }
            }
        }
        0
    }
}

/// A condition variable: who waits (FIFO), and how signals went, for the deadlock report.
#[derive(Clone, Debug, Default)]
pub(crate) struct Cond {
    /// Threads waiting to be signalled, in the order they started waiting. A signal's
    /// alternative `i` wakes `waiters[i]`.
    pub waiters: Vec<ThreadId>,
    /// Signals and broadcasts ever issued.
    pub signals: u64,
    /// Of those, how many found no waiter (each one a potential lost wakeup).
    pub unheard: u64,
}

/// A barrier's current round.
#[derive(Clone, Debug, Default)]
pub(crate) struct Barrier {
    /// Threads needed per round; `None` until seen in `BarrierInit` or read from memory.
    pub count: Option<u32>,
    /// Threads that arrived in this round and wait for the rest, in arrival order.
    pub waiting: Vec<ThreadId>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Once {
    /// The init routine runs in this thread; other callers wait for `OnceDone`.
    Running(ThreadId),
    Done,
}

/// A thread parked in `FutexWait`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FutexWaiter {
    pub thread: ThreadId,
    pub bitset: u32,
}

/// Every object of the execution.
#[derive(Clone, Debug, Default)]
pub(crate) struct Objects {
    pub mutexes: BTreeMap<ObjKey, Mutex>,
    pub rwlocks: BTreeMap<ObjKey, RwLock>,
    pub conds: BTreeMap<ObjKey, Cond>,
    pub barriers: BTreeMap<ObjKey, Barrier>,
    pub onces: BTreeMap<ObjKey, Once>,
    /// Semaphore values, once known (from `SemInit` or target memory).
    pub sems: BTreeMap<ObjKey, u64>,
    /// Futex wait queues in FIFO order; a key is removed when its queue empties.
    pub futexes: BTreeMap<ObjKey, Vec<FutexWaiter>>,
    /// The key of each process-shared object a process named, by its address there (see
    /// `sharing.rs`); an address not here is a process-private object.
    pub placed: BTreeMap<(ProcessId, u64), ObjKey>,
    /// The name of each object in shared memory: the address at which the execution first met it
    /// (in the choices, so that strategies see one object wherever each process maps it).
    pub shared_names: BTreeMap<ObjKey, u64>,
    /// Shared memories met so far, by what backs them.
    pub shared_spaces: BTreeMap<SharedBacking, u32>,
}

/// What backs a shared mapping: the file's device and inode (`/dev/shm/sem.NAME` for a
/// `sem_open` semaphore; the kernel's hidden file for a shared anonymous mapping).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct SharedBacking {
    pub device: u64,
    pub inode: u64,
}

/// Where an address of a process lies in shared memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SharedLocation {
    pub backing: SharedBacking,
    /// Offset of the address in the backing file.
    pub offset: u64,
}

impl Objects {
    /// The address that names the object at `addr` of `process` in choices: its own, unless it
    /// lies in shared memory and was first met at another address.
    pub fn name(&self, process: ProcessId, addr: u64) -> u64 {
        self.placed.get(&(process, addr)).and_then(|k| self.shared_names.get(k)).copied().unwrap_or(addr)
    }

    /// The key of the object at `addr` of `process`, as last placed (`Model::place_objects`).
    pub fn key(&self, process: ProcessId, addr: u64) -> ObjKey {
        self.placed.get(&(process, addr)).copied().unwrap_or_else(|| ObjKey::local(process, addr))
    }

    /// Wakes up to `max` waiters on `key` whose bitset intersects `bitset`, oldest first, and
    /// returns them.
    pub fn futex_wake(&mut self, key: ObjKey, max: u64, bitset: u32) -> Vec<ThreadId> {
        let mut woken = Vec::new();
        if let Some(queue) = self.futexes.get_mut(&key) {
            queue.retain(|w| {
                if (woken.len() as u64) < max && w.bitset & bitset != 0 {
                    woken.push(w.thread);
                    false
                } else {
                    true
                }
            });
            if queue.is_empty() {
                self.futexes.remove(&key);
            }
        }
        woken
    }

    /// Takes `thread` out of every wait queue (it timed out or died). Locks it holds stay held.
    /// Thread `thread` is gone: robust mutexes it held are free with their owner dead (other
    /// mutexes stay held, as they do for real).
    pub fn robust_owner_gone(&mut self, thread: ThreadId) {
        for m in self.mutexes.values_mut().filter(|m| m.robust && m.owner == Some(thread)) {
            m.owner_gone();
        }
    }

    pub fn forget_waiter(&mut self, thread: ThreadId) {
        for cond in self.conds.values_mut() {
            cond.waiters.retain(|&t| t != thread);
        }
        for barrier in self.barriers.values_mut() {
            barrier.waiting.retain(|&t| t != thread);
        }
        self.futexes.retain(|_, queue| {
            queue.retain(|w| w.thread != thread);
            !queue.is_empty()
        });
    }
}
