//! A fork server's copy gets its page tables before it runs, on the CPU it was born on.
//!
//! `fork` copies a process's page-table entries only for mappings that hold private pages, and
//! marks those pages copy-on-write. A copy therefore starts with no entry for the read-only
//! segments of the loaded files (code, constant data), and takes a page fault at the first touch
//! of every 64 KiB of code it runs; and its first write to each page the server had written
//! (glibc's and the loader's data, the main thread's TLS) is a copy-on-write fault. For a small C
//! program that is about 50 faults, each about 3 µs of the execution's CPU. The server notes once
//! what to fill ([`note`]): the read-only loadable segments of every object, from the dynamic
//! loader's list, and the pages of writable segments it wrote itself (from `/proc/self/pagemap`:
//! present and private), which a copy is most likely to write again. Every copy fills them
//! ([`fill`], `MADV_POPULATE_READ` / `MADV_POPULATE_WRITE`) before its start barrier, while it is
//! still on the CPU it was born on: the same work, off the CPU executions run on. Nothing the
//! program can observe changes: the contents are the same, only when the kernel does its work.
//!
//! Left out: the vDSO, and the preload's own code (a copy runs what it needs of it before it
//! parks, and most of the rest never: every entry filled is one more for the copy's exit to take
//! down); pages of writable segments the server never wrote (filling them would copy pages the
//! program may never write).
use core::sync::atomic::{AtomicUsize, Ordering};

use crate::sys;

/// `madvise` advice that faults a range's pages in for reading (Linux 5.14).
const MADV_POPULATE_READ: u64 = 22;
/// ... and for writing, breaking copy-on-write sharing (Linux 5.14).
const MADV_POPULATE_WRITE: u64 = 23;

/// Pages filled for reading at most in one copy: a program with a large code segment (tens of
/// MB) touches a small part of it.
const MAX_READ_PAGES: usize = 4096;

const PAGE: usize = 4096;

/// Most ranges of each kind noted (a program with more fills the first ones).
const MAX_RANGES: usize = 64;

/// Page-aligned (start, length) ranges, written by the server before it serves and read by its
/// copies (which inherit them).
struct Ranges {
    at: [[AtomicUsize; 2]; MAX_RANGES],
    count: AtomicUsize,
}

impl Ranges {
    const fn new() -> Ranges {
        Ranges { at: [const { [AtomicUsize::new(0), AtomicUsize::new(0)] }; MAX_RANGES], count: AtomicUsize::new(0) }
    }

    /// Adds [start, end), pages rounded outwards; false once full.
    fn add(&self, start: usize, end: usize) -> bool {
        let n = self.count.load(Ordering::Relaxed);
        if n == MAX_RANGES {
            return false;
        }
        let start = start & !(PAGE - 1);
        self.at[n][0].store(start, Ordering::Relaxed);
        self.at[n][1].store(end.div_ceil(PAGE) * PAGE - start, Ordering::Relaxed);
        self.count.store(n + 1, Ordering::Relaxed);
        true
    }

    fn iter(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.at.iter().take(self.count.load(Ordering::Relaxed)).map(|r| (r[0].load(Ordering::Relaxed), r[1].load(Ordering::Relaxed)))
    }
}

/// Read-only loadable segments.
static READ: Ranges = Ranges::new();
/// Writable loadable segments (and the main thread's TLS), before [`note`] narrows them down to
/// the pages the server wrote.
static WRITABLE: Ranges = Ranges::new();
/// The pages of `WRITABLE` the server wrote, in runs.
static WRITTEN: Ranges = Ranges::new();

/// Notes what every copy fills. Call in the fork server before it serves: uses libc
/// (`dl_iterate_phdr`, `pthread_self`).
pub fn note() {
    // SAFETY: dl_iterate_phdr calls `each` with the loader's live records, one at a time, under
    // its lock; `each` only reads them.
    unsafe { libc::dl_iterate_phdr(Some(each), core::ptr::null_mut()) };
    // The main thread's descriptor and the static TLS below it (errno, glibc's per-thread state).
    // SAFETY: pthread_self only reads the thread pointer.
    let thread = unsafe { libc::pthread_self() } as usize;
    WRITABLE.add(thread.saturating_sub(PAGE), thread + 1);
    note_written();
}

unsafe extern "C" fn each(info: *mut libc::dl_phdr_info, _size: usize, _data: *mut libc::c_void) -> libc::c_int {
    // SAFETY: the loader passes a live record.
    let info = unsafe { &*info };
    if info.dlpi_phdr.is_null() {
        return 0;
    }
    // SAFETY: the loader's record holds `dlpi_phnum` program headers at `dlpi_phdr`.
    let headers = unsafe { core::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
    let base = info.dlpi_addr as usize;
    let span = |h: &libc::Elf64_Phdr| (base + h.p_vaddr as usize, base + (h.p_vaddr + h.p_memsz) as usize);
    // SAFETY: getauxval reads the process's auxiliary vector.
    let vdso = unsafe { libc::getauxval(libc::AT_SYSINFO_EHDR) } as usize;
    let own = note as *const () as usize;
    let loads = || headers.iter().filter(|h| h.p_type == libc::PT_LOAD && h.p_memsz > 0);
    if base == vdso && vdso != 0 {
        return 0;
    }
    let preload = loads().any(|h| (span(h).0..span(h).1).contains(&own));
    // What the loader made read-only after relocating (its end rounded down, as it does).
    let relro_end = headers.iter().find(|h| h.p_type == libc::PT_GNU_RELRO).map_or(0, |h| span(h).1 & !(PAGE - 1));
    for h in loads() {
        let (start, end) = span(h);
        let added = if h.p_flags & libc::PF_W == 0 {
            preload || READ.add(start, end)
        } else {
            start.max(relro_end) >= end || WRITABLE.add(start.max(relro_end), end)
        };
        if !added {
            return 1;
        }
    }
    0
}

/// Narrows `WRITABLE` down to the pages present and private (written: a page never written is the
/// file's, or not there at all) in runs, into `WRITTEN`.
fn note_written() {
    // SAFETY: open of a literal path.
    let fd = unsafe { sys::syscall(libc::SYS_openat, &[libc::AT_FDCWD as u64, c"/proc/self/pagemap".as_ptr() as u64, (libc::O_RDONLY | libc::O_CLOEXEC) as u64]) };
    if fd < 0 {
        return;
    }
    for (start, len) in WRITABLE.iter() {
        let mut run: Option<usize> = None;
        for page in (start..start + len).step_by(PAGE).chain(core::iter::once(start + len)) {
            let written = page < start + len && page_written(fd as i32, page);
            match (run, written) {
                (None, true) => run = Some(page),
                (Some(from), false) => {
                    if !WRITTEN.add(from, page) {
                        sys::close(fd as i32);
                        return;
                    }
                    run = None;
                }
                _ => {}
            }
        }
    }
    sys::close(fd as i32);
}

/// Whether `/proc/self/pagemap` (open as `fd`) says the page at `page` is present and private.
fn page_written(fd: i32, page: usize) -> bool {
    let mut entry = 0u64;
    // SAFETY: pread writes at most 8 bytes into the live local.
    let n = unsafe { sys::syscall(libc::SYS_pread64, &[fd as u64, &mut entry as *mut u64 as u64, 8, (page / PAGE * 8) as u64]) };
    const PRESENT: u64 = 1 << 63;
    const FILE_OR_SHARED: u64 = 1 << 61;
    n == 8 && entry & PRESENT != 0 && entry & FILE_OR_SHARED == 0
}

/// Fills the page-table entries noted: read-only segments for reading (at most
/// [`MAX_READ_PAGES`]), the pages the server wrote for writing. Call in a copy before it runs any
/// of the program's code; raw system calls only. A kernel without the advice, or a range the
/// kernel refuses, is skipped: the copy then faults as it would have.
pub fn fill() {
    let mut budget = MAX_READ_PAGES * PAGE;
    for (start, len) in READ.iter() {
        let len = len.min(budget);
        if len == 0 || !populate(start, len, MADV_POPULATE_READ) {
            break;
        }
        budget -= len;
    }
    for (start, len) in WRITTEN.iter() {
        populate(start, len, MADV_POPULATE_WRITE);
    }
}

/// madvise with a populate advice; false on a kernel that does not know it.
fn populate(start: usize, len: usize, advice: u64) -> bool {
    // SAFETY: madvise with a populate advice only faults pages of this process's own mappings
    // in, as reading or writing them would; it changes no memory.
    let rc = unsafe { sys::syscall(libc::SYS_madvise, &[start as u64, len as u64, advice]) };
    rc != -(libc::EINVAL as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn in_ranges(ranges: &Ranges, addr: usize) -> bool {
        ranges.iter().any(|(start, len)| (start..start + len).contains(&addr))
    }

    #[test]
    fn code_and_written_data_are_noted_and_nothing_else() {
        static WRITTEN_HERE: AtomicUsize = AtomicUsize::new(0);
        static NEVER_WRITTEN: [AtomicUsize; 3 * PAGE / 8] = [const { AtomicUsize::new(0) }; 3 * PAGE / 8];
        WRITTEN_HERE.store(1, Ordering::Relaxed);
        note();
        assert!(in_ranges(&READ, libc::getpid as *const () as usize), "libc's code");
        // Here the preload is linked into the test program: its own object is left out.
        assert!(!in_ranges(&READ, note as *const () as usize), "the preload's own code");
        assert!(!in_ranges(&READ, &WRITTEN_HERE as *const AtomicUsize as usize), "a writable static is not read-only");
        assert!(in_ranges(&WRITTEN, &WRITTEN_HERE as *const AtomicUsize as usize), "a static written before");
        assert!(!in_ranges(&WRITTEN, NEVER_WRITTEN.as_ptr() as usize + PAGE), "a static never written");
        fill();
        assert_eq!(WRITTEN_HERE.load(Ordering::Relaxed), 1, "filling changes no memory");
    }
}
