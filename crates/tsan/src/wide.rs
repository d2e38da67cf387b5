//! `__tsan_atomic128_*`: 16-byte atomics, which clang turns into TSan calls only when the target
//! has `cmpxchg16b` (`-mcx16`; without it they are `__atomic_*_16` libcalls into libatomic,
//! which dara does not see). Every operation is a `lock cmpxchg16b` loop, as compilers implement
//! them (a full barrier, whatever order was asked); a load is a compare-and-swap that writes back what it finds, so the memory must be
//! writable (it is, for any object the program declared atomic). Reported like the narrower ones.
use core::ffi::c_void;

use dara_abi::access::AccessKind::{AtomicRead, AtomicWrite};

use crate::atomics::MemoryOrder;
use crate::report;

/// One `lock cmpxchg16b`: the value found at `a` (`new` was stored if it equalled `old`). The
/// instruction is a full barrier, so every order the program asked for is met (and exceeded).
/// Inline assembly, not `core::arch::x86_64::cmpxchg16b`: the precompiled `core` falls back to a
/// libatomic call this library could not link.
///
/// # Safety
/// `a` is a live, 16-byte aligned, writable 16-byte atomic object; the CPU has `cmpxchg16b`
/// (the program was compiled for it, or it would not call these functions).
#[inline(always)]
unsafe fn cas(a: *mut u128, old: u128, new: u128) -> u128 {
    let (mut lo, mut hi) = (old as u64, (old >> 64) as u64);
    // SAFETY: the caller's contract; rbx (reserved by LLVM) is swapped in and restored around the
    // instruction.
    unsafe {
        core::arch::asm!(
            "xchg {new_lo}, rbx",
            "lock cmpxchg16b xmmword ptr [{a}]",
            "mov rbx, {new_lo}",
            a = in(reg) a,
            new_lo = inout(reg) new as u64 => _,
            in("rcx") (new >> 64) as u64,
            inout("rax") lo,
            inout("rdx") hi,
            options(nostack),
        );
    }
    (u128::from(hi) << 64) | u128::from(lo)
}

/// Applies `f` atomically; returns the previous value.
///
/// # Safety
/// See [`cas`].
unsafe fn update(a: *mut u128, f: impl Fn(u128) -> u128) -> u128 {
    // SAFETY: forwarded contract (a first read that stores back what it finds).
    let mut current = unsafe { cas(a, 0, 0) };
    loop {
        // SAFETY: forwarded contract.
        let seen = unsafe { cas(a, current, f(current)) };
        if seen == current {
            return current;
        }
        current = seen;
    }
}

/// ThreadSanitizer ABI: 16-byte atomic load.
///
/// # Safety
/// See [`cas`].
#[no_mangle]
pub unsafe extern "C" fn __tsan_atomic128_load(a: *const u128, _mo: MemoryOrder) -> u128 {
    report(a as *const c_void, 16, AtomicRead);
    // SAFETY: forwarded contract; storing 0 over 0 changes nothing.
    unsafe { cas(a as *mut u128, 0, 0) }
}

/// ThreadSanitizer ABI: 16-byte atomic store.
///
/// # Safety
/// See [`cas`].
#[no_mangle]
pub unsafe extern "C" fn __tsan_atomic128_store(a: *mut u128, v: u128, _mo: MemoryOrder) {
    report(a as *const c_void, 16, AtomicWrite);
    // SAFETY: forwarded contract.
    unsafe { update(a, |_| v) };
}

macro_rules! rmw128 {
    ($($name:ident => $f:expr),* $(,)?) => {
        $(
            /// ThreadSanitizer ABI: 16-byte read-modify-write; returns the previous value.
            ///
            /// # Safety
            /// See [`cas`].
            #[no_mangle]
            pub unsafe extern "C" fn $name(a: *mut u128, v: u128, _mo: MemoryOrder) -> u128 {
                report(a as *const c_void, 16, AtomicWrite);
                let f: fn(u128, u128) -> u128 = $f;
                // SAFETY: forwarded contract.
                unsafe { update(a, |old| f(old, v)) }
            }
        )*
    };
}

rmw128!(
    __tsan_atomic128_exchange => |_, v| v,
    __tsan_atomic128_fetch_add => |old, v| old.wrapping_add(v),
    __tsan_atomic128_fetch_sub => |old, v| old.wrapping_sub(v),
    __tsan_atomic128_fetch_and => |old, v| old & v,
    __tsan_atomic128_fetch_or => |old, v| old | v,
    __tsan_atomic128_fetch_xor => |old, v| old ^ v,
    __tsan_atomic128_fetch_nand => |old, v| !(old & v),
);

/// ThreadSanitizer ABI: 16-byte compare-and-swap returning the value seen.
///
/// # Safety
/// See [`cas`].
#[no_mangle]
pub unsafe extern "C" fn __tsan_atomic128_compare_exchange_val(a: *mut u128, c: u128, v: u128, _mo: MemoryOrder, _fmo: MemoryOrder) -> u128 {
    report(a as *const c_void, 16, AtomicWrite);
    // SAFETY: forwarded contract.
    unsafe { cas(a, c, v) }
}

/// ThreadSanitizer ABI: 16-byte strong compare-and-swap; on failure `*c` receives the value seen.
///
/// # Safety
/// See [`cas`]; `c` points to a writable value.
#[no_mangle]
pub unsafe extern "C" fn __tsan_atomic128_compare_exchange_strong(a: *mut u128, c: *mut u128, v: u128, _mo: MemoryOrder, _fmo: MemoryOrder) -> i32 {
    report(a as *const c_void, 16, AtomicWrite);
    // SAFETY: forwarded contract.
    unsafe {
        let seen = cas(a, *c, v);
        if seen == *c {
            1
        } else {
            *c = seen;
            0
        }
    }
}

/// ThreadSanitizer ABI: 16-byte weak compare-and-swap (never fails spuriously here).
///
/// # Safety
/// See [`cas`]; `c` points to a writable value.
#[no_mangle]
pub unsafe extern "C" fn __tsan_atomic128_compare_exchange_weak(a: *mut u128, c: *mut u128, v: u128, mo: MemoryOrder, fmo: MemoryOrder) -> i32 {
    // SAFETY: forwarded contract.
    unsafe { __tsan_atomic128_compare_exchange_strong(a, c, v, mo, fmo) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[repr(align(16))]
    struct Aligned(u128);

    #[test]
    fn sixteen_byte_operations_do_what_c11_says() {
        let mut x = Aligned(1 << 100);
        let p = &mut x.0 as *mut u128;
        // SAFETY: `p` is a live, 16-byte aligned u128 used by this thread only; x86_64 CPUs
        // running these tests have cmpxchg16b.
        unsafe {
            assert_eq!(__tsan_atomic128_load(p, 5), 1 << 100);
            assert_eq!(__tsan_atomic128_fetch_add(p, 1, 5), 1 << 100);
            __tsan_atomic128_store(p, 7, 3);
            assert_eq!(__tsan_atomic128_exchange(p, u128::MAX, 5), 7);
            let mut expected = 3;
            assert_eq!(__tsan_atomic128_compare_exchange_strong(p, &mut expected, 4, 5, 5), 0);
            assert_eq!(expected, u128::MAX);
            assert_eq!(__tsan_atomic128_compare_exchange_val(p, u128::MAX, 9, 5, 5), u128::MAX);
            assert_eq!(__tsan_atomic128_fetch_nand(p, 1, 0), 9);
            assert_eq!(*p, !1);
        }
    }
}
