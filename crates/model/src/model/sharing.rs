//! Which synchronization objects are process-shared, and so which key each is modelled under.
//!
//! An object is keyed by its process and address ([`ObjKey::local`]) unless it is process-shared
//! *and* lies in memory other processes map too (a `MAP_SHARED` mapping of a file, `/dev/shm`
//! included, or a shared anonymous mapping a fork passed on): then it is keyed by that memory
//! (numbered in first-seen order) and its offset there, wherever each process maps it. A mutex
//! locked in one process and unlocked in another, a condition variable signalled across a fork,
//! a semaphore of `multiprocessing`, a raw futex word two processes wait on and wake: one object.
//!
//! Every kind of object goes through the one mechanism here ([`Model::place_objects`], at each
//! post): whether the object is process-shared is read from the object itself each time (it may
//! have been destroyed and initialised again as the other kind), from the fields glibc 2.36
//! (x86_64) keeps for it, listed in [`ObjClass::says_shared`]; a raw futex is shared when its call
//! had no `FUTEX_PRIVATE_FLAG` (the kernel's rule). Where a process-shared object lies is looked
//! up in `/proc/<pid>/maps` once per process and address and kept while the object reads as
//! shared, so a mapping replaced at the same address by another file's keeps the first key (the
//! program would have to re-initialise its objects there, which drops the key when they read as
//! private, but not when they read as shared again).
//!
//! In choices (what strategies and traces see) such an object is named by the address at which
//! the execution first met it, in whichever process: DPOR's "same object" is then right for
//! processes that map the memory at different addresses (LMDB's lock file).
//!
//! `pthread_once` controls and the locks a thread took without a post (`Op::Held`: the preload's
//! solo path refuses process-shared locks) stay keyed per process.
use dara_abi::Request as R;

use super::objects::{ObjKey, Space};
use super::{MemoryReader, Model, Request};
use crate::choice::ProcessId;

/// glibc's `__kind` of `pthread_mutex_t` (offset 16) has `PTHREAD_MUTEX_PSHARED_BIT` (128).
pub(super) const MUTEX_KIND_OFFSET: u64 = 16;
const MUTEX_PSHARED_BIT: u32 = 128;
/// glibc's `__shared` of `pthread_rwlock_t` (offset 28) is non-zero for a shared rwlock.
const RWLOCK_SHARED_OFFSET: u64 = 28;
/// glibc's `__wrefs` of `pthread_cond_t` (offset 36) has `__PTHREAD_COND_SHARED_MASK` (bit 0).
const COND_WREFS_OFFSET: u64 = 36;
const COND_SHARED_MASK: u32 = 1;
/// glibc's internal `struct pthread_barrier { in, current_round, count, shared, out }`: `shared`
/// (offset 12) is `FUTEX_SHARED` (128) or `FUTEX_PRIVATE` (0).
const BARRIER_SHARED_OFFSET: u64 = 12;
/// glibc's `private` of `sem_t` (offset 8), the same two values.
const SEM_PRIVATE_OFFSET: u64 = 8;
/// glibc's `FUTEX_SHARED` (its `LLL_SHARED`, i.e. `FUTEX_PRIVATE_FLAG`, XORed into futex calls).
const GLIBC_FUTEX_SHARED: u32 = 128;

/// What kind of object an address names, which says where it tells whether it is shared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ObjClass {
    Mutex,
    RwLock,
    Cond,
    Barrier,
    Semaphore,
    /// A raw futex word; `shared` is the call's (no `FUTEX_PRIVATE_FLAG`).
    Futex { shared: bool },
}

impl ObjClass {
    /// Whether the object at `addr` of `process` is process-shared; false when unreadable.
    pub(crate) fn says_shared(self, process: ProcessId, addr: u64, mem: &mut dyn MemoryReader) -> bool {
        let (offset, shared): (u64, fn(u32) -> bool) = match self {
            ObjClass::Futex { shared } => return shared,
            ObjClass::Mutex => (MUTEX_KIND_OFFSET, |kind| kind & MUTEX_PSHARED_BIT != 0),
            ObjClass::RwLock => (RWLOCK_SHARED_OFFSET, |shared| shared != 0),
            ObjClass::Cond => (COND_WREFS_OFFSET, |wrefs| wrefs & COND_SHARED_MASK != 0),
            ObjClass::Barrier => (BARRIER_SHARED_OFFSET, |shared| shared == GLIBC_FUTEX_SHARED),
            ObjClass::Semaphore => (SEM_PRIVATE_OFFSET, |private| private == GLIBC_FUTEX_SHARED),
        };
        mem.read_u32(process, addr.wrapping_add(offset)).is_some_and(shared)
    }
}

/// The objects `r` names, each with its class (a condition wait names its mutex too).
pub(crate) fn named_objects(r: &Request) -> [Option<(u64, ObjClass)>; 2] {
    let one = |class| [r.object().map(|a| (a.0, class)), None];
    match *r {
        R::MutexLock { .. } | R::MutexTryLock { .. } | R::MutexUnlock { .. } => one(ObjClass::Mutex),
        R::RwReadLock { .. } | R::RwWriteLock { .. } | R::RwTryReadLock { .. } | R::RwTryWriteLock { .. } | R::RwUnlock { .. } => one(ObjClass::RwLock),
        R::CondWait { cond, mutex, .. } => [Some((cond.0, ObjClass::Cond)), Some((mutex.0, ObjClass::Mutex))],
        R::CondSignal { .. } | R::CondBroadcast { .. } => one(ObjClass::Cond),
        R::BarrierInit { .. } | R::BarrierWait { .. } => one(ObjClass::Barrier),
        R::SemInit { .. } | R::SemWait { .. } | R::SemTryWait { .. } | R::SemPost { .. } => one(ObjClass::Semaphore),
        R::FutexWait { matching, .. } | R::FutexWake { matching, .. } => one(ObjClass::Futex { shared: matching.shared }),
        _ => [None, None],
    }
}

impl Model {
    /// Settles the key of every object `r` (posted by a thread of `process`) names, before the
    /// model looks at it: see the module doc.
    pub(super) fn place_objects(&mut self, process: ProcessId, r: &Request, mem: &mut dyn MemoryReader) {
        for (addr, class) in named_objects(r).into_iter().flatten() {
            if !class.says_shared(process, addr, mem) {
                self.objects.placed.remove(&(process, addr));
            } else if !self.objects.placed.contains_key(&(process, addr)) {
                let k = self.shared_key(process, addr, mem);
                self.objects.placed.insert((process, addr), k);
            }
        }
    }

    /// The key of a process-shared object at `addr` of `process`: its shared memory's, or the
    /// process's when the address is not in memory another process could map.
    fn shared_key(&mut self, process: ProcessId, addr: u64, mem: &mut dyn MemoryReader) -> ObjKey {
        let Some(at) = mem.shared_location(process, addr) else { return ObjKey::local(process, addr) };
        let next = self.objects.shared_spaces.len() as u32;
        let space = *self.objects.shared_spaces.entry(at.backing).or_insert(next);
        let k = ObjKey { space: Space::Shared(space), addr: at.offset };
        self.objects.shared_names.entry(k).or_insert(addr);
        k
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads this test process's own memory: the objects below, as glibc initialised them.
    struct OwnMemory;

    impl MemoryReader for OwnMemory {
        fn read_u32(&mut self, _process: ProcessId, addr: u64) -> Option<u32> {
            // SAFETY: the tests pass addresses inside live, 4-aligned pthread objects of theirs.
            Some(unsafe { std::ptr::read_volatile(addr as *const u32) })
        }
    }

    /// glibc's own initialisers, private then shared, against the fields `says_shared` reads.
    #[test]
    fn the_glibc_layouts_tell_shared_objects_from_private_ones() {
        for pshared in [libc::PTHREAD_PROCESS_PRIVATE, libc::PTHREAD_PROCESS_SHARED] {
            let expect = pshared == libc::PTHREAD_PROCESS_SHARED;
            let shared = |class: ObjClass, addr: *const u8| class.says_shared(0, addr as u64, &mut OwnMemory);
            // SAFETY: each object is zeroed, initialised by glibc with its attribute, only read
            // after, and destroyed; every call gets valid pointers to locals.
            unsafe {
                let mut attr: libc::pthread_mutexattr_t = std::mem::zeroed();
                let mut m: libc::pthread_mutex_t = std::mem::zeroed();
                libc::pthread_mutexattr_init(&mut attr);
                libc::pthread_mutexattr_setpshared(&mut attr, pshared);
                libc::pthread_mutex_init(&mut m, &attr);
                assert_eq!(shared(ObjClass::Mutex, &m as *const _ as *const u8), expect, "mutex, pshared {pshared}");
                libc::pthread_mutex_destroy(&mut m);

                let mut attr: libc::pthread_rwlockattr_t = std::mem::zeroed();
                let mut l: libc::pthread_rwlock_t = std::mem::zeroed();
                libc::pthread_rwlockattr_init(&mut attr);
                libc::pthread_rwlockattr_setpshared(&mut attr, pshared);
                libc::pthread_rwlock_init(&mut l, &attr);
                assert_eq!(shared(ObjClass::RwLock, &l as *const _ as *const u8), expect, "rwlock, pshared {pshared}");
                libc::pthread_rwlock_destroy(&mut l);

                let mut attr: libc::pthread_condattr_t = std::mem::zeroed();
                let mut c: libc::pthread_cond_t = std::mem::zeroed();
                libc::pthread_condattr_init(&mut attr);
                libc::pthread_condattr_setpshared(&mut attr, pshared);
                libc::pthread_cond_init(&mut c, &attr);
                assert_eq!(shared(ObjClass::Cond, &c as *const _ as *const u8), expect, "cond, pshared {pshared}");
                libc::pthread_cond_destroy(&mut c);

                let mut attr: libc::pthread_barrierattr_t = std::mem::zeroed();
                let mut b: libc::pthread_barrier_t = std::mem::zeroed();
                libc::pthread_barrierattr_init(&mut attr);
                libc::pthread_barrierattr_setpshared(&mut attr, pshared);
                libc::pthread_barrier_init(&mut b, &attr, 2);
                assert_eq!(shared(ObjClass::Barrier, &b as *const _ as *const u8), expect, "barrier, pshared {pshared}");
                libc::pthread_barrier_destroy(&mut b);

                let mut sem: libc::sem_t = std::mem::zeroed();
                libc::sem_init(&mut sem, i32::from(expect), 1);
                assert_eq!(shared(ObjClass::Semaphore, &sem as *const _ as *const u8), expect, "sem, pshared {pshared}");
                libc::sem_destroy(&mut sem);
            }
        }
    }
}
