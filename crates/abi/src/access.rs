//! The [`AccessTable`](super::AccessTable) protocol: how the preload records accesses (in the
//! profiling run, and in search executions for the granules nobody watches yet) and looks up
//! watched granules, and how the scheduler writes and reads the table. Shared here so both sides
//! probe the same way.
//!
//! An open-addressed hash set of 8-byte *granules* (`addr >> 3`) with linear probing from
//! `splitmix64(granule)`, at most [`MAX_PROBES`] entries per lookup, never deleted from within
//! an execution (the scheduler creates a fresh, zeroed table for every execution). Entry layout
//! (0 = empty):
//!
//! ```text
//!  bits 0..=47   granule (addr >> 3; user addresses are below 2^47, so granules below 2^44)
//!  bits 48..=60  first thread's slot + 1 (a recorded access), 0 in a watch entry
//!  bit  61       WATCHED: written by the scheduler, "accesses here are scheduling points"
//!  bit  62       SHARED: touched by a second thread
//!  bit  63       WRITTEN: somebody stored to it
//! ```
//!
//! Recording is lock-free (compare-and-swap), allocation-free and bounded, so it can run inside
//! instrumented code anywhere, signal handlers included. Functions take the entry slice rather
//! than the table so unit tests can use a small one; its length must be a power of two.
use core::sync::atomic::{AtomicU64, Ordering};

use crate::splitmix64;

/// What an instrumented access is, as `libdara_tsan.so` reports it to the preload's
/// [`HOOK_SYMBOL`]. An atomic read-modify-write or compare-and-swap is a write; a fence is not
/// reported (it has no address, and one thread runs at a time under dara).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccessKind {
    Read = 0,
    Write = 1,
    AtomicRead = 2,
    AtomicWrite = 3,
}

impl AccessKind {
    /// Whether the access stores (a plain store, an atomic store, exchange, RMW or CAS).
    pub const fn writes(self) -> bool {
        matches!(self, AccessKind::Write | AccessKind::AtomicWrite)
    }

    /// Whether the access is an atomic operation.
    pub const fn atomic(self) -> bool {
        matches!(self, AccessKind::AtomicRead | AccessKind::AtomicWrite)
    }
}

/// The preload's entry point for `libdara_tsan.so`, which looks it up once (`dlsym`) when the
/// instrumented program initialises and calls it before each access; absent outside dara.
pub const HOOK_SYMBOL: &core::ffi::CStr = c"dara_memory_access";

/// Type of [`HOOK_SYMBOL`]: `size` bytes at `addr`, about to be accessed as `kind`.
pub type Hook = unsafe extern "C" fn(addr: u64, size: u64, kind: AccessKind);

/// Bytes per granule, as a shift.
pub const GRANULE_SHIFT: u32 = 3;
/// Entries probed before giving up (the access is then not recorded / not watched).
pub const MAX_PROBES: usize = 64;

const GRANULE_MASK: u64 = (1 << 48) - 1;
const THREAD_SHIFT: u32 = 48;
const THREAD_MASK: u64 = 0x1fff;
/// Entry bit: the scheduler asks for scheduling points on this granule.
pub const WATCHED: u64 = 1 << 61;
/// Entry bit: at least two threads touched the granule.
pub const SHARED: u64 = 1 << 62;
/// Entry bit: at least one access was a store.
pub const WRITTEN: u64 = 1 << 63;

/// The granule an address falls in.
#[inline(always)]
pub const fn granule(addr: u64) -> u64 {
    (addr >> GRANULE_SHIFT) & GRANULE_MASK
}

#[inline(always)]
fn home(granule: u64, len: usize) -> usize {
    debug_assert!(len.is_power_of_two());
    splitmix64(granule) as usize & (len - 1)
}

/// Granule stored in a non-empty entry.
pub const fn entry_granule(entry: u64) -> u64 {
    entry & GRANULE_MASK
}

/// Whether a profiling entry says "touched by two threads, written by one": worth watching.
pub const fn entry_racy(entry: u64) -> bool {
    entry & (SHARED | WRITTEN) == (SHARED | WRITTEN)
}

/// What [`note`] did with an access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Noted {
    /// The granule is in the watch set: the access is a scheduling point (nothing recorded).
    Watched,
    /// The access is recorded in the granule's entry (thread, shared, written).
    Recorded,
    /// The access is recorded in a new entry, claimed for the granule.
    Claimed,
    /// Not recorded: the table had no room within [`MAX_PROBES`] entries, or the granule had
    /// no entry and the caller may not claim one.
    NoRoom,
}

/// New entries one process claims at most in a search execution (the profiling run has no
/// such limit). With at most a quarter of the table watched (`MAX_WATCHED`), the table then
/// stays at most three quarters full, so the lookup of a granule nobody recorded still meets an
/// empty entry within a few probes; beyond it the process only updates entries already there.
pub const RECORD_LIMIT: usize = crate::ACCESS_TABLE_SLOTS / 2;

/// Profiling run: notes that thread `slot` accessed `addr` (a store if `write`). Returns false
/// when the table had no room within [`MAX_PROBES`] entries.
pub fn record(entries: &[AtomicU64], addr: u64, slot: u32, write: bool) -> bool {
    note(entries, addr, slot, write, true) != Noted::NoRoom
}

/// Every run with memory points: if `addr`'s granule is watched, says so; otherwise records that
/// thread `slot` accessed it (a store if `write`; a new entry only if `claim`), so that a search
/// execution, too, shows which granules became shared and written (the adaptive watch set). One
/// probe sequence for both, so an unwatched access costs what the watch lookup alone did plus,
/// the first time a thread touches a granule, one compare-and-swap. A watched entry never gets
/// SHARED or WRITTEN bits: the shared written entries of a search execution's table are exactly
/// its new sharing.
pub fn note(entries: &[AtomicU64], addr: u64, slot: u32, write: bool, claim: bool) -> Noted {
    let g = granule(addr);
    let me = (u64::from(slot) + 1) & THREAD_MASK;
    let written = if write { WRITTEN } else { 0 };
    let mut i = home(g, entries.len());
    for _ in 0..MAX_PROBES.min(entries.len()) {
        let entry = &entries[i];
        let mut current = entry.load(Ordering::Relaxed);
        loop {
            if current == 0 {
                if !claim {
                    return Noted::NoRoom;
                }
                let fresh = g | (me << THREAD_SHIFT) | written;
                match entry.compare_exchange(0, fresh, Ordering::Relaxed, Ordering::Relaxed) {
                    Ok(_) => return Noted::Claimed,
                    Err(seen) => current = seen,
                }
                continue;
            }
            if entry_granule(current) != g {
                break;
            }
            if current & WATCHED != 0 {
                return Noted::Watched;
            }
            let first = (current >> THREAD_SHIFT) & THREAD_MASK;
            let shared = if first != me { SHARED } else { 0 };
            let merged = current | shared | written;
            if merged == current {
                return Noted::Recorded;
            }
            match entry.compare_exchange(current, merged, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return Noted::Recorded,
                Err(seen) => current = seen,
            }
        }
        i = (i + 1) & (entries.len() - 1);
    }
    Noted::NoRoom
}

/// Scheduler, before the target starts: marks `granule` watched. Returns false when the table had
/// no room within [`MAX_PROBES`] entries.
pub fn watch(entries: &[AtomicU64], granule: u64) -> bool {
    let g = granule & GRANULE_MASK;
    let mut i = home(g, entries.len());
    for _ in 0..MAX_PROBES.min(entries.len()) {
        let current = entries[i].load(Ordering::Relaxed);
        if current == 0 {
            entries[i].store(g | WATCHED, Ordering::Relaxed);
            return true;
        }
        if entry_granule(current) == g {
            entries[i].store(current | WATCHED, Ordering::Relaxed);
            return true;
        }
        i = (i + 1) & (entries.len() - 1);
    }
    false
}

/// Whether accesses to `addr` are scheduling points. One load in the common case (an address
/// nobody watches hashes to an empty entry).
#[inline(always)]
pub fn is_watched(entries: &[AtomicU64], addr: u64) -> bool {
    let g = granule(addr);
    let mut i = home(g, entries.len());
    for _ in 0..MAX_PROBES.min(entries.len()) {
        let current = entries[i].load(Ordering::Relaxed);
        if current == 0 {
            return false;
        }
        if entry_granule(current) == g {
            return current & WATCHED != 0;
        }
        i = (i + 1) & (entries.len() - 1);
    }
    false
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::vec::Vec;

    use super::*;

    fn table(n: usize) -> Vec<AtomicU64> {
        (0..n).map(|_| AtomicU64::new(0)).collect()
    }

    fn entry_of(t: &[AtomicU64], addr: u64) -> u64 {
        t.iter().map(|e| e.load(Ordering::Relaxed)).find(|&e| e != 0 && entry_granule(e) == granule(addr)).unwrap_or(0)
    }

    #[test]
    fn one_thread_reading_and_writing_is_not_racy() {
        let t = table(64);
        assert!(record(&t, 0x1000, 0, false));
        assert!(record(&t, 0x1004, 0, true)); // same granule
        let e = entry_of(&t, 0x1000);
        assert_ne!(e & WRITTEN, 0);
        assert_eq!(e & SHARED, 0);
        assert!(!entry_racy(e));
        assert_eq!(t.iter().filter(|e| e.load(Ordering::Relaxed) != 0).count(), 1);
    }

    #[test]
    fn two_threads_one_writing_is_racy_two_readers_are_not() {
        let t = table(64);
        record(&t, 0x2000, 3, false);
        record(&t, 0x2000, 4, true);
        record(&t, 0x3000, 3, false);
        record(&t, 0x3000, 4, false);
        assert!(entry_racy(entry_of(&t, 0x2000)));
        let readers = entry_of(&t, 0x3000);
        assert_ne!(readers & SHARED, 0);
        assert!(!entry_racy(readers));
    }

    #[test]
    fn slot_4095_is_told_apart_from_slot_0() {
        let t = table(16);
        record(&t, 0x40, 4095, false);
        record(&t, 0x40, 4095, true);
        assert_eq!(entry_of(&t, 0x40) & SHARED, 0);
        record(&t, 0x40, 0, false);
        assert_ne!(entry_of(&t, 0x40) & SHARED, 0);
    }

    #[test]
    fn colliding_granules_probe_onwards_and_a_full_table_refuses() {
        let t = table(8);
        for k in 0..8u64 {
            assert!(record(&t, 0x10_0000 + 8 * k, 1, false), "granule {k}");
        }
        assert!(!record(&t, 0x20_0000, 1, false), "a full table has no room");
        for k in 0..8u64 {
            assert_ne!(entry_of(&t, 0x10_0000 + 8 * k), 0);
        }
    }

    #[test]
    fn watched_granules_are_found_and_others_are_not() {
        let t = table(64);
        assert!(watch(&t, granule(0x5008)));
        assert!(is_watched(&t, 0x5008));
        assert!(is_watched(&t, 0x500f));
        assert!(!is_watched(&t, 0x5010));
        assert!(!is_watched(&t, 0x5000));
        // A profiled entry is not watched until the scheduler says so.
        record(&t, 0x6000, 1, true);
        assert!(!is_watched(&t, 0x6000));
        watch(&t, granule(0x6000));
        assert!(is_watched(&t, 0x6000));
    }

    #[test]
    fn noting_a_watched_granule_records_nothing_and_others_are_recorded() {
        let t = table(64);
        watch(&t, granule(0x7000));
        assert_eq!(note(&t, 0x7004, 1, true, true), Noted::Watched);
        assert_eq!(note(&t, 0x7000, 2, false, true), Noted::Watched);
        assert!(!entry_racy(entry_of(&t, 0x7000)), "a watched entry stays a watch entry");
        assert_eq!(note(&t, 0x8000, 1, false, true), Noted::Claimed);
        assert_eq!(note(&t, 0x8000, 2, true, false), Noted::Recorded, "an existing entry is updated without claiming");
        assert!(entry_racy(entry_of(&t, 0x8000)), "new sharing shows in the table");
        assert!(!is_watched(&t, 0x8000));
        assert_eq!(note(&t, 0x9000, 1, true, false), Noted::NoRoom, "no new entry without a claim");
        assert_eq!(entry_of(&t, 0x9000), 0);
        let full = table(2);
        note(&full, 0x10, 1, false, true);
        note(&full, 0x18, 1, false, true);
        assert_eq!(note(&full, 0x20, 1, false, true), Noted::NoRoom);
    }
}
