//! Files the program opens for writing, noted once each in the region ([`Header::written`]), so
//! that a recording can store their names and a replay that diverges can say which on-disk state
//! the recorded run changed (a pid file it left behind, a data file it wrote).
//!
//! Called from the open hooks after a successful open with a writing flag; opens for writing
//! are rare, so this is off every hot path. No allocation: the path comes from
//! `readlink("/proc/self/fd/N")` into a stack buffer. Only the token holder runs, so entries are
//! claimed one at a time; the claim is a `fetch_add` all the same, and an entry's length is
//! stored last, so the scheduler never reads a half-written path. Not noted: devices and kernel
//! files (`/dev`, `/proc`, `/sys`), pipes and sockets, deleted files, paths longer than
//! [`WRITTEN_PATH_MAX`], and anything past [`MAX_WRITTEN_FILES`] entries.
use core::sync::atomic::Ordering;

use dara_abi::{Header, MAX_WRITTEN_FILES, WRITTEN_PATH_MAX};

use crate::{region, sys};

/// Prefixes of paths that are not on-disk state a run leaves behind.
const NOT_STATE: [&[u8]; 3] = [b"/dev/", b"/proc/", b"/sys/"];
/// What readlink appends to the name of a file unlinked since it was opened.
const DELETED: &[u8] = b" (deleted)";

/// Whether `open`/`openat` flags ask for writing.
pub fn writes(flags: libc::c_int) -> bool {
    flags & (libc::O_WRONLY | libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC | libc::O_APPEND) != 0
}

/// Whether an `fopen` mode (`"w"`, `"a+"`, `"r+"`, ...) asks for writing.
///
/// # Safety
/// `mode` is null or a NUL-terminated string.
pub unsafe fn mode_writes(mode: *const libc::c_char) -> bool {
    if mode.is_null() {
        return false;
    }
    // SAFETY: NUL-terminated per the caller; at most up to the NUL is read.
    let mode = unsafe { core::ffi::CStr::from_ptr(mode) }.to_bytes();
    matches!(mode.first(), Some(b'w' | b'a')) || mode.contains(&b'+')
}

/// Notes the file open on `fd` as written by the program.
pub fn note(fd: libc::c_int) {
    let Some(header) = region::header() else { return };
    if fd < 0 || header.written_count.load(Ordering::Relaxed) as usize >= MAX_WRITTEN_FILES {
        return;
    }
    let mut link = [0u8; 24];
    let prefix = b"/proc/self/fd/";
    link[..prefix.len()].copy_from_slice(prefix);
    let digits = sys::decimal(fd as u32, &mut link[prefix.len()..]);
    link[prefix.len() + digits] = 0;
    let mut path = [0u8; WRITTEN_PATH_MAX];
    // SAFETY: `link` is NUL-terminated and `path` a live buffer of the length passed.
    let len = unsafe { sys::syscall(libc::SYS_readlink, &[link.as_ptr() as u64, path.as_mut_ptr() as u64, path.len() as u64]) };
    // A result of the buffer's full length may be a truncated path.
    if len <= 0 || len as usize >= path.len() {
        return;
    }
    let path = &path[..len as usize];
    if path.first() != Some(&b'/') || path.ends_with(DELETED) || NOT_STATE.iter().any(|p| path.starts_with(p)) {
        return;
    }
    if !noted(header, path) {
        record(header, path);
    }
}

fn noted(header: &Header, path: &[u8]) -> bool {
    let claimed = (header.written_count.load(Ordering::Relaxed) as usize).min(MAX_WRITTEN_FILES);
    header.written[..claimed].iter().any(|entry| {
        entry.len.load(Ordering::Acquire) as usize == path.len() && entry.path.iter().zip(path).all(|(a, &b)| a.load(Ordering::Relaxed) == b)
    })
}

fn record(header: &Header, path: &[u8]) {
    let i = header.written_count.fetch_add(1, Ordering::Relaxed) as usize;
    let Some(entry) = header.written.get(i) else { return };
    for (cell, &b) in entry.path.iter().zip(path) {
        cell.store(b, Ordering::Relaxed);
    }
    entry.len.store(path.len() as u32, Ordering::Release);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writing_flags_and_modes() {
        assert!(writes(libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL));
        assert!(writes(libc::O_RDWR));
        assert!(!writes(libc::O_RDONLY | libc::O_CLOEXEC));
        // SAFETY: NUL-terminated literals.
        unsafe {
            assert!(mode_writes(c"w".as_ptr()));
            assert!(mode_writes(c"ae".as_ptr()));
            assert!(mode_writes(c"r+".as_ptr()));
            assert!(!mode_writes(c"re".as_ptr()));
            assert!(!mode_writes(core::ptr::null()));
        }
    }
}
