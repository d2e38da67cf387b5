//! Coverage receivers: under dara these definitions of the sancov callbacks take precedence over
//! `libdara_cov.so`'s no-ops (LD_PRELOAD libraries come first in the dynamic loader's scope), and
//! count edges into this process's map in the shared region — no scheduling point, no syscall,
//! no lock: one relaxed load and store of a byte.
//!
//! gcc's `trace-pc` passes nothing, so the edge is the call's return address, hashed into the
//! map. clang's `trace-pc-guard` receivers are not wired yet (the link-time library's no-ops run).
use core::sync::atomic::Ordering;

use dara_abi::COV_MAP_SIZE;

use crate::region;

/// gcc `trace-pc`: hands the caller's address (the return address on the stack) to `record_pc`.
#[unsafe(naked)]
#[no_mangle]
pub extern "C" fn __sanitizer_cov_trace_pc() {
    core::arch::naked_asm!("mov rdi, [rsp]", "jmp {record}", record = sym record_pc)
}

/// Counts the edge at `pc` (saturating at 255). Runs inside instrumented code, possibly in a
/// signal handler: it only touches the mapped region.
extern "C" fn record_pc(pc: usize) {
    let Some(map) = region::cov_map() else { return };
    let index = (dara_abi::splitmix64(pc as u64) as usize) & (COV_MAP_SIZE - 1);
    let counter = &map[index];
    let count = counter.load(Ordering::Relaxed);
    if count != u8::MAX {
        counter.store(count + 1, Ordering::Relaxed);
    }
}
