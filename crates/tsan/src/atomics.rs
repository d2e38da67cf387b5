//! The atomic operations of the ThreadSanitizer ABI (`__tsan_atomic{8,16,32,64}_*` and the
//! fences; signatures as in compiler-rt's `tsan_interface_atomic.h`), performed on Rust's
//! atomics with the memory order the program asked for. Each first reports itself
//! ([`crate::report`]): a load as an atomic read, everything else (store, exchange,
//! read-modify-write, compare-and-swap, whether it succeeds or not) as an atomic write, so under
//! `--preempt-on memory` another thread can run between any two atomic operations on watched
//! memory. Fences are not reported: they have no address, and under dara one thread runs at a
//! time, so the execution is sequentially consistent whatever the fences (weak-memory
//! reorderings are not explored).
//!
//! Orders arrive as C11 `memory_order` values (0 relaxed, 1 consume, 2 acquire, 3 release,
//! 4 acq_rel, 5 seq_cst). One the operation cannot take (a release load) is weakened to the
//! strongest it can, never to a panic: the compiler does not emit those, and a panic could not
//! unwind out of these callbacks anyway.
use core::ffi::c_void;
use core::sync::atomic::{self, AtomicU16, AtomicU32, AtomicU64, AtomicU8, Ordering};

use dara_abi::access::AccessKind::{AtomicRead, AtomicWrite};

use crate::report;

/// A C11 `memory_order`.
pub type MemoryOrder = i32;

/// The order of a read-modify-write.
pub fn rmw_order(mo: MemoryOrder) -> Ordering {
    match mo {
        0 => Ordering::Relaxed,
        1 | 2 => Ordering::Acquire,
        3 => Ordering::Release,
        4 => Ordering::AcqRel,
        _ => Ordering::SeqCst,
    }
}

/// The order of a load (also a failed compare-and-swap's): no release part.
pub fn load_order(mo: MemoryOrder) -> Ordering {
    match rmw_order(mo) {
        Ordering::Release => Ordering::Relaxed,
        Ordering::AcqRel => Ordering::Acquire,
        other => other,
    }
}

/// The order of a store: no acquire part.
pub fn store_order(mo: MemoryOrder) -> Ordering {
    match rmw_order(mo) {
        Ordering::Acquire => Ordering::Relaxed,
        Ordering::AcqRel => Ordering::Release,
        other => other,
    }
}

/// Defines the operations of one width: `$bits`-bit values `$t` on `$atomic`.
macro_rules! width {
    ($t:ty, $atomic:ty, $bytes:expr,
     $load:ident, $store:ident, $exchange:ident,
     $add:ident, $sub:ident, $and:ident, $or:ident, $xor:ident, $nand:ident,
     $strong:ident, $weak:ident, $val:ident) => {
        /// The atomic at `a`.
        ///
        /// # Safety
        /// `a` is the address of a live, naturally aligned atomic object of this width, as the
        /// compiler passes to every `__tsan_atomic*` callback.
        #[inline(always)]
        unsafe fn cell<'a>(a: *const $t) -> &'a $atomic {
            // SAFETY: the caller's contract; the atomic type has the layout of the integer.
            unsafe { &*(a as *const $atomic) }
        }

        /// ThreadSanitizer ABI: atomic load.
        ///
        /// # Safety
        /// See `cell`.
        #[no_mangle]
        pub unsafe extern "C" fn $load(a: *const $t, mo: MemoryOrder) -> $t {
            report(a as *const c_void, $bytes, AtomicRead);
            // SAFETY: forwarded contract.
            unsafe { cell(a) }.load(load_order(mo))
        }

        /// ThreadSanitizer ABI: atomic store.
        ///
        /// # Safety
        /// See `cell`.
        #[no_mangle]
        pub unsafe extern "C" fn $store(a: *mut $t, v: $t, mo: MemoryOrder) {
            report(a as *const c_void, $bytes, AtomicWrite);
            // SAFETY: forwarded contract.
            unsafe { cell(a) }.store(v, store_order(mo))
        }

        width!(@rmw $t, $bytes, $exchange, swap);
        width!(@rmw $t, $bytes, $add, fetch_add);
        width!(@rmw $t, $bytes, $sub, fetch_sub);
        width!(@rmw $t, $bytes, $and, fetch_and);
        width!(@rmw $t, $bytes, $or, fetch_or);
        width!(@rmw $t, $bytes, $xor, fetch_xor);
        width!(@rmw $t, $bytes, $nand, fetch_nand);

        /// ThreadSanitizer ABI: strong compare-and-swap; on failure `*c` receives the current
        /// value. Returns 1 on success.
        ///
        /// # Safety
        /// See `cell`; `c` points to a writable value.
        #[no_mangle]
        pub unsafe extern "C" fn $strong(a: *mut $t, c: *mut $t, v: $t, mo: MemoryOrder, fmo: MemoryOrder) -> i32 {
            report(a as *const c_void, $bytes, AtomicWrite);
            // SAFETY: forwarded contract.
            let (cell, expected) = unsafe { (cell(a), &mut *c) };
            settle(cell.compare_exchange(*expected, v, rmw_order(mo), load_order(fmo)), expected)
        }

        /// ThreadSanitizer ABI: weak compare-and-swap (may fail spuriously, as the hardware's).
        ///
        /// # Safety
        /// See `cell`; `c` points to a writable value.
        #[no_mangle]
        pub unsafe extern "C" fn $weak(a: *mut $t, c: *mut $t, v: $t, mo: MemoryOrder, fmo: MemoryOrder) -> i32 {
            report(a as *const c_void, $bytes, AtomicWrite);
            // SAFETY: forwarded contract.
            let (cell, expected) = unsafe { (cell(a), &mut *c) };
            settle(cell.compare_exchange_weak(*expected, v, rmw_order(mo), load_order(fmo)), expected)
        }

        /// ThreadSanitizer ABI: compare-and-swap returning the value seen (what clang emits for
        /// `cmpxchg`).
        ///
        /// # Safety
        /// See `cell`.
        #[no_mangle]
        pub unsafe extern "C" fn $val(a: *mut $t, c: $t, v: $t, mo: MemoryOrder, fmo: MemoryOrder) -> $t {
            report(a as *const c_void, $bytes, AtomicWrite);
            // SAFETY: forwarded contract.
            match unsafe { cell(a) }.compare_exchange(c, v, rmw_order(mo), load_order(fmo)) {
                Ok(old) | Err(old) => old,
            }
        }
    };
    (@rmw $t:ty, $bytes:expr, $name:ident, $op:ident) => {
        /// ThreadSanitizer ABI: atomic read-modify-write; returns the previous value.
        ///
        /// # Safety
        /// See `cell`.
        #[no_mangle]
        pub unsafe extern "C" fn $name(a: *mut $t, v: $t, mo: MemoryOrder) -> $t {
            report(a as *const c_void, $bytes, AtomicWrite);
            // SAFETY: forwarded contract.
            unsafe { cell(a) }.$op(v, rmw_order(mo))
        }
    };
}

/// 8-bit operations.
pub mod a8 {
    use super::*;
    width!(u8, AtomicU8, 1, __tsan_atomic8_load, __tsan_atomic8_store, __tsan_atomic8_exchange,
        __tsan_atomic8_fetch_add, __tsan_atomic8_fetch_sub, __tsan_atomic8_fetch_and, __tsan_atomic8_fetch_or,
        __tsan_atomic8_fetch_xor, __tsan_atomic8_fetch_nand,
        __tsan_atomic8_compare_exchange_strong, __tsan_atomic8_compare_exchange_weak, __tsan_atomic8_compare_exchange_val);
}

/// 16-bit operations.
pub mod a16 {
    use super::*;
    width!(u16, AtomicU16, 2, __tsan_atomic16_load, __tsan_atomic16_store, __tsan_atomic16_exchange,
        __tsan_atomic16_fetch_add, __tsan_atomic16_fetch_sub, __tsan_atomic16_fetch_and, __tsan_atomic16_fetch_or,
        __tsan_atomic16_fetch_xor, __tsan_atomic16_fetch_nand,
        __tsan_atomic16_compare_exchange_strong, __tsan_atomic16_compare_exchange_weak, __tsan_atomic16_compare_exchange_val);
}

/// 32-bit operations.
pub mod a32 {
    use super::*;
    width!(u32, AtomicU32, 4, __tsan_atomic32_load, __tsan_atomic32_store, __tsan_atomic32_exchange,
        __tsan_atomic32_fetch_add, __tsan_atomic32_fetch_sub, __tsan_atomic32_fetch_and, __tsan_atomic32_fetch_or,
        __tsan_atomic32_fetch_xor, __tsan_atomic32_fetch_nand,
        __tsan_atomic32_compare_exchange_strong, __tsan_atomic32_compare_exchange_weak, __tsan_atomic32_compare_exchange_val);
}

/// 64-bit operations.
pub mod a64 {
    use super::*;
    width!(u64, AtomicU64, 8, __tsan_atomic64_load, __tsan_atomic64_store, __tsan_atomic64_exchange,
        __tsan_atomic64_fetch_add, __tsan_atomic64_fetch_sub, __tsan_atomic64_fetch_and, __tsan_atomic64_fetch_or,
        __tsan_atomic64_fetch_xor, __tsan_atomic64_fetch_nand,
        __tsan_atomic64_compare_exchange_strong, __tsan_atomic64_compare_exchange_weak, __tsan_atomic64_compare_exchange_val);
}

/// ThreadSanitizer ABI: `atomic_thread_fence` (performed; not a scheduling point).
#[no_mangle]
pub extern "C" fn __tsan_atomic_thread_fence(mo: MemoryOrder) {
    if mo != 0 {
        atomic::fence(rmw_order(mo));
    }
}

/// ThreadSanitizer ABI: `atomic_signal_fence` (a compiler barrier).
#[no_mangle]
pub extern "C" fn __tsan_atomic_signal_fence(mo: MemoryOrder) {
    if mo != 0 {
        atomic::compiler_fence(rmw_order(mo));
    }
}

/// A compare-and-swap's answer in the ThreadSanitizer ABI: 1 on success; on failure the value
/// seen goes to `*expected` and 0 is returned.
fn settle<T>(result: Result<T, T>, expected: &mut T) -> i32 {
    match result {
        Ok(_) => 1,
        Err(current) => {
            *expected = current;
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::a32::*;
    use super::a8::*;
    use super::*;

    #[test]
    fn orders_never_ask_for_what_an_operation_cannot_do() {
        for mo in 0..=5 {
            assert_ne!(load_order(mo), Ordering::Release);
            assert_ne!(load_order(mo), Ordering::AcqRel);
            assert_ne!(store_order(mo), Ordering::Acquire);
            assert_ne!(store_order(mo), Ordering::AcqRel);
        }
        assert_eq!(rmw_order(4), Ordering::AcqRel);
        assert_eq!(load_order(1), Ordering::Acquire, "consume is acquire");
        assert_eq!(rmw_order(99), Ordering::SeqCst, "an unknown order is the strongest");
    }

    #[test]
    fn every_operation_does_what_c11_says() {
        let mut x: u32 = 5;
        let p = &mut x as *mut u32;
        // SAFETY: `p` is a live, aligned u32 used by this thread only.
        unsafe {
            assert_eq!(__tsan_atomic32_load(p, 5), 5);
            __tsan_atomic32_store(p, 7, 3);
            assert_eq!(__tsan_atomic32_exchange(p, 9, 4), 7);
            assert_eq!(__tsan_atomic32_fetch_add(p, 3, 0), 9);
            assert_eq!(__tsan_atomic32_fetch_sub(p, 2, 5), 12);
            assert_eq!(__tsan_atomic32_fetch_and(p, 0b1100, 5), 10);
            assert_eq!(__tsan_atomic32_fetch_or(p, 1, 5), 8);
            assert_eq!(__tsan_atomic32_fetch_xor(p, 0xff, 5), 9);
            assert_eq!(__tsan_atomic32_fetch_nand(p, 0xf0, 5), 0xf6);
            assert_eq!(*p, !(0xf6 & 0xf0));
            __tsan_atomic32_store(p, 1, 5);
            let mut expected = 2;
            assert_eq!(__tsan_atomic32_compare_exchange_strong(p, &mut expected, 3, 5, 5), 0);
            assert_eq!(expected, 1, "a failed CAS hands back the current value");
            assert_eq!(__tsan_atomic32_compare_exchange_strong(p, &mut expected, 3, 4, 2), 1);
            assert_eq!(__tsan_atomic32_compare_exchange_val(p, 3, 4, 5, 5), 3);
            assert_eq!(__tsan_atomic32_compare_exchange_val(p, 3, 5, 5, 5), 4, "failed: the value seen");
            let mut expected = 4;
            while __tsan_atomic32_compare_exchange_weak(p, &mut expected, 6, 5, 0) == 0 {}
            assert_eq!(*p, 6);
        }
        let mut b: u8 = 0xff;
        // SAFETY: a live byte used by this thread only.
        unsafe {
            assert_eq!(__tsan_atomic8_fetch_add(&mut b, 1, 5), 0xff);
            assert_eq!(b, 0, "wraps");
        }
        __tsan_atomic_thread_fence(5);
        __tsan_atomic_signal_fence(5);
    }

    #[test]
    fn concurrent_increments_are_not_lost() {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let threads: Vec<_> = (0..4)
            .map(|_| {
                std::thread::spawn(|| {
                    for _ in 0..10_000 {
                        // SAFETY: COUNTER is a live, aligned 64-bit atomic.
                        unsafe { super::a64::__tsan_atomic64_fetch_add(COUNTER.as_ptr(), 1, 0) };
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        assert_eq!(COUNTER.load(Ordering::Relaxed), 40_000);
    }
}
