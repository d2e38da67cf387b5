//! Plain-access callbacks of the ThreadSanitizer ABI: called *before* a load or store the
//! program performs itself, so they only report it ([`crate::report`]). An unaligned access is
//! keyed by its first byte's granule, like sancov's; a compound read-write (`__tsan_read_write*`,
//! emitted by newer clangs for `x++` without `-tsan-instrument-read-before-write`) is one write,
//! so the read and the write it covers cannot be separated by another thread.
//!
//! Also here: vtable-pointer accesses, function entry/exit and ignore ranges (no-ops: dara needs
//! no shadow stack), and the memory intrinsics newer clangs route through `__tsan_mem*`.
use core::ffi::c_void;

use dara_abi::access::AccessKind;

use crate::report;

macro_rules! accesses {
    ($($name:ident => ($size:expr, $kind:expr)),* $(,)?) => {
        $(
            /// ThreadSanitizer ABI: called before the program's own access at `addr`.
            #[no_mangle]
            pub extern "C" fn $name(addr: *const c_void) {
                report(addr, $size, $kind);
            }
        )*
    };
}

use AccessKind::{Read, Write};

accesses!(
    __tsan_read1 => (1, Read), __tsan_read2 => (2, Read), __tsan_read4 => (4, Read), __tsan_read8 => (8, Read), __tsan_read16 => (16, Read),
    __tsan_write1 => (1, Write), __tsan_write2 => (2, Write), __tsan_write4 => (4, Write), __tsan_write8 => (8, Write), __tsan_write16 => (16, Write),
    __tsan_unaligned_read2 => (2, Read), __tsan_unaligned_read4 => (4, Read), __tsan_unaligned_read8 => (8, Read), __tsan_unaligned_read16 => (16, Read),
    __tsan_unaligned_write2 => (2, Write), __tsan_unaligned_write4 => (4, Write), __tsan_unaligned_write8 => (8, Write), __tsan_unaligned_write16 => (16, Write),
    __tsan_volatile_read1 => (1, Read), __tsan_volatile_read2 => (2, Read), __tsan_volatile_read4 => (4, Read), __tsan_volatile_read8 => (8, Read), __tsan_volatile_read16 => (16, Read),
    __tsan_volatile_write1 => (1, Write), __tsan_volatile_write2 => (2, Write), __tsan_volatile_write4 => (4, Write), __tsan_volatile_write8 => (8, Write), __tsan_volatile_write16 => (16, Write),
    __tsan_unaligned_volatile_read2 => (2, Read), __tsan_unaligned_volatile_read4 => (4, Read), __tsan_unaligned_volatile_read8 => (8, Read), __tsan_unaligned_volatile_read16 => (16, Read),
    __tsan_unaligned_volatile_write2 => (2, Write), __tsan_unaligned_volatile_write4 => (4, Write), __tsan_unaligned_volatile_write8 => (8, Write), __tsan_unaligned_volatile_write16 => (16, Write),
    __tsan_read_write1 => (1, Write), __tsan_read_write2 => (2, Write), __tsan_read_write4 => (4, Write), __tsan_read_write8 => (8, Write), __tsan_read_write16 => (16, Write),
    __tsan_unaligned_read_write2 => (2, Write), __tsan_unaligned_read_write4 => (4, Write), __tsan_unaligned_read_write8 => (8, Write), __tsan_unaligned_read_write16 => (16, Write),
);

/// A read of `size` bytes from `addr` (its first granule is the point).
#[no_mangle]
pub extern "C" fn __tsan_read_range(addr: *const c_void, size: usize) {
    report(addr, size as u64, Read);
}

/// A write of `size` bytes to `addr`.
#[no_mangle]
pub extern "C" fn __tsan_write_range(addr: *const c_void, size: usize) {
    report(addr, size as u64, Write);
}

/// A C++ object's vtable pointer at `vptr` is about to be set (constructors, destructors).
#[no_mangle]
pub extern "C" fn __tsan_vptr_update(vptr: *const c_void, _new: *const c_void) {
    report(vptr, 8, Write);
}

/// A C++ object's vtable pointer at `vptr` is about to be read (a virtual call).
#[no_mangle]
pub extern "C" fn __tsan_vptr_read(vptr: *const c_void) {
    report(vptr, 8, Read);
}

/// Function entry (TSan's shadow stack; nothing to do).
#[no_mangle]
pub extern "C" fn __tsan_func_entry(_pc: *const c_void) {}

/// Function exit.
#[no_mangle]
pub extern "C" fn __tsan_func_exit() {}

/// Start of code TSan is told to ignore (nothing to do: dara still schedules it).
#[no_mangle]
pub extern "C" fn __tsan_ignore_thread_begin() {}

/// End of ignored code.
#[no_mangle]
pub extern "C" fn __tsan_ignore_thread_end() {}

extern "C" {
    fn memcpy(dst: *mut c_void, src: *const c_void, n: usize) -> *mut c_void;
    fn memmove(dst: *mut c_void, src: *const c_void, n: usize) -> *mut c_void;
    fn memset(dst: *mut c_void, c: i32, n: usize) -> *mut c_void;
}

/// `memcpy` as newer clangs instrument it: a read of the source, a write of the destination.
///
/// # Safety
/// As `memcpy`: valid, non-overlapping ranges of `n` bytes.
#[no_mangle]
pub unsafe extern "C" fn __tsan_memcpy(dst: *mut c_void, src: *const c_void, n: usize) -> *mut c_void {
    report(src, n as u64, Read);
    report(dst, n as u64, Write);
    // SAFETY: the caller's contract is memcpy's.
    unsafe { memcpy(dst, src, n) }
}

/// `memmove`, instrumented.
///
/// # Safety
/// As `memmove`: valid ranges of `n` bytes.
#[no_mangle]
pub unsafe extern "C" fn __tsan_memmove(dst: *mut c_void, src: *const c_void, n: usize) -> *mut c_void {
    report(src, n as u64, Read);
    report(dst, n as u64, Write);
    // SAFETY: the caller's contract is memmove's.
    unsafe { memmove(dst, src, n) }
}

/// `memset`, instrumented.
///
/// # Safety
/// As `memset`: a valid range of `n` bytes.
#[no_mangle]
pub unsafe extern "C" fn __tsan_memset(dst: *mut c_void, c: i32, n: usize) -> *mut c_void {
    report(dst, n as u64, Write);
    // SAFETY: the caller's contract is memset's.
    unsafe { memset(dst, c, n) }
}
