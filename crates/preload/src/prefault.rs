//! A fork server's copy breaks the copy-on-write sharing of the pages it will write before it
//! runs, on the CPU it was born on.
//!
//! `fork` marks every private page the server had written copy-on-write, so a copy's first write
//! to each of them (glibc's and the dynamic loader's data, the main thread's TLS, the preload's
//! own state) is a page fault that copies the page: about 15 faults for a small C program, each
//! about 3 µs of the execution's CPU. The server notes once which pages it wrote ([`note`]: the
//! writable loadable segments of every object, from the dynamic loader's list, and the main
//! thread's TLS, narrowed to the pages `/proc/self/pagemap` shows present and private), which a
//! copy is most likely to write again, and every copy copies them ([`fill`],
//! `MADV_POPULATE_WRITE`) before its start barrier, while it is still on the CPU it was born on:
//! the same work, off the CPU executions run on. Nothing the program can observe changes: the
//! contents are the same, only when the kernel copies them.
//!
//! Not filled: pages the server never wrote (filling them would copy pages the program may never
//! write), and the code. Filling the loaded objects' code for reading (`MADV_POPULATE_READ`) took
//! about 30 faults off the execution's CPU but cost the CPU that launches copies twice as much
//! (filling every page, and taking every entry down at the copy's end, where fault-around maps
//! only the 64 KiB around each page touched): measured slower on a two-CPU machine.
use core::sync::atomic::{AtomicUsize, Ordering};

use crate::sys;

/// `madvise` advice that faults a range's pages in for writing, breaking copy-on-write sharing
/// (Linux 5.14).
const MADV_POPULATE_WRITE: u64 = 23;

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
    if base == vdso && vdso != 0 {
        return 0;
    }
    // What the loader made read-only after relocating (its end rounded down, as it does).
    let relro_end = headers.iter().find(|h| h.p_type == libc::PT_GNU_RELRO).map_or(0, |h| span(h).1 & !(PAGE - 1));
    for h in headers.iter().filter(|h| h.p_type == libc::PT_LOAD && h.p_memsz > 0 && h.p_flags & libc::PF_W != 0) {
        let (start, end) = span(h);
        if start.max(relro_end) < end && !WRITABLE.add(start.max(relro_end), end) {
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

/// Copies the pages the server wrote, for writing. Call in a copy before it runs any of the
/// program's code; raw system calls only. A kernel without the advice (before 5.14), or a range
/// the kernel refuses, is skipped: the copy then faults as it would have.
pub fn fill() {
    for (start, len) in WRITTEN.iter() {
        // SAFETY: madvise with a populate advice only faults pages of this process's own
        // mappings in, as writing them would; it changes no memory.
        let rc = unsafe { sys::syscall(libc::SYS_madvise, &[start as u64, len as u64, MADV_POPULATE_WRITE]) };
        if rc == -(libc::EINVAL as i64) {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn in_ranges(ranges: &Ranges, addr: usize) -> bool {
        ranges.iter().any(|(start, len)| (start..start + len).contains(&addr))
    }

    #[test]
    fn pages_written_are_noted_and_nothing_else() {
        static WRITTEN_HERE: AtomicUsize = AtomicUsize::new(0);
        static NEVER_WRITTEN: [AtomicUsize; 3 * PAGE / 8] = [const { AtomicUsize::new(0) }; 3 * PAGE / 8];
        WRITTEN_HERE.store(1, Ordering::Relaxed);
        note();
        assert!(in_ranges(&WRITTEN, &WRITTEN_HERE as *const AtomicUsize as usize), "a static written before");
        assert!(!in_ranges(&WRITTEN, libc::getpid as *const () as usize), "code");
        assert!(!in_ranges(&WRITTEN, NEVER_WRITTEN.as_ptr() as usize + PAGE), "a static never written");
        fill();
        assert_eq!(WRITTEN_HERE.load(Ordering::Relaxed), 1, "filling changes no memory");
    }
}
