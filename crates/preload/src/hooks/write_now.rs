//! Writes that never block the token holder: a granted send or write takes what the descriptor
//! has room for *now*, and a blocking caller posts again for the rest.
//!
//! The scheduler grants a blocking write once the descriptor polls writable, which for a pipe
//! means one free page, not room for the whole write: a real blocking `write` of 64 KiB into a
//! pipe that takes 4 KiB then slept in the kernel with the run token (`git clone --no-local`:
//! upload-pack writes its pack to the pipe its parent reads). So every granted write here runs
//! non-blocking: a socket with `MSG_DONTWAIT` (the same call as `write` for a socket); a pipe,
//! FIFO or eventfd with `O_NONBLOCK` set around the call when the program's descriptor is
//! blocking. The flag belongs to the open file description, which other processes may share,
//! but only the token holder runs while it is set, so nobody else can see it.
//!
//! What the program sees stays blocking semantics: a write of at most `PIPE_BUF` bytes is still
//! all or nothing (a non-blocking pipe write of that size never splits), and a longer one, which
//! Linux never promised to write in one piece, is completed by further granted writes.
//!
//! Runs in hooks and in the SIGSYS handler: raw system calls only, no allocation.
use libc::c_int;

use crate::sys;

/// Writes at most what `fd` takes now from `len` bytes at `buf`; the raw result (`-errno`,
/// `-EAGAIN` when there is no room at all). `socket` says whether `fd` is a socket.
///
/// # Safety
/// `buf` must hold `len` readable bytes.
pub unsafe fn write(fd: c_int, socket: bool, buf: *const u8, len: usize) -> i64 {
    if socket {
        // SAFETY: the caller's buffer of `len` bytes; MSG_DONTWAIT only makes the call non-blocking.
        return unsafe { sys::syscall6(libc::SYS_sendto, [fd as u64, buf as u64, len as u64, libc::MSG_DONTWAIT as u64, 0, 0]) };
    }
    // SAFETY: the caller's buffer of `len` bytes.
    nonblocking(fd, || unsafe { sys::syscall6(libc::SYS_write, [fd as u64, buf as u64, len as u64, 0, 0, 0]) })
}

/// `writev` of the `n` buffers at `iov` as [`write`] does it: at most what `fd` takes now.
///
/// # Safety
/// `iov` must point at `n` iovecs, each naming readable memory.
pub unsafe fn writev(fd: c_int, socket: bool, iov: *const libc::iovec, n: c_int) -> i64 {
    if socket {
        // SAFETY: all-zero is a valid msghdr (no name, no control data).
        let mut msg: libc::msghdr = unsafe { core::mem::zeroed() };
        msg.msg_iov = iov.cast_mut();
        msg.msg_iovlen = n.max(0) as usize;
        // SAFETY: the caller's iovecs, in a live msghdr.
        return unsafe { sys::syscall6(libc::SYS_sendmsg, [fd as u64, &msg as *const libc::msghdr as u64, libc::MSG_DONTWAIT as u64, 0, 0, 0]) };
    }
    // SAFETY: the caller's iovecs.
    nonblocking(fd, || unsafe { sys::syscall6(libc::SYS_writev, [fd as u64, iov as u64, n as u64, 0, 0, 0]) })
}

/// Runs `call` with `O_NONBLOCK` set on `fd`'s open file description, restoring the program's
/// flags after (nothing to do when they have it already).
fn nonblocking(fd: c_int, call: impl FnOnce() -> i64) -> i64 {
    with_nonblock(fd, status_flags(fd), call)
}

/// `fd`'s file status flags (`F_GETFL`), negative on error.
pub fn status_flags(fd: c_int) -> i64 {
    // SAFETY: F_GETFL takes no pointer.
    unsafe { sys::syscall(libc::SYS_fcntl, &[fd as u64, libc::F_GETFL as u64]) }
}

/// [`nonblocking`] for a caller that read `fd`'s status `flags` already.
pub fn with_nonblock(fd: c_int, flags: i64, call: impl FnOnce() -> i64) -> i64 {
    if flags < 0 || flags as c_int & libc::O_NONBLOCK != 0 {
        return call();
    }
    // SAFETY: as above.
    unsafe { sys::syscall(libc::SYS_fcntl, &[fd as u64, libc::F_SETFL as u64, (flags as c_int | libc::O_NONBLOCK) as u64]) };
    let r = call();
    // SAFETY: as above; the program's own flags again.
    unsafe { sys::syscall(libc::SYS_fcntl, &[fd as u64, libc::F_SETFL as u64, flags as u64]) };
    r
}

/// Where the bytes after the first `done` of the `n` buffers at `iov` start: (index of the
/// buffer, offset in it). `(n, 0)` when `done` covers them all.
///
/// # Safety
/// `iov` must point at `n` iovecs.
pub unsafe fn skip(iov: *const libc::iovec, n: c_int, mut done: usize) -> (usize, usize) {
    for i in 0..n.max(0) as usize {
        // SAFETY: within the caller's `n` iovecs.
        let len = unsafe { (*iov.add(i)).iov_len };
        if done < len {
            return (i, done);
        }
        done -= len;
    }
    (n.max(0) as usize, 0)
}
