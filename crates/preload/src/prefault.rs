//! A fork server's copy gets its page tables for the program's code before it runs.
//!
//! `fork` copies a process's page-table entries only for mappings that hold private pages; the
//! read-only segments of the loaded files (code, constant data) have none, so a copy starts with
//! no entry for them and takes a page fault at the first touch of every 64 KiB of code it runs:
//! about 30 faults for a small C program, each 1-3 µs on the execution's CPU. The server notes
//! those segments once ([`note_read_only_segments`], with the dynamic loader's list of objects)
//! and every copy fills their entries ([`fill`]) while it is still on the CPU it was born on,
//! before its start barrier: the same work, off the CPU executions run on. The pages are the
//! page cache's, shared with the server; nothing the program can observe changes (`mincore`
//! aside, which reports the page cache anyway).
//!
//! Segments the process can write are left alone: filling them in advance would copy pages the
//! program may never write.
use core::sync::atomic::{AtomicUsize, Ordering};

use crate::sys;

/// `madvise` advice that faults a range's pages in for reading (Linux 5.14).
const MADV_POPULATE_READ: u64 = 22;

/// Most segments noted (a program with more fills the first ones).
const MAX_SEGMENTS: usize = 64;

/// Pages filled at most in one copy: a program with a large code segment (tens of MB) touches a
/// small part of it, and every entry filled is one more for the copy's exit to take down.
const MAX_PAGES: u64 = 4096;

const PAGE: u64 = 4096;

/// The noted segments as (start, length), page-aligned; written by the server before it serves,
/// read by its copies.
static SEGMENTS: [[AtomicUsize; 2]; MAX_SEGMENTS] = [const { [AtomicUsize::new(0), AtomicUsize::new(0)] }; MAX_SEGMENTS];
static COUNT: AtomicUsize = AtomicUsize::new(0);

/// Notes the read-only loadable segments of every object the dynamic loader has mapped (the
/// vDSO left out). Call in the fork server before it serves: uses libc (`dl_iterate_phdr`).
pub fn note_read_only_segments() {
    // SAFETY: dl_iterate_phdr calls `each` with the loader's live records, one at a time, under
    // its lock; `each` only reads them.
    unsafe { libc::dl_iterate_phdr(Some(each), core::ptr::null_mut()) };
}

unsafe extern "C" fn each(info: *mut libc::dl_phdr_info, _size: usize, _data: *mut libc::c_void) -> libc::c_int {
    // SAFETY: the loader passes a live record.
    let info = unsafe { &*info };
    // SAFETY: getauxval reads the process's auxiliary vector.
    let vdso = unsafe { libc::getauxval(libc::AT_SYSINFO_EHDR) };
    if info.dlpi_phdr.is_null() || (vdso != 0 && info.dlpi_addr == vdso) {
        return 0;
    }
    // SAFETY: the loader's record holds `dlpi_phnum` program headers at `dlpi_phdr`.
    let headers = unsafe { core::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
    for h in headers.iter().filter(|h| h.p_type == libc::PT_LOAD && h.p_flags & libc::PF_W == 0 && h.p_memsz > 0) {
        let start = (info.dlpi_addr + h.p_vaddr) & !(PAGE - 1);
        let end = (info.dlpi_addr + h.p_vaddr + h.p_memsz).div_ceil(PAGE) * PAGE;
        let n = COUNT.load(Ordering::Relaxed);
        if n == MAX_SEGMENTS {
            return 1;
        }
        SEGMENTS[n][0].store(start as usize, Ordering::Relaxed);
        SEGMENTS[n][1].store((end - start) as usize, Ordering::Relaxed);
        COUNT.store(n + 1, Ordering::Relaxed);
    }
    0
}

/// Fills the page-table entries of the noted segments, at most [`MAX_PAGES`] pages in all. Call
/// in a copy before it runs any of the program's code; raw system calls only. A kernel without
/// the advice, or a segment since unmapped, is skipped: the copy then faults as it would have.
pub fn fill() {
    let mut budget = MAX_PAGES * PAGE;
    for segment in SEGMENTS.iter().take(COUNT.load(Ordering::Relaxed)) {
        let (start, len) = (segment[0].load(Ordering::Relaxed) as u64, segment[1].load(Ordering::Relaxed) as u64);
        let len = len.min(budget);
        if len == 0 {
            break;
        }
        // SAFETY: madvise with a populate advice only faults pages of this process's own mappings
        // in, as reading them would; it changes no memory.
        let rc = unsafe { sys::syscall(libc::SYS_madvise, &[start, len, MADV_POPULATE_READ]) };
        if rc == -(libc::EINVAL as i64) {
            return; // a kernel before 5.14
        }
        budget -= len;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noted(addr: usize) -> bool {
        SEGMENTS.iter().take(COUNT.load(Ordering::Relaxed)).any(|s| (s[0].load(Ordering::Relaxed)..s[0].load(Ordering::Relaxed) + s[1].load(Ordering::Relaxed)).contains(&addr))
    }

    #[test]
    fn code_is_noted_and_writable_data_is_not() {
        static WRITTEN: AtomicUsize = AtomicUsize::new(0);
        note_read_only_segments();
        assert!(noted(libc::getpid as usize), "libc's code");
        assert!(noted(code_is_noted_and_writable_data_is_not as usize), "the program's own code");
        assert!(!noted(&WRITTEN as *const AtomicUsize as usize), "a writable static");
        fill(); // faults nothing in that is not mapped
        WRITTEN.store(1, Ordering::Relaxed);
    }
}
