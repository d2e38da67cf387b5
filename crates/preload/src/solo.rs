//! Lock operations of a single-threaded process, which need no scheduling point.
//!
//! In a process with one thread, a process-private mutex or rwlock can only ever be taken by that
//! thread: its lock and unlock operations commute with every operation of every other thread in
//! the system (other processes cannot reach a private object), so posting them adds steps, and
//! only equivalent interleavings. Real programs do a great many of them before they start their
//! first thread: redis-server's start-up (OpenSSL's initialisation, jemalloc) is about 11,000
//! mutex and rwlock operations, and a test script's server that takes that many steps to come up
//! lets the script's retry loop spawn processes without end.
//!
//! While the process is *solo* (one gated thread: the main thread before its first
//! `pthread_create`, or again once every other thread was joined), such an operation runs for
//! real without a post, through the try-variant so it can never block, and an acquisition is
//! remembered in a small table of held objects ([`HELD`]). The model learns of them before it
//! could matter: every post of the thread first *flushes* the table, posting each held object as
//! the acquisition it was (`MutexLock`, `RwReadLock`, `RwWriteLock`; the model grants them at
//! once, since nobody else can hold them), so at each of the thread's scheduling points the
//! model's lock owners are exact — in particular when it creates a thread (the `ThreadCreate`
//! post), waits on a condition variable, forks or exits.
//!
//! Anything unusual takes the ordinary, posted path (after a flush): a process-shared object, a
//! timed lock, a try-acquisition that fails (the object is held: by this thread, which the model
//! then reports as a self-deadlock or `EDEADLK`, or by a thread that exited holding it), an
//! unlock of an object the table does not hold, a full table.
//!
//! Only the solo thread touches the table (a process becomes multi-threaded only through the
//! `ThreadCreate` post, which empties it first), so relaxed atomics suffice; they only make the
//! statics `Sync` without `unsafe`. No allocation, no lock, no syscall.
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use dara_abi::{Op, NO_DEADLINE};

/// Gated threads of this process that exist or may still run (created and not yet joined).
/// A new image (exec) starts at 1; a forked child is set back to 1 by [`become_sole_thread`].
static THREADS: AtomicU32 = AtomicU32::new(1);

/// Held objects the table can remember; one more acquisition takes the posted path.
const HELD_MAX: usize = 32;

/// What a held entry is (bits 40..48 of its meta word).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Held {
    /// A mutex of the given `dara_abi::mutex_kind`.
    Mutex(u64),
    Read,
    Write,
}

impl Held {
    fn encode(self) -> u64 {
        match self {
            Held::Mutex(kind) => (kind & 0xff) << 32,
            Held::Read => 1 << 40,
            Held::Write => 2 << 40,
        }
    }

    fn decode(meta: u64) -> Held {
        match (meta >> 40) & 0xff {
            1 => Held::Read,
            2 => Held::Write,
            _ => Held::Mutex((meta >> 32) & 0xff),
        }
    }
}

/// One held object: its address, and `Held::encode() | depth` (depth in the low 32 bits: a
/// recursive mutex or a read lock may be taken several times).
struct Entry {
    addr: AtomicU64,
    meta: AtomicU64,
}

static HELD: [Entry; HELD_MAX] = [const { Entry { addr: AtomicU64::new(0), meta: AtomicU64::new(0) } }; HELD_MAX];
static HELD_LEN: AtomicU32 = AtomicU32::new(0);

const DEPTH_MASK: u64 = 0xffff_ffff;

/// Whether the calling thread is the only one of its process.
#[inline]
pub fn is_solo() -> bool {
    THREADS.load(Ordering::Relaxed) == 1
}

/// The calling thread is now the process's only one (a new image's or a forked child's main
/// thread): nothing is held on its behalf.
pub fn become_sole_thread() {
    THREADS.store(1, Ordering::Relaxed);
    HELD_LEN.store(0, Ordering::Relaxed);
}

/// A thread is about to be created (after the `ThreadCreate` grant, which flushed the table).
pub fn thread_created() {
    debug_assert_eq!(HELD_LEN.load(Ordering::Relaxed), 0);
    THREADS.fetch_add(1, Ordering::Relaxed);
}

/// A thread creation failed after [`thread_created`], or a thread was joined (it is gone).
pub fn thread_gone() {
    let _ = THREADS.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1).filter(|n| *n >= 1));
}

/// Whether the table has room for one more object (else the caller takes the posted path).
#[inline]
pub fn has_room() -> bool {
    (HELD_LEN.load(Ordering::Relaxed) as usize) < HELD_MAX
}

/// Records one acquisition of `addr` as `what`. Only after [`has_room`] (or for an object held
/// already); a full table is left as it is, which the caller prevents.
pub fn acquired(addr: u64, what: Held) {
    let len = HELD_LEN.load(Ordering::Relaxed) as usize;
    if let Some(e) = HELD[..len].iter().find(|e| e.addr.load(Ordering::Relaxed) == addr && Held::decode(e.meta.load(Ordering::Relaxed)) == what) {
        e.meta.store(e.meta.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        return;
    }
    if len < HELD_MAX {
        HELD[len].addr.store(addr, Ordering::Relaxed);
        HELD[len].meta.store(what.encode() | 1, Ordering::Relaxed);
        HELD_LEN.store(len as u32 + 1, Ordering::Relaxed);
    }
}

/// Forgets one acquisition of `addr` (any kind) if the table holds it; false if it does not
/// (the model knows who holds the object: the caller posts the release).
pub fn released(addr: u64) -> bool {
    let len = HELD_LEN.load(Ordering::Relaxed) as usize;
    let Some(i) = HELD[..len].iter().position(|e| e.addr.load(Ordering::Relaxed) == addr) else {
        return false;
    };
    let meta = HELD[i].meta.load(Ordering::Relaxed);
    if meta & DEPTH_MASK > 1 {
        HELD[i].meta.store(meta - 1, Ordering::Relaxed);
    } else {
        let last = len - 1;
        HELD[i].addr.store(HELD[last].addr.load(Ordering::Relaxed), Ordering::Relaxed);
        HELD[i].meta.store(HELD[last].meta.load(Ordering::Relaxed), Ordering::Relaxed);
        HELD_LEN.store(last as u32, Ordering::Relaxed);
    }
    true
}

/// Hands every remembered acquisition to the model, through `post` (the raw handoff: the caller
/// is inside the preload), and empties the table. Called before each post of the thread; costs
/// one relaxed load when nothing is held.
#[inline]
pub fn flush(mut post: impl FnMut(Op, [u64; 4])) {
    let len = HELD_LEN.load(Ordering::Relaxed) as usize;
    if len == 0 {
        return;
    }
    // Emptied first: the posts below must not flush again.
    HELD_LEN.store(0, Ordering::Relaxed);
    for e in &HELD[..len] {
        let addr = e.addr.load(Ordering::Relaxed);
        let meta = e.meta.load(Ordering::Relaxed);
        let (op, args) = match Held::decode(meta) {
            Held::Mutex(kind) => (Op::MutexLock, [addr, kind, NO_DEADLINE, 0]),
            Held::Read => (Op::RwReadLock, [addr, NO_DEADLINE, 0, 0]),
            Held::Write => (Op::RwWriteLock, [addr, NO_DEADLINE, 0, 0]),
        };
        for _ in 0..(meta & DEPTH_MASK) {
            post(op, args);
        }
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
        acquired(0x10, Held::Mutex(dara_abi::mutex_kind::RECURSIVE));
        acquired(0x10, Held::Mutex(dara_abi::mutex_kind::RECURSIVE));
        acquired(0x20, Held::Read);
        acquired(0x30, Held::Write);
        assert!(released(0x30));
        assert!(!released(0x40));
        let mut posts = std::vec::Vec::new();
        flush(|op, args| posts.push((op, args[0], args[1])));
        assert_eq!(posts, [(Op::MutexLock, 0x10, 1), (Op::MutexLock, 0x10, 1), (Op::RwReadLock, 0x20, NO_DEADLINE)]);
        let mut again = 0;
        flush(|_, _| again += 1);
        assert_eq!(again, 0, "a flush empties the table");
        thread_created();
        assert!(!is_solo());
        thread_gone();
        assert!(is_solo());
        thread_gone();
        assert!(is_solo(), "never below one thread");
    }
}
