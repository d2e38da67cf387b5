//! `libdara_tsan.so`: the `__tsan_*` callbacks of a program compiled with clang's
//! `-fsanitize=thread` and linked without the ThreadSanitizer runtime
//! (`-fno-sanitize-link-runtime -ldara_tsan`), so that one build makes plain loads and stores
//! *and* atomic operations memory-level scheduling points (docs/memory-preemption.md).
//!
//! Why a library of its own, next to `libdara_cov.so`: sancov's callbacks only observe, so the
//! preload can simply shadow `libdara_cov.so`'s no-ops. TSan's atomic callbacks *are* the atomic
//! operation (the compiler replaced the instruction by the call), so whatever runs must perform
//! it, with its memory order, inside and outside dara. One implementation lives here; under dara
//! it also tells the preload about each access first, through one entry point the preload
//! exports ([`dara_abi::access::HOOK_SYMBOL`]), looked up once by [`__tsan_init`] (which every
//! instrumented module's constructor calls before any instrumented code of that module runs).
//! Outside dara the symbol is absent and every callback costs one relaxed load and a branch
//! before doing its work; plain-access callbacks then do nothing at all.
//!
//! * [`access`]: plain reads and writes (`__tsan_read4`, `__tsan_unaligned_write8`, ...), vtable
//!   pointer accesses, function entry/exit (no-ops), memory intrinsics.
//! * [`atomics`]: `__tsan_atomic{8,16,32,64}_*` on Rust's atomics, and the fences.
//! * [`wide`]: `__tsan_atomic128_*` on `cmpxchg16b` (clang emits them only with `-mcx16`).
//!
//! Runs inside the target, on every instrumented access, possibly in signal handlers: no
//! allocation, no lock, no syscall here (the preload's hook has the same rules).
//!
//! Build line: `clang -fsanitize=thread -mllvm -tsan-instrument-read-before-write prog.c
//! -fno-sanitize-link-runtime -L<dir> -ldara_tsan -Wl,-rpath,<dir>`. Without
//! `-tsan-instrument-read-before-write` clang drops the read callback of a read followed by a
//! write to the same place (`counter++`), leaving one point before both, so a lost update
//! between them could never be scheduled.
#![deny(unsafe_op_in_unsafe_fn)]

use core::ffi::{c_char, c_void, CStr};
use core::sync::atomic::{AtomicUsize, Ordering};

use dara_abi::access::{AccessKind, Hook, HOOK_SYMBOL};

pub mod access;
pub mod atomics;
pub mod wide;

extern "C" {
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
}

/// `RTLD_DEFAULT`: search the global scope (the executable, `LD_PRELOAD` libraries, then the rest).
const RTLD_DEFAULT: *mut c_void = core::ptr::null_mut();

/// The preload's hook as an address, 0 outside dara (or before [`__tsan_init`]).
static HOOK: AtomicUsize = AtomicUsize::new(0);

/// Looks up the preload's hook (idempotent: called by every instrumented module's constructor).
#[no_mangle]
pub extern "C" fn __tsan_init() {
    resolve(HOOK_SYMBOL);
}

fn resolve(name: &CStr) {
    // SAFETY: dlsym reads a NUL-terminated name and returns an address or NULL; RTLD_DEFAULT is a
    // valid pseudo-handle.
    let address = unsafe { dlsym(RTLD_DEFAULT, name.as_ptr()) };
    HOOK.store(address as usize, Ordering::Relaxed);
}

/// Tells dara (when running under it) that `size` bytes at `addr` are about to be accessed as
/// `kind`; under `--preempt-on memory` this may be a scheduling point and return only when the
/// thread is granted again.
#[inline(always)]
pub(crate) fn report(addr: *const c_void, size: u64, kind: AccessKind) {
    let hook = HOOK.load(Ordering::Relaxed);
    if hook != 0 {
        // SAFETY: a non-zero HOOK is the address dlsym gave for HOOK_SYMBOL, which the preload
        // defines with the type `Hook` (checked there by a typed constant).
        let hook: Hook = unsafe { core::mem::transmute::<usize, Hook>(hook) };
        // SAFETY: the hook only reads the address as a number and the shared region.
        unsafe { hook(addr as u64, size, kind) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outside_dara_there_is_no_hook() {
        __tsan_init();
        assert_eq!(HOOK.load(Ordering::Relaxed), 0, "this test process has no preload");
        report(core::ptr::null(), 4, AccessKind::Write);
    }
}
