//! `popen` and `pclose` as a traced fork + exec of `/bin/sh -c`, like `system` (see `spawn`):
//! glibc's own popen uses its internal spawn, which the syscall trap cannot follow.
//!
//! The stream handed back is a [`cookie`](super::cookie) stream whose reads and writes go through
//! the hooked `read` and `write`, so stdio on the pipe is modelled like any pipe between processes
//! (glibc's own FILE would read inside libc, where no hook sees it). Which stream belongs to
//! which child is kept in a fixed table of [`MAX_STREAMS`] entries (no allocation); a program
//! with more open popen streams than that gets EMFILE.
use core::sync::atomic::{AtomicI32, AtomicUsize, Ordering};

use libc::{c_char, c_int, pid_t, FILE};

use crate::gate::Gated;
use crate::{process, real};

const MAX_STREAMS: usize = 64;

/// (stream, child pid, our end of the pipe) of each open popen stream; stream 0 = free entry.
static STREAMS: [AtomicUsize; MAX_STREAMS] = [const { AtomicUsize::new(0) }; MAX_STREAMS];
static PIDS: [AtomicI32; MAX_STREAMS] = [const { AtomicI32::new(0) }; MAX_STREAMS];
static FDS: [AtomicI32; MAX_STREAMS] = [const { AtomicI32::new(-1) }; MAX_STREAMS];

#[no_mangle]
pub unsafe extern "C" fn popen(command: *const c_char, mode: *const c_char) -> *mut FILE {
    if Gated::enter().is_none() || mode.is_null() || command.is_null() {
        // SAFETY: the program's own arguments, forwarded unchanged.
        return unsafe { real::popen(command, mode) };
    }
    // SAFETY: `mode` is a NUL-terminated string (popen's contract).
    let mode_bytes = unsafe { core::ffi::CStr::from_ptr(mode) }.to_bytes();
    let reading = match mode_bytes.first() {
        Some(b'r') => true,
        Some(b'w') => false,
        _ => {
            super::set_errno(libc::EINVAL);
            return core::ptr::null_mut();
        }
    };
    let Some(entry) = STREAMS.iter().position(|s| s.load(Ordering::Relaxed) == 0) else {
        super::set_errno(libc::EMFILE);
        return core::ptr::null_mut();
    };
    let mut ends = [0 as c_int; 2];
    // SAFETY: pipe2 fills a two-element array (hooked: the pipe becomes a modelled descriptor).
    if unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return core::ptr::null_mut();
    }
    let (ours, theirs, child_fd) = if reading { (ends[0], ends[1], 1) } else { (ends[1], ends[0], 0) };
    // The gate is released before the child execs (see `spawn`).
    let child = match Gated::enter() {
        Some(gate) => process::fork(&gate),
        // SAFETY: fork has no preconditions (not reached: the gate was checked above).
        None => unsafe { real::fork() },
    };
    if child == 0 {
        // SAFETY: setting up the child's stdin or stdout, then running the shell; streams of
        // earlier popen calls are not the child's business (POSIX), so their fds are closed.
        unsafe {
            for fd in &FDS {
                let fd = fd.load(Ordering::Relaxed);
                if fd >= 0 {
                    libc::close(fd);
                }
            }
            if theirs != child_fd {
                libc::dup2(theirs, child_fd);
            } else {
                libc::fcntl(theirs, libc::F_SETFD, 0);
            }
            libc::execl(c"/bin/sh".as_ptr(), c"sh".as_ptr(), c"-c".as_ptr(), command, core::ptr::null::<c_char>());
            libc::_exit(127);
        }
    }
    // SAFETY: closing the child's end in the parent.
    unsafe { libc::close(theirs) };
    if child < 0 {
        // SAFETY: closing our end too; errno is fork's.
        unsafe { libc::close(ours) };
        return core::ptr::null_mut();
    }
    let cookie_mode = if reading { c"r" } else { c"w" };
    // SAFETY: our end of the pipe, handed to the stream; a static mode string.
    let stream = unsafe { super::cookie::stream(ours, cookie_mode.as_ptr()) };
    if stream.is_null() {
        // SAFETY: our own descriptor.
        unsafe { libc::close(ours) };
        return stream;
    }
    STREAMS[entry].store(stream as usize, Ordering::Relaxed);
    PIDS[entry].store(child, Ordering::Relaxed);
    FDS[entry].store(ours, Ordering::Relaxed);
    stream
}

#[no_mangle]
pub unsafe extern "C" fn pclose(stream: *mut FILE) -> c_int {
    let Some(entry) = STREAMS.iter().position(|s| s.load(Ordering::Relaxed) == stream as usize && !stream.is_null()) else {
        // SAFETY: a stream glibc's popen made (or an error the real pclose reports).
        return unsafe { real::pclose(stream) };
    };
    let pid: pid_t = PIDS[entry].load(Ordering::Relaxed);
    STREAMS[entry].store(0, Ordering::Relaxed);
    FDS[entry].store(-1, Ordering::Relaxed);
    // SAFETY: our cookie stream; closing it closes the pipe (cookie_close).
    unsafe { libc::fclose(stream) };
    let mut status: c_int = 0;
    loop {
        // SAFETY: waiting for the child popen started (trapped and modelled).
        let got = unsafe { libc::waitpid(pid, &mut status, 0) };
        // SAFETY: this thread's errno.
        if got >= 0 || unsafe { *libc::__errno_location() } != libc::EINTR {
            return if got < 0 { -1 } else { status };
        }
    }
}
