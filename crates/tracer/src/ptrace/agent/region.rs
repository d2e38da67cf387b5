//! The agent's view of the shared region: mapped from the descriptor dara passes
//! ([`dara_abi::SHM_FD`]), checked like the preload checks it, and the handoff on a slot from the
//! thread's side, which the agent takes on behalf of a tracee.
use std::sync::atomic::{AtomicU32, Ordering};

use dara_abi::handoff::{self, Answer, Futex, Waited};
use dara_abi::{Header, Request, Slot, REGION_SIZE};

/// The mapped region (never unmapped: the agent lives as long as the execution).
pub struct Region {
    base: *mut u8,
}

impl Region {
    /// Maps the region behind `fd` and checks its magic and version.
    pub fn map(fd: i32) -> Result<Region, String> {
        // SAFETY: a fresh shared mapping of the region's size; nothing else is at that address.
        let base = unsafe { libc::mmap(std::ptr::null_mut(), REGION_SIZE, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0) };
        if base == libc::MAP_FAILED {
            return Err(format!("cannot map the shared region: {}", std::io::Error::last_os_error()));
        }
        let region = Region { base: base as *mut u8 };
        let header = region.header();
        if header.magic != dara_abi::MAGIC || header.version != dara_abi::VERSION {
            return Err(format!("the shared region is of another dara version ({} here, {} there): rebuild the workspace", dara_abi::VERSION, header.version));
        }
        Ok(region)
    }

    pub fn header(&self) -> &Header {
        // SAFETY: the mapping starts with a Header, lives as long as `self`, and every field
        // that both sides write is atomic.
        unsafe { &*(self.base as *const Header) }
    }

    /// The access table of memory-level points (`dara_abi::access`).
    pub fn access_table(&self) -> &dara_abi::AccessTable {
        // SAFETY: the table lies inside the mapping at ACCESS_TABLE_OFFSET (64-byte aligned) and
        // consists of atomics only.
        unsafe { &*(self.base.add(dara_abi::ACCESS_TABLE_OFFSET) as *const dara_abi::AccessTable) }
    }

    /// Slot `i`, if the region has it.
    pub fn slot(&self, i: u32) -> Option<&Slot> {
        ((i as usize) < dara_abi::MAX_SLOTS).then(|| {
            // SAFETY: slot i lies inside the mapping (checked above), is aligned, and is only
            // accessed through atomics.
            unsafe { &*(self.base.add(dara_abi::slot_offset(i as usize)) as *const Slot) }
        })
    }

    /// Posts `request` on `slot` (the thread's side of the protocol) and wakes the scheduler;
    /// does not wait. `mask`: the signals the thread's wait leaves blocked (its own mask, or the
    /// call's: `ppoll`, `pselect6`), from which the scheduler sees which pending signals end it.
    pub fn post(&self, slot: &Slot, request: Request, mask: u64) {
        let (op, args) = request.encode();
        handoff::write_request(slot, op as u32, args);
        slot.program_mask.store(mask, Ordering::Relaxed);
        // The thread may have read or written sockets and pipes since its last post without a
        // stop (the agent does not stop those calls): the scheduler looks at readiness again.
        slot.received_unposted.store(1, Ordering::Relaxed);
        handoff::publish(slot, &self.header().sched_wake, &Kernel);
    }

    /// The grant on `slot`, if it came; takes the token (the slot is RUNNING again).
    pub fn granted(&self, slot: &Slot) -> Option<Answer> {
        (slot.state.load(Ordering::Acquire) == dara_abi::state::GRANTED).then(|| {
            let answer = handoff::await_grant(slot, &Kernel);
            handoff::resume(slot);
            answer
        })
    }

    /// Marks `slot` exited and tells the scheduler.
    pub fn finish(&self, slot: &Slot) {
        handoff::finish(slot);
        handoff::wake_scheduler(&self.header().sched_wake, &Kernel);
    }
}

/// The kernel's futex on words of the shared region (shared, not private: the scheduler's
/// process maps the same pages).
pub struct Kernel;

impl Futex<AtomicU32> for Kernel {
    fn wait(&self, word: &AtomicU32, expected: u32) -> Waited {
        // SAFETY: FUTEX_WAIT on a live, aligned word of the region, no timeout.
        unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAIT, expected, 0usize, 0usize, 0u32) };
        Waited::Woken
    }

    fn wake(&self, word: &AtomicU32, count: u32) {
        // SAFETY: FUTEX_WAKE on a live, aligned word of the region.
        unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, count, 0usize, 0usize, 0u32) };
    }
}

/// One entry of `futex_waitv` (`struct futex_waitv`).
#[repr(C)]
struct WaitV {
    val: u64,
    uaddr: u64,
    flags: u32,
    reserved: u32,
}

/// `FUTEX2_SIZE_U32`: the words are 32 bits; not `FUTEX2_PRIVATE`: shared with the scheduler.
const FUTEX2_SIZE_U32: u32 = 2;
/// The kernel's limit on words in one `futex_waitv`.
pub const MAX_WAIT_WORDS: usize = 128;

/// Waits until one of `words` (each with the value it is expected to hold) changes, or
/// `timeout_ms` passed (measured on CLOCK_MONOTONIC); true when the time ran out.
pub fn wait_any(words: &[(&AtomicU32, u32)], timeout_ms: u64) -> bool {
    let list: Vec<WaitV> = words.iter().take(MAX_WAIT_WORDS).map(|(w, v)| WaitV { val: u64::from(*v), uaddr: w.as_ptr() as u64, flags: FUTEX2_SIZE_U32, reserved: 0 }).collect();
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: writes one timespec into the live local.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    let total = now.tv_nsec as u64 + timeout_ms * 1_000_000;
    let until = libc::timespec { tv_sec: now.tv_sec + (total / 1_000_000_000) as i64, tv_nsec: (total % 1_000_000_000) as i64 };
    // SAFETY: the list and the absolute timeout are live locals; the kernel only reads them.
    let rc = unsafe { libc::syscall(libc::SYS_futex_waitv, list.as_ptr(), list.len() as u32, 0u32, &until as *const libc::timespec, libc::CLOCK_MONOTONIC) };
    rc < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ETIMEDOUT)
}
