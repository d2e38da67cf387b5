//! The shared-memory region of one execution, on the scheduler's side: a memfd (so nothing can
//! leak into /dev/shm) sized and laid out as `dara_abi` says, mapped here and opened by each target
//! process through `/proc/<dara-pid>/fd/<n>`.
//!
//! The scheduler's side of the slot handoff lives here too ([`Region::observe`],
//! [`Region::grant`], [`Region::sleep`], ...): thin wrappers that give `dara_abi::handoff`'s
//! functions, the ones its loom test checks, the region's slots and the kernel's futex.
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use dara_abi::handoff::{self, Answer, Futex, Seen, Waited};
use dara_abi::{Header, Slot, MAGIC, MAX_SLOTS, REGION_SIZE, VERSION};
use memmap2::MmapMut;

use crate::futex;
use crate::preempt::Preemption;

pub struct Region {
    file: File,
    map: MmapMut,
}

impl Region {
    /// Creates a zeroed region with a valid header, the `--preempt-on` settings, whether outside
    /// peers are kept apart (`outside`), and (for memory
    /// points outside the profiling run) the watch set in the access table.
    pub fn create(cpus: u32, random_seed: u64, preempt: &Preemption, profile: bool, outside: bool) -> std::io::Result<Region> {
        // SAFETY: memfd_create reads a NUL-terminated name and returns a new descriptor or -1.
        let fd = unsafe { libc::memfd_create(c"dara-region".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh descriptor that nothing else owns.
        let file = unsafe { File::from_raw_fd(fd) };
        file.set_len(REGION_SIZE as u64)?;
        // SAFETY: the memfd is ours; other mappers (the targets) only use the atomics of the
        // layout, and the header fields written below are written before any target exists.
        let map = unsafe { MmapMut::map_mut(&file)? };
        let region = Region { file, map };
        // SAFETY: the mapping is REGION_SIZE bytes, page aligned, and zeroed; Header is repr(C)
        // and valid when zeroed; no target maps it yet, so this exclusive write is race-free.
        let header = unsafe { &mut *(region.map.as_ptr() as *mut Header) };
        header.magic = MAGIC;
        header.version = VERSION;
        header.nslots = MAX_SLOTS as u32;
        header.cpus = cpus;
        header.random_seed = random_seed;
        header.scheduler_pid = std::process::id();
        header.preempt_flags = preempt.flags(profile);
        header.preempt_edges = preempt.edges;
        header.outside = u32::from(outside);
        if preempt.atomics {
            let dir = crate::atomic_plans::directory()?;
            for (byte, &b) in header.atomic_plans.iter().zip(dir.as_os_str().as_encoded_bytes()) {
                byte.store(b, Ordering::Relaxed);
            }
        }
        if header.preempt_flags & dara_abi::preempt::MEMORY != 0 {
            // A set of at most MAX_WATCHED granules in a table four times larger, probed up to
            // 64 entries deep, always fits.
            let unwatched = preempt.write_watch_set(region.access_table());
            debug_assert_eq!(unwatched, 0, "the watch set did not fit into the access table");
        }
        Ok(region)
    }

    /// The directory of atomic-instruction plans written at creation (`--preempt-on atomics`).
    pub fn atomic_plans(&self) -> Option<std::path::PathBuf> {
        use std::os::unix::ffi::OsStrExt;
        let bytes: Vec<u8> = self.header().atomic_plans.iter().map(|b| b.load(Ordering::Relaxed)).take_while(|&b| b != 0).collect();
        (!bytes.is_empty()).then(|| std::ffi::OsStr::from_bytes(&bytes).into())
    }

    /// dara's descriptor of the region's memfd (handed to the target as `dara_abi::SHM_FD`).
    pub fn fd(&self) -> i32 {
        self.file.as_raw_fd()
    }

    pub fn header(&self) -> &Header {
        // SAFETY: the mapping starts with a Header (see `create`) and lives as long as self;
        // all fields shared with targets after creation are atomics.
        unsafe { &*(self.map.as_ptr() as *const Header) }
    }

    /// Kernel pid and tid of slot `i`'s thread (0 before it wrote them).
    pub fn kernel_ids(&self, i: usize) -> (u32, u32) {
        let slot = self.slot(i);
        (slot.pid.load(std::sync::atomic::Ordering::Relaxed), slot.tid.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// Slot `i` (< MAX_SLOTS).
    pub fn slot(&self, i: usize) -> &Slot {
        assert!(i < MAX_SLOTS);
        // SAFETY: i < MAX_SLOTS so the slot lies inside the mapping, at a 64-byte aligned offset;
        // Slot consists of atomics only.
        unsafe { &*(self.map.as_ptr().add(dara_abi::slot_offset(i)) as *const Slot) }
    }

    /// Process `p`'s coverage area. Read after the process is gone, or racily while it runs
    /// (counters only grow; a first hit writes its pc and step before its count).
    pub fn coverage(&self, p: usize) -> &dara_abi::Coverage {
        assert!(p < dara_abi::MAX_PROCESSES);
        // SAFETY: p < MAX_PROCESSES so the area lies inside the mapping at a 64-byte aligned
        // offset; Coverage consists of atomics only.
        unsafe { &*(self.map.as_ptr().add(dara_abi::cov_offset(p)) as *const dara_abi::Coverage) }
    }

    /// Whether process `p` has counted an edge yet: one load of its area's
    /// [`reached`](dara_abi::Coverage::reached) word, cheap enough to ask at every post.
    pub fn coverage_touched(&self, p: usize) -> bool {
        self.coverage(p).reached.load(Ordering::Acquire) != 0
    }

    /// The memory-preemption access table.
    pub fn access_table(&self) -> &dara_abi::AccessTable {
        // SAFETY: the table lies inside the mapping at ACCESS_TABLE_OFFSET (64-byte aligned) and
        // consists of atomics only.
        unsafe { &*(self.map.as_ptr().add(dara_abi::ACCESS_TABLE_OFFSET) as *const dara_abi::AccessTable) }
    }

    /// Files the program opened for writing, as the preload noted them (in the order first
    /// opened), and whether more were opened than the table holds.
    pub fn written_files(&self) -> (Vec<String>, bool) {
        let header = self.header();
        let claimed = header.written_count.load(Ordering::Acquire) as usize;
        let files = header
            .written
            .iter()
            .take(claimed)
            .filter_map(|entry| {
                let len = (entry.len.load(Ordering::Acquire) as usize).min(dara_abi::WRITTEN_PATH_MAX);
                let bytes: Vec<u8> = entry.path[..len].iter().map(|b| b.load(Ordering::Relaxed)).collect();
                (len > 0).then(|| String::from_utf8_lossy(&bytes).into_owned())
            })
            .collect();
        (files, claimed > dara_abi::MAX_WRITTEN_FILES)
    }

    /// Number of slots claimed so far (bounded by MAX_SLOTS).
    pub fn claimed_slots(&self) -> usize {
        (handoff::claimed(&self.header().next_slot) as usize).min(MAX_SLOTS)
    }

    /// Wakes the scheduler's wait on `sched_wake` (used by dara's own helper threads).
    pub fn wake_scheduler(&self) {
        handoff::wake_scheduler(&self.header().sched_wake, &Kernel(Duration::ZERO));
    }

    /// What slot `i` shows, given the post count seen last on it.
    pub fn observe(&self, i: usize, seen_posts: u32) -> Seen {
        handoff::observe(self.slot(i), seen_posts)
    }

    /// The op and argument words slot `i` posted (see [`handoff::request`]).
    pub fn posted_words(&self, i: usize) -> (u32, [u64; 4]) {
        handoff::request(self.slot(i))
    }

    /// Answers slot `i`'s post with `result` at virtual time `now_ns`, and wakes its thread.
    pub fn grant(&self, i: usize, result: i64, now_ns: u64) {
        handoff::grant(self.slot(i), Answer { result: result as u64, now_ns }, &Kernel(Duration::ZERO));
    }

    /// The scheduler's wake count, read before looking at the slots; given to [`Region::sleep`].
    pub fn wake_count(&self) -> u32 {
        handoff::wake_count(&self.header().sched_wake)
    }

    /// Sleeps until a thread posts (or anything else wakes the scheduler) after `seen` was read,
    /// at most `timeout`.
    pub fn sleep(&self, seen: u32, timeout: Duration) -> Waited {
        handoff::sleep(&self.header().sched_wake, seen, &Kernel(timeout))
    }
}

/// The kernel's futex on the region's words, waiting at most the given time.
struct Kernel(Duration);

impl Futex<AtomicU32> for Kernel {
    fn wait(&self, word: &AtomicU32, expected: u32) -> Waited {
        futex::wait(word, expected, self.0)
    }

    fn wake(&self, word: &AtomicU32, count: u32) {
        futex::wake(word, count.min(i32::MAX as u32) as i32);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coverage_touched_reads_the_reached_word() {
        for process in [0, 1, 63, dara_abi::MAX_PROCESSES - 1] {
            let region = Region::create(2, 1, &Default::default(), false, false).unwrap();
            // Every preload writes `guards` (0 here), which must not count as coverage.
            region.coverage(process).guards.store(0, Ordering::Relaxed);
            assert!(!region.coverage_touched(process), "process {process}: nothing counted yet");
            region.coverage(process).reached.store(1, Ordering::Relaxed);
            assert!(region.coverage_touched(process), "process {process}");
            assert!(!region.coverage_touched((process + 1) % dara_abi::MAX_PROCESSES), "another process's area is untouched");
        }
    }
}
