//! Lock operations that need no scheduling point: those of a single-threaded process, and in
//! *coarse* mode (a recording, [`dara_abi::preempt::COARSE`]) those of every thread.
//!
//! In a process with one thread, a process-private mutex or rwlock can only ever be taken by that
//! thread: its lock and unlock operations commute with every operation of every other thread in
//! the system (other processes cannot reach a private object), so posting them adds steps, and
//! only equivalent interleavings. Real programs do a great many of them before they start their
//! first thread: redis-server's start-up (OpenSSL's initialisation, jemalloc) is about 11,000
//! mutex and rwlock operations, and a test script's server that takes that many steps to come up
//! lets the script's retry loop spawn processes without end.
//!
//! A recording needs no decision at a lock operation either: it runs one schedule, and any
//! schedule will do as long as it is recorded. Since only the token holder runs, a lock it takes
//! between two of its posts is taken atomically with respect to every other thread; what must
//! hold is only that the model knows every owner before another thread can run. So in coarse
//! mode every thread uses the same fast path (redis-server under load: jemalloc's arena locks,
//! seven lock steps per request, are gone).
//!
//! On the fast path an operation runs for real without a post, through the try-variant so it can
//! never block, and an acquisition is remembered in the thread's small table of held objects ([`TABLE`]). The
//! model learns of them before it could matter: every post of the thread first *flushes* the
//! table, posting each held object as [`Op::Held`], which the scheduler applies at once with no
//! decision (nobody else can have taken the object meanwhile), so at each of the thread's
//! scheduling points the model's lock owners are exact — in particular when it creates a thread,
//! waits on a condition variable, blocks on the network, forks or exits.
//!
//! Anything unusual takes the ordinary, posted path (after a flush): a process-shared object, a
//! timed lock, a try-acquisition that fails (the object is held: by this thread, which the model
//! then reports as a self-deadlock or `EDEADLK`, by another thread, whose acquisition the model
//! knows, or by a thread that exited holding it), an unlock of an object the table does not
//! hold, a full table.
//!
//! The table is per thread (a thread just created posts its `ThreadStart` while the token holder
//! runs) and is emptied before the thread gives the token up; threads that are not gated, such
//! as an exiting thread's teardown, never reach it. No allocation, no lock, no syscall.
use core::cell::Cell;
use core::sync::atomic::{AtomicU32, Ordering};

use dara_abi::{preempt, Addr, HeldKind, MutexKind, Request};

/// Gated threads of this process that exist or may still run (created and not yet joined).
/// A new image (exec) starts at 1; a forked child is set back to 1 by [`become_sole_thread`].
static THREADS: AtomicU32 = AtomicU32::new(1);

/// Held objects the table can remember; one more acquisition takes the posted path.
const HELD_MAX: usize = 32;

/// What a held entry is (bits 40..48 of its meta word).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Held {
    /// A mutex of the given kind.
    Mutex(MutexKind),
    Read,
    Write,
}

impl Held {
    fn encode(self) -> u64 {
        match self {
            Held::Mutex(kind) => (kind.to_arg() & 0xff) << 32,
            Held::Read => 1 << 40,
            Held::Write => 2 << 40,
        }
    }

    fn decode(meta: u64) -> Held {
        match (meta >> 40) & 0xff {
            1 => Held::Read,
            2 => Held::Write,
            _ => Held::Mutex(MutexKind::from_arg((meta >> 32) & 0xff).unwrap_or_default()),
        }
    }
}

/// The objects a thread took on the fast path and has not handed to the model yet: per entry its
/// address and `Held::encode() | depth` (depth in the low 32 bits: a recursive mutex or a read
/// lock may be taken several times).
struct Table {
    len: Cell<usize>,
    entries: [Cell<(u64, u64)>; HELD_MAX],
}

thread_local! {
    /// Per thread: in coarse mode a thread that was just created may post its `ThreadStart`
    /// while the token holder runs with objects in its own table.
    static TABLE: Table = const { Table { len: Cell::new(0), entries: [const { Cell::new((0, 0)) }; HELD_MAX] } };
}

const DEPTH_MASK: u64 = 0xffff_ffff;

/// Whether the calling thread is the only one of its process.
#[inline]
pub fn is_solo() -> bool {
    THREADS.load(Ordering::Relaxed) == 1
}

/// Whether this execution takes coarse steps ([`preempt::COARSE`]: a recording).
#[inline]
pub fn coarse() -> bool {
    crate::region::header().is_some_and(|h| h.preempt_flags & preempt::COARSE != 0)
}

/// Whether the calling thread may take private locks without a post: it is alone in its
/// process, or the execution takes coarse steps.
#[inline]
pub fn fast_path() -> bool {
    is_solo() || coarse()
}

/// The calling thread is now the process's only one (a new image's or a forked child's main
/// thread): nothing is held on its behalf.
pub fn become_sole_thread() {
    THREADS.store(1, Ordering::Relaxed);
    TABLE.with(|t| t.len.set(0));
}

/// A thread is about to be created (after the `ThreadCreate` grant, which flushed the table).
pub fn thread_created() {
    debug_assert_eq!(TABLE.with(|t| t.len.get()), 0);
    THREADS.fetch_add(1, Ordering::Relaxed);
}

/// A thread creation failed after [`thread_created`], or a thread was joined (it is gone).
pub fn thread_gone() {
    let _ = THREADS.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1).filter(|n| *n >= 1));
}

/// Whether the table has room for one more object (else the caller takes the posted path).
#[inline]
pub fn has_room() -> bool {
    TABLE.with(|t| t.len.get() < HELD_MAX)
}

/// Records one acquisition of `addr` as `what`. Only after [`has_room`] (or for an object held
/// already); a full table is left as it is, which the caller prevents.
pub fn acquired(addr: u64, what: Held) {
    TABLE.with(|t| {
        let len = t.len.get();
        let held = t.entries[..len].iter().find(|e| e.get().0 == addr && Held::decode(e.get().1) == what);
        if let Some(e) = held {
            e.set((addr, e.get().1 + 1));
        } else if len < HELD_MAX {
            t.entries[len].set((addr, what.encode() | 1));
            t.len.set(len + 1);
        }
    })
}

/// Forgets one acquisition of `addr` (any kind) if the table holds it; false if it does not
/// (the model knows who holds the object: the caller posts the release).
pub fn released(addr: u64) -> bool {
    TABLE.with(|t| {
        let len = t.len.get();
        let Some(i) = t.entries[..len].iter().position(|e| e.get().0 == addr) else {
            return false;
        };
        let (_, meta) = t.entries[i].get();
        if meta & DEPTH_MASK > 1 {
            t.entries[i].set((addr, meta - 1));
        } else {
            t.entries[i].set(t.entries[len - 1].get());
            t.len.set(len - 1);
        }
        true
    })
}

/// Hands every remembered acquisition to the model, through `post` (the raw handoff: the caller
/// is inside the preload), as one [`Request::Held`] per object, and empties the table. Called before
/// each post of the thread; costs a thread-local load when nothing is held.
#[inline]
pub fn flush(mut post: impl FnMut(Request)) {
    if TABLE.with(|t| t.len.get()) == 0 {
        return;
    }
    // Taken out first: the posts below must not flush again.
    let (entries, len): ([(u64, u64); HELD_MAX], usize) = TABLE.with(|t| (core::array::from_fn(|i| t.entries[i].get()), t.len.replace(0)));
    for &(addr, meta) in &entries[..len] {
        let (what, mutex_kind) = match Held::decode(meta) {
            Held::Mutex(kind) => (HeldKind::Mutex, kind),
            Held::Read => (HeldKind::Read, MutexKind::Normal),
            Held::Write => (HeldKind::Write, MutexKind::Normal),
        };
        post(Request::Held { lock: Addr(addr), what, depth: meta & DEPTH_MASK, mutex_kind });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // One test: the table is a process-wide static.
    #[test]
    fn the_table_counts_depths_and_flushes_each_acquisition() {
        become_sole_thread();
        assert!(is_solo());
        acquired(0x10, Held::Mutex(MutexKind::Recursive));
        acquired(0x10, Held::Mutex(MutexKind::Recursive));
        acquired(0x20, Held::Read);
        acquired(0x30, Held::Write);
        assert!(released(0x30));
        assert!(!released(0x40));
        let mut posts = std::vec::Vec::new();
        flush(|request| posts.push(request));
        let mutex = Request::Held { lock: Addr(0x10), what: HeldKind::Mutex, depth: 2, mutex_kind: MutexKind::Recursive };
        let read = Request::Held { lock: Addr(0x20), what: HeldKind::Read, depth: 1, mutex_kind: MutexKind::Normal };
        assert_eq!(posts, [mutex, read]);
        let mut again = 0;
        flush(|_| again += 1);
        assert_eq!(again, 0, "a flush empties the table");
        thread_created();
        assert!(!is_solo());
        thread_gone();
        assert!(is_solo());
        thread_gone();
        assert!(is_solo(), "never below one thread");
    }
}
