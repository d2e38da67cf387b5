//! Application randomness from the process's seeded streams (see [`crate::entropy`]). Not
//! scheduling points; active in every thread of a traced process.
use libc::{c_int, c_long, c_uint, c_void, size_t, ssize_t};

use super::{set_errno, Obj};
use crate::{entropy, real, region};

/// The program's output buffer as a byte slice.
///
/// # Safety
/// `buf` must be valid for writes of `len` bytes (the contract of getrandom/getentropy).
unsafe fn out_buffer<'a>(buf: *mut c_void, len: usize) -> &'a mut [u8] {
    if len == 0 {
        return &mut [];
    }
    // SAFETY: see the function contract.
    unsafe { core::slice::from_raw_parts_mut(buf as *mut u8, len) }
}

#[no_mangle]
pub unsafe extern "C" fn getrandom(buf: *mut c_void, len: size_t, flags: c_uint) -> ssize_t {
    if !region::active() {
        // SAFETY: the program's own arguments, forwarded unchanged.
        return unsafe { real::getrandom(buf, len, flags) };
    }
    // SAFETY: the program asked for `len` bytes at `buf`.
    entropy::fill(unsafe { out_buffer(buf, len) });
    len as ssize_t
}

#[no_mangle]
pub unsafe extern "C" fn getentropy(buf: *mut c_void, len: size_t) -> c_int {
    if !region::active() {
        // SAFETY: the program's own arguments, forwarded unchanged.
        return unsafe { real::getentropy(buf, len) };
    }
    if len > 256 {
        set_errno(libc::EIO);
        return -1;
    }
    // SAFETY: the program asked for `len` bytes at `buf`.
    entropy::fill(unsafe { out_buffer(buf, len) });
    0
}

#[no_mangle]
pub unsafe extern "C" fn rand() -> c_int {
    if !region::active() {
        // SAFETY: no arguments.
        return unsafe { real::rand() };
    }
    entropy::rand()
}

#[no_mangle]
pub unsafe extern "C" fn random() -> c_long {
    if !region::active() {
        // SAFETY: no arguments.
        return unsafe { real::random() };
    }
    entropy::rand() as c_long
}

#[no_mangle]
pub unsafe extern "C" fn rand_r(seed: *mut c_uint) -> c_int {
    if !region::active() {
        // SAFETY: the program's own argument, forwarded unchanged.
        return unsafe { real::rand_r(seed) };
    }
    // SAFETY: the program's own in/out parameter.
    match unsafe { Obj::new(seed) }.get_mut() {
        Some(state) => entropy::rand_r(state),
        None => 0,
    }
}

#[no_mangle]
pub unsafe extern "C" fn srand(seed: c_uint) {
    if !region::active() {
        // SAFETY: plain integer argument.
        return unsafe { real::srand(seed) };
    }
    entropy::srand(seed);
}

#[no_mangle]
pub unsafe extern "C" fn srandom(seed: c_uint) {
    if !region::active() {
        // SAFETY: plain integer argument.
        return unsafe { real::srandom(seed) };
    }
    entropy::srand(seed);
}
