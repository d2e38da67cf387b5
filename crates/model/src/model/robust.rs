//! Robust mutexes (`PTHREAD_MUTEX_ROBUST`) as glibc has them: what the model learns from the
//! mutex itself at each post. The rules live with the mutex (`objects.rs`):
//!
//! * the owner ends holding it: the next lock, try-lock or condition wait re-taking it gets it
//!   with `EOWNERDEAD`, and glibc marks it inconsistent (`__owner` is
//!   `PTHREAD_MUTEX_INCONSISTENT`) until the holder calls `pthread_mutex_consistent`;
//! * the holder unlocks it while it is still inconsistent: it becomes not recoverable
//!   (`__owner` is `PTHREAD_MUTEX_NOTRECOVERABLE`), and every lock, try-lock and waiter (already
//!   waiting or not) gets `ENOTRECOVERABLE` without taking it, until it is initialised again;
//! * only the owner may unlock it (`EPERM`), whatever its type.
//!
//! `pthread_mutex_consistent` is not a scheduling point: it only writes `__owner`, which the
//! model reads at the holder's unlock post. Whether a free mutex is not recoverable is read at
//! each lock post too, so a mutex initialised again starts over.
use dara_abi::Request as R;

use super::sharing::MUTEX_KIND_OFFSET;
use super::{MemoryReader, Model, Request};
use crate::choice::ProcessId;

/// `PTHREAD_MUTEX_ROBUST_NORMAL_NP` (16) in glibc's `__kind`.
const MUTEX_ROBUST_BIT: u32 = 16;
/// Byte offset of glibc's `__owner` in `pthread_mutex_t` (x86_64).
const MUTEX_OWNER_OFFSET: u64 = 8;
/// `__owner` of a robust mutex taken with `EOWNERDEAD` and not made consistent yet.
const PTHREAD_MUTEX_INCONSISTENT: u32 = i32::MAX as u32;
/// `__owner` of a robust mutex unlocked while inconsistent.
const PTHREAD_MUTEX_NOTRECOVERABLE: u32 = i32::MAX as u32 - 1;

impl Model {
    /// Notes what a lock, try-lock or unlock post needs of a robust mutex: whether it is robust
    /// (robust mutexes always post: the preload's solo path refuses them, so the model knows
    /// before anyone holds one), whether a free one is not recoverable, and at an unlock whether
    /// the holder left it inconsistent.
    pub(super) fn note_robust(&mut self, process: ProcessId, r: &Request, mem: &mut dyn MemoryReader) {
        let (R::MutexLock { mutex, .. } | R::MutexTryLock { mutex, .. } | R::MutexUnlock { mutex, .. }) = *r else { return };
        let kind = mem.read_u32(process, mutex.0.wrapping_add(MUTEX_KIND_OFFSET));
        let robust = kind.is_some_and(|kind| kind & MUTEX_ROBUST_BIT != 0);
        let k = self.objects.key(process, mutex.0);
        if !robust && !self.objects.mutexes.contains_key(&k) {
            return;
        }
        let m = self.objects.mutexes.entry(k).or_default();
        m.robust = robust;
        if !robust {
            return;
        }
        let owner = mem.read_u32(process, mutex.0.wrapping_add(MUTEX_OWNER_OFFSET));
        match r {
            R::MutexUnlock { .. } => m.inconsistent = owner == Some(PTHREAD_MUTEX_INCONSISTENT),
            _ if m.owner.is_none() => m.not_recoverable = owner == Some(PTHREAD_MUTEX_NOTRECOVERABLE),
            _ => {}
        }
    }
}
