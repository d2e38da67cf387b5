//! The shared-memory region of one execution, on the scheduler's side: a memfd (so nothing can
//! leak into /dev/shm) sized and laid out as `dara_abi` says, mapped here and opened by each target
//! process through `/proc/<dara-pid>/fd/<n>`.
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd};
use std::sync::atomic::Ordering;

use dara_abi::{Header, Slot, MAGIC, MAX_SLOTS, REGION_SIZE, VERSION};
use memmap2::MmapMut;

use crate::futex;
use crate::preempt::Preemption;

pub struct Region {
    file: File,
    map: MmapMut,
}

impl Region {
    /// Creates a zeroed region with a valid header, the `--preempt-on` settings and (for memory
    /// points outside the profiling run) the watch set in the access table.
    pub fn create(cpus: u32, random_seed: u64, preempt: &Preemption, profile: bool) -> std::io::Result<Region> {
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
        if header.preempt_flags & dara_abi::preempt::MEMORY != 0 {
            // A set of at most MAX_WATCHED granules in a table four times larger, probed up to
            // 64 entries deep, always fits.
            let unwatched = preempt.write_watch_set(region.access_table());
            debug_assert_eq!(unwatched, 0, "the watch set did not fit into the access table");
        }
        Ok(region)
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

    /// The memory-preemption access table.
    pub fn access_table(&self) -> &dara_abi::AccessTable {
        // SAFETY: the table lies inside the mapping at ACCESS_TABLE_OFFSET (64-byte aligned) and
        // consists of atomics only.
        unsafe { &*(self.map.as_ptr().add(dara_abi::ACCESS_TABLE_OFFSET) as *const dara_abi::AccessTable) }
    }

    /// Number of slots claimed so far (bounded by MAX_SLOTS).
    pub fn claimed_slots(&self) -> usize {
        (self.header().next_slot.load(Ordering::Acquire) as usize).min(MAX_SLOTS)
    }

    /// Wakes the scheduler's wait on `sched_wake` (used by dara's own helper threads).
    pub fn wake_scheduler(&self) {
        self.header().sched_wake.fetch_add(1, Ordering::AcqRel);
        futex::wake(&self.header().sched_wake, 1);
    }
}
