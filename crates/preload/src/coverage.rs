//! Coverage receivers: under dara these definitions of the sancov edge callbacks take precedence
//! over `libdara_cov.so`'s no-ops (LD_PRELOAD libraries come first in the dynamic loader's
//! scope), and count edges into this process's [`Coverage`](dara_abi::Coverage) area in the
//! shared region — no scheduling point, no syscall, no lock.
//!
//! An edge's index is its guard number for clang's `trace-pc-guard` (handed out here, once per
//! module, in `__sanitizer_cov_trace_pc_guard_init`) or a hash of the call site for gcc's
//! `trace-pc`, which passes nothing. Both receivers are naked so that they can hand the return
//! address (the instrumented call site) to [`record`]; the first hit of an edge stores that
//! address and the step being run ([`Header::step`](dara_abi::Header)), marks the area
//! [`reached`](dara_abi::Coverage::reached), then stores the count.
//!
//! Under `--preempt-on edges:N` ([`Header::preempt_edges`](dara_abi::Header)) every N-th edge a
//! gated thread reaches is also a scheduling point (`EdgeQuantum`, a yield), so instrumented code
//! spinning on a plain flag gives the run token back.
use core::sync::atomic::{AtomicU32, Ordering};

use dara_abi::COV_MAP_SIZE;

use crate::gate::{self, Gated};
use crate::region;

/// Guards handed out so far in this process. Module constructors may run before dara's own
/// constructor maps the region, so the count lives here and is published by [`publish_guards`].
static GUARDS: AtomicU32 = AtomicU32::new(0);

/// gcc `trace-pc`: the edge is the caller's address (the return address on the stack).
#[unsafe(naked)]
#[no_mangle]
pub extern "C" fn __sanitizer_cov_trace_pc() {
    core::arch::naked_asm!("mov rdi, [rsp]", "mov rsi, rdi", "jmp {record}", record = sym record_hashed)
}

/// clang `trace-pc-guard`: `rdi` holds the edge's guard; the call site is the return address.
#[unsafe(naked)]
#[no_mangle]
pub extern "C" fn __sanitizer_cov_trace_pc_guard(_guard: *mut u32) {
    core::arch::naked_asm!("mov rsi, [rsp]", "jmp {record}", record = sym record_guard)
}

/// clang `trace-pc-guard`: numbers the module's guards `[start, stop)` from 1 upwards,
/// continuing across modules. A guard already numbered (the module was initialised before) keeps
/// its number.
///
/// # Safety
/// Called by the instrumented module's constructor with a valid, writable `[start, stop)` range
/// that no other thread touches yet.
#[no_mangle]
pub unsafe extern "C" fn __sanitizer_cov_trace_pc_guard_init(start: *mut u32, stop: *mut u32) {
    if start == stop {
        return;
    }
    // SAFETY: the caller guarantees `[start, stop)` is one valid array; the first guard tells
    // whether this module was numbered already.
    if unsafe { *start } != 0 {
        return;
    }
    let mut guard = start;
    while guard < stop {
        let n = GUARDS.fetch_add(1, Ordering::Relaxed) + 1;
        // SAFETY: `guard` stays inside `[start, stop)`.
        unsafe {
            *guard = n;
            guard = guard.add(1);
        }
    }
    publish_guards();
}

/// Copies the number of guards handed out into this process's coverage area (called again by
/// the constructor once the region is mapped).
pub fn publish_guards() {
    if let Some(cov) = region::coverage() {
        cov.guards.store(GUARDS.load(Ordering::Relaxed), Ordering::Relaxed);
    }
}

/// `trace-pc`: index by a hash of the call site (Fibonacci hashing: one multiply, the high bits
/// are well mixed).
extern "C" fn record_hashed(pc: usize, _unused: usize) {
    let index = ((pc as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - COV_MAP_SIZE.trailing_zeros())) as usize;
    record(index, pc);
}

/// `trace-pc-guard`: index by guard number.
///
/// # Safety
/// `guard` is a guard of an instrumented module (numbered, or 0 before numbering).
unsafe extern "C" fn record_guard(guard: *const u32, pc: usize) {
    // SAFETY: the instrumented code passes a pointer into its guard array.
    let index = unsafe { *guard } as usize;
    if index != 0 {
        record(index, pc);
    }
}

/// Counts edge `index` (modulo the map size) reached from call site `pc`, saturating at 255. Runs
/// inside instrumented code, possibly in a signal handler: it only touches the mapped region.
#[inline(always)]
fn record(index: usize, pc: usize) {
    let Some(cov) = region::coverage() else { return };
    let index = index & (COV_MAP_SIZE - 1);
    let counter = &cov.counts[index];
    let count = counter.load(Ordering::Relaxed);
    if count == 0 {
        let step = region::header().map_or(0, |h| h.step.load(Ordering::Relaxed));
        cov.pcs[index].store(pc as u64, Ordering::Relaxed);
        cov.first_step[index].store(step, Ordering::Relaxed);
        cov.reached.store(1, Ordering::Relaxed);
    }
    if count != u8::MAX {
        counter.store(count + 1, Ordering::Release);
    }
    let quantum = region::header().map_or(0, |h| h.preempt_edges);
    if quantum != 0 && gate::edge_quantum_due(quantum) {
        if let Some(gate) = Gated::enter() {
            gate.post(dara_abi::Request::EdgeQuantum);
        }
    }
}
