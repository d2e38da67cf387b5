//! stdio streams whose reads and writes go through the hooked `read` and `write`, for the
//! streams a program reads a pipe or socket with: `popen`'s stream and `fdopen` of a pipe or
//! socket (openssl speed -multi reads its children's results with `fdopen` + `fgets`).
//!
//! glibc's own FILE reads inside libc (`__read`), where no symbol hook sees it, and the syscall
//! trap catches only reads of descriptor 0 (the next program's loader reads its libraries from
//! other descriptors before the SIGSYS handler exists). A blocking `fgets` on a pipe then slept in
//! the kernel holding the run token: "blocked in the kernel in read(3, ...)". A `fopencookie`
//! stream calls back into the hooked functions, so each refill of its buffer is a modelled
//! receive like a direct `read`.
//!
//! `fileno` of such a stream answers its descriptor, as for glibc's own (the cookie stream's
//! `_fileno` is set after it is made; glibc uses the field only for `fileno` and to decide the
//! buffering, which asks the stream's stat, and a cookie stream has none: fully buffered, as a
//! pipe is).
use libc::{c_char, c_int, c_void, size_t, ssize_t, FILE};

use crate::{real, region};

/// glibc's `cookie_io_functions_t` (the `libc` crate does not bind `fopencookie`).
#[repr(C)]
struct CookieFunctions {
    read: Option<extern "C" fn(*mut c_void, *mut c_char, size_t) -> ssize_t>,
    write: Option<extern "C" fn(*mut c_void, *const c_char, size_t) -> ssize_t>,
    seek: Option<extern "C" fn(*mut c_void, *mut i64, c_int) -> c_int>,
    close: Option<extern "C" fn(*mut c_void) -> c_int>,
}

extern "C" {
    fn fopencookie(cookie: *mut c_void, mode: *const c_char, functions: CookieFunctions) -> *mut FILE;
}

/// Offset of `_fileno` in glibc's `struct _IO_FILE` on x86-64 (after the flags word and twelve
/// pointers); part of glibc's ABI (`bits/types/struct_FILE.h`).
const FILENO_OFFSET: usize = 112;

/// A stream over descriptor `fd` in stdio mode `mode` ("r", "w", "r+", ...); null with errno set
/// if glibc refuses (a bad mode, no memory). Closing the stream closes `fd`.
///
/// # Safety
/// `mode` is a NUL-terminated string; `fd` is a descriptor the caller hands to the stream.
pub unsafe fn stream(fd: c_int, mode: *const c_char) -> *mut FILE {
    let functions = CookieFunctions { read: Some(cookie_read), write: Some(cookie_write), seek: None, close: Some(cookie_close) };
    // SAFETY: the cookie is the descriptor number, read back by the callbacks; `mode` per the
    // function contract.
    let stream = unsafe { fopencookie(fd as isize as *mut c_void, mode, functions) };
    if !stream.is_null() {
        // SAFETY: `stream` is a live glibc FILE, whose `_fileno` int lies at FILENO_OFFSET.
        unsafe { (stream as *mut u8).add(FILENO_OFFSET).cast::<c_int>().write(fd) };
    }
    stream
}

/// `fdopen`: a pipe or socket gets a stream over the hooked calls; any other descriptor (a file,
/// a terminal, dara's own output pipes) glibc's own stream.
#[no_mangle]
pub unsafe extern "C" fn fdopen(fd: c_int, mode: *const c_char) -> *mut FILE {
    if region::active() && !mode.is_null() && crate::fd::is_net(fd) {
        // SAFETY: the program's own descriptor and mode string, handed to the stream as fdopen
        // hands them to glibc's.
        return unsafe { stream(fd, mode) };
    }
    // SAFETY: the program's own arguments, forwarded unchanged.
    unsafe { real::fdopen(fd, mode) }
}

extern "C" fn cookie_read(cookie: *mut c_void, buf: *mut c_char, size: size_t) -> ssize_t {
    // SAFETY: stdio passes a buffer of `size` bytes; the cookie is our descriptor. `read` is
    // the hooked symbol, so the read is a modelled receive.
    unsafe { libc::read(cookie as isize as c_int, buf as *mut c_void, size) }
}

extern "C" fn cookie_write(cookie: *mut c_void, buf: *const c_char, size: size_t) -> ssize_t {
    // SAFETY: as for cookie_read.
    unsafe { libc::write(cookie as isize as c_int, buf as *const c_void, size) }
}

extern "C" fn cookie_close(cookie: *mut c_void) -> c_int {
    // SAFETY: closing our descriptor (the hooked close tells the model).
    unsafe { libc::close(cookie as isize as c_int) }
}
