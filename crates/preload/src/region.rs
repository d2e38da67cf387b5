//! The shared-memory region seen from inside the target: mapping it once in the constructor and
//! typed access to the header, the process table and the slots.
//!
//! The region is mapped before any user code runs and never unmapped, so references into it are
//! `'static`. A null [`REGION`] means the preload is inert (no `DARA_SHM`): every hook then
//! forwards to libc.
use core::sync::atomic::{AtomicPtr, AtomicU32, Ordering};

use dara_abi::{Header, ProcessEntry, Slot, MAGIC, REGION_SIZE, VERSION};

use crate::sys;

static REGION: AtomicPtr<u8> = AtomicPtr::new(core::ptr::null_mut());
/// This process's index in the process table (`u32::MAX` until claimed).
static PROCESS: AtomicU32 = AtomicU32::new(u32::MAX);

/// Why the region could not be mapped.
pub enum MapError {
    Open,
    Map,
    Version,
}

/// Maps the region `path` (NUL-terminated) names and checks the header. Called once, from the
/// constructor, before any other thread of the target exists.
pub fn map(path: &[u8]) -> Result<&'static Header, MapError> {
    debug_assert_eq!(path.last(), Some(&0));
    let passed_down = path.strip_suffix(&[0]) == Some(dara_abi::SHM_PATH.as_bytes());
    // The descriptor dara passed down is mapped as it is: opening its /proc path again would
    // only cost a path walk (10-20 µs of every process's start).
    let fd = if passed_down {
        dara_abi::SHM_FD as i64
    } else {
        let flags = (libc::O_RDWR | libc::O_CLOEXEC) as u64;
        // SAFETY: `path` is NUL-terminated and outlives the call.
        unsafe { sys::syscall(libc::SYS_openat, &[libc::AT_FDCWD as u64, path.as_ptr() as u64, flags]) }
    };
    if fd < 0 {
        return Err(MapError::Open);
    }
    let prot = (libc::PROT_READ | libc::PROT_WRITE) as u64;
    // SAFETY: a fresh shared mapping of an fd we own; no existing memory is affected.
    let addr = unsafe {
        sys::syscall(
            libc::SYS_mmap,
            &[
                0,
                REGION_SIZE as u64,
                prot,
                libc::MAP_SHARED as u64,
                fd as u64,
                0,
            ],
        )
    };
    if passed_down {
        // The descriptor dara passed down stays open (forked children inherit it, and an
        // `execve` makes it survive for the next image: see `process::exec`), but close-on-exec,
        // so a program that runs something outside dara's control does not hand it on.
        // SAFETY: F_SETFD on a descriptor this process owns.
        // dara's /proc descriptor likewise.
        for fd in [dara_abi::SHM_FD, dara_abi::HOST_PROC_FD] {
            // SAFETY: F_SETFD on a descriptor this process owns (EBADF if dara passed none).
            unsafe { sys::syscall(libc::SYS_fcntl, &[fd as u64, libc::F_SETFD as u64, libc::FD_CLOEXEC as u64]) };
        }
    } else {
        sys::close(fd as i32);
    }
    if (-4095..0).contains(&addr) {
        return Err(MapError::Map);
    }
    let base = addr as *mut u8;
    // SAFETY: the mapping is REGION_SIZE bytes, page aligned, and lives for the rest of the
    // process; Header is repr(C) and made of integers and atomics, valid for any bytes.
    let header = unsafe { &*(base as *const Header) };
    if header.magic != MAGIC || header.version != VERSION {
        return Err(MapError::Version);
    }
    REGION.store(base, Ordering::Release);
    Ok(header)
}

/// The header, or `None` when the preload is inert.
#[inline]
pub fn header() -> Option<&'static Header> {
    let base = REGION.load(Ordering::Acquire);
    if base.is_null() {
        return None;
    }
    // SAFETY: REGION is only ever set by `map` to a live, checked mapping that is never unmapped.
    Some(unsafe { &*(base as *const Header) })
}

/// Whether the preload is active in this process.
#[inline]
pub fn active() -> bool {
    !REGION.load(Ordering::Relaxed).is_null()
}

/// Number of usable slots: the header's count, bounded by what fits in the mapping.
pub fn nslots(header: &Header) -> u32 {
    header.nslots.min(dara_abi::MAX_SLOTS as u32)
}

/// Slot `i`, if it exists.
#[inline]
pub fn slot(i: u32) -> Option<&'static Slot> {
    let header = header()?;
    if i >= nslots(header) {
        return None;
    }
    let base = REGION.load(Ordering::Acquire);
    // SAFETY: `i < nslots <= MAX_SLOTS`, so the slot lies inside the REGION_SIZE mapping;
    // Slot is repr(C, align(64)) of atomics and slot_offset keeps that alignment.
    Some(unsafe { &*(base.add(dara_abi::slot_offset(i as usize)) as *const Slot) })
}

/// Records the process index claimed in the constructor.
pub fn set_process(p: u32) {
    PROCESS.store(p, Ordering::Release);
}

/// This process's logical index.
pub fn process() -> u32 {
    PROCESS.load(Ordering::Acquire)
}

/// This process's coverage area, once the process has its entry in the process table.
pub fn coverage() -> Option<&'static dara_abi::Coverage> {
    let base = REGION.load(Ordering::Acquire);
    let p = PROCESS.load(Ordering::Acquire) as usize;
    if base.is_null() || p >= dara_abi::MAX_PROCESSES {
        return None;
    }
    // SAFETY: `p < MAX_PROCESSES`, so the area lies inside the REGION_SIZE mapping (see
    // `dara_abi::cov_offset`) at a 64-byte aligned offset, and the mapping is never unmapped;
    // Coverage is made of atomics, valid for any bytes.
    Some(unsafe { &*(base.add(dara_abi::cov_offset(p)) as *const dara_abi::Coverage) })
}

/// The memory-preemption access table shared by all processes.
pub fn access_table() -> Option<&'static dara_abi::AccessTable> {
    let base = REGION.load(Ordering::Acquire);
    if base.is_null() {
        return None;
    }
    // SAFETY: the table lies inside the REGION_SIZE mapping at ACCESS_TABLE_OFFSET (64-byte
    // aligned); it is made of atomics, valid for any bytes, and never unmapped.
    Some(unsafe { &*(base.add(dara_abi::ACCESS_TABLE_OFFSET) as *const dara_abi::AccessTable) })
}

/// This process's process-table entry.
pub fn process_entry() -> Option<&'static ProcessEntry> {
    header()?.processes.get(process() as usize)
}

/// CPU count the target observes.
pub fn cpus() -> Option<u32> {
    header().map(|h| h.cpus.max(1))
}
