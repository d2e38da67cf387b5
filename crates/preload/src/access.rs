//! Memory-level scheduling points: the receivers of clang's `trace-loads` / `trace-stores`
//! callbacks (`__sanitizer_cov_load{1,2,4,8,16}`, `__sanitizer_cov_store*`), which under dara
//! take precedence over `libdara_cov.so`'s no-ops, and [`dara_memory_access`], which
//! `libdara_tsan.so` (a ThreadSanitizer-ABI build's callbacks) calls before every plain or
//! atomic access it performs or lets through.
//!
//! What a receiver does depends on [`Header::preempt_flags`](dara_abi::Header), written by the
//! scheduler before the target starts:
//!
//! * neither flag: return at once (one load of the flags);
//! * `PROFILE`: record which thread touched which granule, and whether it was written, in the
//!   shared [`AccessTable`](dara_abi::AccessTable) (lock-free, see `dara_abi::access`), and
//!   which kind of instrumentation reported it ([`Header::instrumented`](dara_abi::Header)); never post;
//! * `MEMORY`: post `MemoryRead` / `MemoryWrite` (args `[addr, size]`) when the granule is in the
//!   watch set the scheduler wrote into the table, and let the thread proceed when granted;
//!   record any other access as the profile does (same probe, `access::note`; new entries up
//!   to `access::RECORD_LIMIT` per process, so lookups stay short), so the search
//!   learns which granules this schedule shared and grows the watch set of later executions
//!   (`dara_explorer::watch_growth`).
//!
//! Filters, cheapest first, so the common access costs a few loads: the thread's own stack (an
//! address between the current stack pointer and the stack top noted when the thread was gated
//! is private to the thread — other threads' accesses to it are still seen), then
//! [`Gated::enter`], which refuses threads dara does not control, threads not yet started or
//! already exited, and code running inside the preload (the reentrancy guard), then the table.
//!
//! Runs inside instrumented code, possibly in a signal handler: no allocation, no lock, no
//! syscall besides the handoff's futex calls. A handler that interrupts user code posts like any
//! hook would; one that interrupts the preload is refused by the guard.
use core::sync::atomic::{AtomicUsize, Ordering};

use dara_abi::access::AccessKind;
use dara_abi::{access, instrumented, preempt, Addr, Request};

use crate::gate::{self, Gated};
use crate::region;

/// Shared body of every receiver: `size` bytes at `addr`, a store if `write`, reported by the
/// instrumentation `source` (an [`instrumented`] bit; a trapped atomic instruction counts only
/// under [`preempt::ATOMICS`], instrumentation only under [`preempt::INSTRUMENTED`]).
#[inline(always)]
pub(crate) fn on_access(addr: usize, size: u64, write: bool, source: u32) {
    let Some(header) = region::header() else { return };
    let flags = header.preempt_flags;
    let wanted = if source == instrumented::TRAPPED_ATOMIC { preempt::ATOMICS } else { preempt::INSTRUMENTED };
    if flags & (preempt::MEMORY | preempt::PROFILE) == 0 || flags & wanted == 0 {
        return;
    }
    let Some(table) = region::access_table() else { return };
    let addr = addr as u64;
    if gate::on_own_stack(addr) {
        return;
    }
    let Some(gate) = Gated::enter() else { return };
    if flags & preempt::PROFILE != 0 {
        // A full table drops the access; the scheduler notices a nearly full table and says so.
        access::record(&table.entries, addr, gate.index(), write);
        if header.instrumented.load(Ordering::Relaxed) & source == 0 {
            header.instrumented.fetch_or(source, Ordering::Relaxed);
        }
    } else {
        let claim = CLAIMED.load(Ordering::Relaxed) < access::RECORD_LIMIT;
        match access::note(&table.entries, addr, gate.index(), write, claim) {
            access::Noted::Watched => {
                let addr = Addr(addr);
                gate.post(if write { Request::MemoryWrite { addr, size } } else { Request::MemoryRead { addr, size } });
            }
            access::Noted::Claimed => {
                CLAIMED.fetch_add(1, Ordering::Relaxed);
            }
            access::Noted::Recorded | access::Noted::NoRoom => {}
        }
    }
}

/// Table entries this process claimed in a search execution, up to [`access::RECORD_LIMIT`]
/// (one thread runs at a time, so the count is exact and the same in every run of a schedule).
static CLAIMED: AtomicUsize = AtomicUsize::new(0);

macro_rules! receivers {
    ($($name:ident => ($size:expr, $write:expr)),* $(,)?) => {
        $(
            /// sancov `trace-loads`/`trace-stores`: called before the access.
            #[no_mangle]
            pub extern "C" fn $name(addr: *mut u8) {
                on_access(addr as usize, $size, $write, instrumented::SANCOV);
            }
        )*
    };
}

receivers!(
    __sanitizer_cov_load1 => (1, false),
    __sanitizer_cov_load2 => (2, false),
    __sanitizer_cov_load4 => (4, false),
    __sanitizer_cov_load8 => (8, false),
    __sanitizer_cov_load16 => (16, false),
    __sanitizer_cov_store1 => (1, true),
    __sanitizer_cov_store2 => (2, true),
    __sanitizer_cov_store4 => (4, true),
    __sanitizer_cov_store8 => (8, true),
    __sanitizer_cov_store16 => (16, true),
);

/// `libdara_tsan.so`'s hook ([`access::HOOK_SYMBOL`]): `size` bytes at `addr` are about to be
/// accessed as `kind`. Same watch set, same points as the sancov receivers; an atomic
/// read-modify-write is one `MemoryWrite`, performed by the caller once this returns.
#[no_mangle]
pub extern "C" fn dara_memory_access(addr: u64, size: u64, kind: AccessKind) {
    let source = if kind.atomic() { instrumented::TSAN_ATOMIC } else { instrumented::TSAN };
    on_access(addr as usize, size, kind.writes(), source);
}

/// The hook has the type `libdara_tsan.so` calls it through.
const _: access::Hook = dara_memory_access;
