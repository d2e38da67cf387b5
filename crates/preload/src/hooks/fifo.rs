//! A blocking `open` of a FIFO, which Linux makes wait for the other side: `O_RDONLY` until some
//! process opens it for writing, `O_WRONLY` until one opens it for reading (`mkfifo f; cat f &
//! echo hi > f`). Done for real, that wait would put the token holder to sleep in the kernel and
//! stop the whole system; here it is a wait of the model (`Op::FifoOpen`), enabled once the
//! scheduler sees a traced process holding the FIFO open for the other direction (see the
//! scheduler's `fifo`), and the open then completes without blocking:
//!
//! * a reader opens its end with `O_NONBLOCK` first (always possible), so while it waits it counts
//!   as a reader, as a reader asleep in the kernel does; after the grant it clears `O_NONBLOCK`;
//! * a writer posts first and opens with `O_NONBLOCK` after the grant (which succeeds now that a
//!   reader is there; `ENXIO`, a reader that left meanwhile, waits again), then clears it.
//!
//! Either way the program gets a descriptor with the flags it asked for. Opens with `O_NONBLOCK`,
//! `O_RDWR` (never waits on Linux) or `O_PATH`, and opens of anything but a FIFO, are left alone.
//! A caught signal ends the wait like the kernel's: restarted when every handler asked for
//! `SA_RESTART`, else `EINTR`.
use dara_abi::{net_flags, NetFlags, Request};
use libc::{c_char, c_int};

use super::{set_errno, sigwait};
use crate::real::errno;
use crate::gate::Gated;
use crate::{real, sys};

/// The (device, inode) of `path` (relative to `dir`) if it names a FIFO that may make an open
/// wait. One of the pipes dara drains (`/dev/stdout`, `/dev/fd/$DARA_SDK_FD`: a pipe reopened
/// through /proc) never does: dara holds its reading end.
///
/// # Safety
/// `path` is a NUL-terminated string (checked non-null by the caller).
unsafe fn fifo_identity(dir: c_int, path: *const c_char, nofollow: bool) -> Option<(u64, u64)> {
    // SAFETY: an all-zero stat is a valid out-buffer.
    let mut st: libc::stat = unsafe { core::mem::zeroed() };
    let at = if nofollow { libc::AT_SYMLINK_NOFOLLOW } else { 0 };
    // SAFETY: newfstatat reads the caller's path and writes at most one stat into `st`.
    let rc = unsafe { sys::syscall(libc::SYS_newfstatat, &[dir as i64 as u64, path as u64, &mut st as *mut libc::stat as u64, at as u64]) };
    (rc == 0 && st.st_mode & libc::S_IFMT == libc::S_IFIFO && !crate::fd::kind::is_output_pipe(st.st_ino)).then_some((st.st_dev, st.st_ino))
}

/// Clears `O_NONBLOCK` on a FIFO end the preload opened non-blocking for a blocking caller.
fn make_blocking(fd: c_int) {
    // SAFETY: F_GETFL and F_SETFL take integers.
    unsafe {
        let fl = sys::syscall(libc::SYS_fcntl, &[fd as u64, libc::F_GETFL as u64]);
        if fl >= 0 {
            sys::syscall(libc::SYS_fcntl, &[fd as u64, libc::F_SETFL as u64, (fl as u64) & !(libc::O_NONBLOCK as u64)]);
        }
    }
}

/// A blocking open of a FIFO, made a wait of the model; `None` when this open is not one (the
/// caller opens as usual). `real_open` performs the real open with the flags it is given.
///
/// # Safety
/// `path` is null or a NUL-terminated string (the contract of open).
pub unsafe fn open(dir: c_int, path: *const c_char, flags: c_int, real_open: &mut dyn FnMut(c_int) -> c_int) -> Option<c_int> {
    let access = flags & libc::O_ACCMODE;
    if path.is_null() || flags & (libc::O_NONBLOCK | libc::O_PATH) != 0 || !(access == libc::O_RDONLY || access == libc::O_WRONLY) {
        return None;
    }
    let gate = Gated::enter()?;
    // SAFETY: a non-null path of the program's, NUL-terminated by open's contract.
    let (device, inode) = unsafe { fifo_identity(dir, path, flags & libc::O_NOFOLLOW != 0) }?;
    let reader = access == libc::O_RDONLY;
    let mut fd = -1;
    if reader {
        fd = real_open(flags | libc::O_NONBLOCK);
        if fd < 0 {
            return Some(fd);
        }
    }
    loop {
        let role = if reader { net_flags::FIFO_READER } else { 0 };
        let g = gate.post(Request::FifoOpen { reader: reader.then_some(fd), flags: NetFlags(role | sigwait::interruptible()), device, inode });
        if g.result == sigwait::INTERRUPTED {
            if sigwait::run_handlers(&gate, true) {
                continue;
            }
            if fd >= 0 {
                // SAFETY: the reader's end this call opened; the program never saw it.
                unsafe { real::close(fd) };
            }
            set_errno(libc::EINTR);
            return Some(-1);
        }
        if !reader {
            fd = real_open(flags | libc::O_NONBLOCK);
            if fd < 0 && errno() == libc::ENXIO {
                continue; // the reader left before this thread ran: wait again
            }
            if fd < 0 {
                return Some(fd);
            }
        }
        make_blocking(fd);
        return Some(fd);
    }
}

/// The `open` flags of an `fopen` mode string, `None` for one that reads and writes (`+`), which
/// never waits.
fn fopen_flags(mode: &[u8]) -> Option<c_int> {
    let mut flags = match mode.first()? {
        b'r' => libc::O_RDONLY,
        b'w' => libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC,
        b'a' => libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND,
        _ => return None,
    };
    for &c in &mode[1..] {
        match c {
            b'+' => return None,
            b'e' => flags |= libc::O_CLOEXEC,
            b'x' => flags |= libc::O_EXCL,
            b',' => break,
            _ => {}
        }
    }
    Some(flags)
}

/// `fopen` of a FIFO: the blocking open above, wrapped in a stream; `None` when this fopen is not
/// one. glibc's `fopen` opens inside libc, where the `open` hooks never see it.
///
/// # Safety
/// The contract of fopen: `path` and `mode` are null or NUL-terminated strings.
pub unsafe fn fopen(path: *const c_char, mode: *const c_char) -> Option<*mut libc::FILE> {
    if mode.is_null() {
        return None;
    }
    // SAFETY: a NUL-terminated mode string (fopen's contract).
    let flags = fopen_flags(unsafe { core::ffi::CStr::from_ptr(mode) }.to_bytes())?;
    // SAFETY: forwarded from the caller; the real open gets the program's path.
    let fd = unsafe { open(libc::AT_FDCWD, path, flags, &mut |f| real::open(path, f, 0o666)) }?;
    if fd < 0 {
        return Some(core::ptr::null_mut());
    }
    // SAFETY: `fd` was just opened and `mode` is the program's own mode string.
    let file = unsafe { real::fdopen(fd, mode) };
    if file.is_null() {
        let e = errno();
        // SAFETY: the descriptor this call opened; no stream owns it.
        unsafe { real::close(fd) };
        set_errno(e);
    }
    Some(file)
}

#[cfg(test)]
mod tests {
    use super::fopen_flags;

    #[test]
    fn fopen_modes_map_to_open_flags() {
        assert_eq!(fopen_flags(b"r"), Some(libc::O_RDONLY));
        assert_eq!(fopen_flags(b"we"), Some(libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC));
        assert_eq!(fopen_flags(b"ab"), Some(libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND));
        assert_eq!(fopen_flags(b"r+"), None);
        assert_eq!(fopen_flags(b""), None);
    }
}
