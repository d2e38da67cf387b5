//! Opening `/dev/urandom` or `/dev/random` gives a file of bytes from the process's seeded entropy
//! stream (see [`crate::entropy`]) instead of the kernel's. Symbol hooks, not the syscall trap:
//! `openat` cannot be trapped, because the seccomp filter outlives `execve` and the next
//! program's dynamic loader opens its libraries before the preload is back. glibc's own code does
//! not read these devices (it uses `getrandom`, which is trapped).
//!
//! A blocking open of a FIFO waits in the model, not in the kernel (see [`super::fifo`]).
//!
//! Every other open that asks for writing is noted in the region ([`crate::written`]): a replay
//! that diverges names the files the recorded run wrote.
//!
//! `open` and `openat` are variadic in C; on x86-64 the optional `mode` travels in the register
//! a fixed third (fourth) parameter would use, so declaring it fixed and passing it on unchanged
//! is exact.
use libc::{c_char, c_int, c_uint, FILE};

use super::{fifo, set_errno};
use crate::{entropy, fd, real, region, written};

/// Passes on the result of a real open, noting the file when it was opened for writing.
fn opened(fd: c_int, flags: c_int) -> c_int {
    if fd >= 0 && written::writes(flags) {
        written::note(fd);
    }
    fd
}

/// A stream's descriptor is new: nothing known about its number holds (see [`crate::fd`]).
///
/// # Safety
/// `file` is null or a live stream.
unsafe fn new_stream(file: *mut FILE) -> *mut FILE {
    if !file.is_null() {
        // SAFETY: a live stream.
        fd::opened(unsafe { libc::fileno(file) }, fd::Kind::Unknown);
    }
    file
}

/// The fd of a fresh random-device file if `path` names one and dara is active, else `None`.
///
/// # Safety
/// `path` is null or a NUL-terminated string (the contract of open/fopen).
unsafe fn random_device(path: *const c_char, cloexec: bool) -> Option<c_int> {
    // SAFETY: forwarded from the caller.
    if !region::active() || !unsafe { entropy::is_random_device(path as *const u8) } {
        return None;
    }
    Some(match entropy::urandom_file(cloexec) {
        fd if fd >= 0 => fd as c_int,
        err => {
            set_errno(-err as c_int);
            -1
        }
    })
}

/// An open of `path` (relative to `dir`) with `flags`: a random device's seeded file, a blocking
/// FIFO open made a wait of the model ([`fifo::open`]), else `real_open`'s result (noted when it
/// opened for writing). `real_open` opens with the flags it is given.
///
/// # Safety
/// `path` is null or a NUL-terminated string (the contract of open).
unsafe fn open_with(dir: c_int, path: *const c_char, flags: c_int, mut real_open: impl FnMut(c_int) -> c_int) -> c_int {
    // SAFETY: forwarded from the caller.
    let fd = match unsafe { random_device(path, flags & libc::O_CLOEXEC != 0) } {
        Some(fd) => fd,
        // SAFETY: forwarded from the caller.
        None => opened(unsafe { fifo::open(dir, path, flags, &mut real_open) }.unwrap_or_else(|| real_open(flags)), flags),
    };
    // A new number: nothing known about its previous holder holds (see `crate::fd`).
    fd::opened(fd, fd::Kind::Unknown);
    fd
}

#[no_mangle]
pub unsafe extern "C" fn open(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    // SAFETY: the program's own arguments.
    unsafe { open_with(libc::AT_FDCWD, path, flags, |f| real::open(path, f, mode)) }
}

#[no_mangle]
pub unsafe extern "C" fn open64(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    // SAFETY: the program's own arguments.
    unsafe { open_with(libc::AT_FDCWD, path, flags, |f| real::open64(path, f, mode)) }
}

#[no_mangle]
pub unsafe extern "C" fn openat(dir: c_int, path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    // SAFETY: the program's own arguments (the device paths are absolute, so `dir` is moot).
    unsafe { open_with(dir, path, flags, |f| real::openat(dir, path, f, mode)) }
}

#[no_mangle]
pub unsafe extern "C" fn openat64(dir: c_int, path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    // SAFETY: the program's own arguments.
    unsafe { open_with(dir, path, flags, |f| real::openat64(dir, path, f, mode)) }
}

// The variants `_FORTIFY_SOURCE` compiles an `open` without a mode into (perl's and python's
// opens of /dev/urandom for their hash seeds go through `__open64_2`).

#[no_mangle]
pub unsafe extern "C" fn __open_2(path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: the program's own arguments.
    unsafe { open_with(libc::AT_FDCWD, path, flags, |f| real::__open_2(path, f)) }
}

#[no_mangle]
pub unsafe extern "C" fn __open64_2(path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: the program's own arguments.
    unsafe { open_with(libc::AT_FDCWD, path, flags, |f| real::__open64_2(path, f)) }
}

#[no_mangle]
pub unsafe extern "C" fn __openat_2(dir: c_int, path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: the program's own arguments.
    unsafe { open_with(dir, path, flags, |f| real::__openat_2(dir, path, f)) }
}

#[no_mangle]
pub unsafe extern "C" fn __openat64_2(dir: c_int, path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: the program's own arguments.
    unsafe { open_with(dir, path, flags, |f| real::__openat64_2(dir, path, f)) }
}

/// `fopen` of a random device: the seeded file wrapped in a stdio stream.
///
/// # Safety
/// The contract of fopen.
unsafe fn fopen_random(path: *const c_char, mode: *const c_char) -> Option<*mut FILE> {
    // SAFETY: the program's own path.
    let fd = unsafe { random_device(path, false) }?;
    if fd < 0 {
        return Some(core::ptr::null_mut());
    }
    // SAFETY: `fd` is the file just created and `mode` the program's own mode string.
    Some(unsafe { real::fdopen(fd, mode) })
}

/// Passes on the result of a real fopen, noting the file when `mode` asks for writing.
///
/// # Safety
/// `file` is null or a stream fopen returned; `mode` the program's mode string.
unsafe fn fopened(file: *mut FILE, mode: *const c_char) -> *mut FILE {
    // SAFETY: per the caller.
    if !file.is_null() && region::active() && unsafe { written::mode_writes(mode) } {
        // SAFETY: `file` is a live stream.
        written::note(unsafe { libc::fileno(file) });
    }
    file
}

#[no_mangle]
pub unsafe extern "C" fn fopen(path: *const c_char, mode: *const c_char) -> *mut FILE {
    // SAFETY: the program's own arguments.
    unsafe { new_stream(fopen_random(path, mode).or_else(|| fifo::fopen(path, mode)).unwrap_or_else(|| fopened(real::fopen(path, mode), mode))) }
}

#[no_mangle]
pub unsafe extern "C" fn fopen64(path: *const c_char, mode: *const c_char) -> *mut FILE {
    // SAFETY: the program's own arguments.
    unsafe { new_stream(fopen_random(path, mode).or_else(|| fifo::fopen(path, mode)).unwrap_or_else(|| fopened(real::fopen64(path, mode), mode))) }
}
