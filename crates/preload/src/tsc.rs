//! `rdtsc` and `rdtscp` answered from the virtual clock.
//!
//! The time-stamp counter is read by an instruction, not a call: no hook or filter sees it.
//! `prctl(PR_SET_TSC, PR_TSC_SIGSEGV)` makes the CPU fault on it instead (the flag is per thread,
//! inherited by every thread and process created after it is set), and the SIGSEGV handler of
//! [`crate::fault`] hands such faults to [`emulate`], which decodes the instruction at the
//! faulting pc, writes the counter into the registers and steps over the instruction.
//!
//! The virtual counter ticks once per virtual nanosecond and reads like `CLOCK_MONOTONIC`
//! (`MONOTONIC_BASE_NS + v`): an invariant 1 GHz TSC that started at boot. Reading it is a
//! `ClockRead` scheduling point, as for any clock. `rdtscp`'s `TSC_AUX` (ecx) is the CPU number
//! `getcpu` reports.
//!
//! The flag survives `execve`, and the next program's dynamic loader reads the counter before
//! its preload can catch the fault, so every `execve` runs with the counter enabled and the flag
//! is set again by the new image's constructor ([`around_exec`]).
//!
//! Runs in signal context: no allocation, no locks.
use core::sync::atomic::{AtomicBool, Ordering};

use dara_abi::counter::CounterRead;
use libc::ucontext_t;

use crate::gate::{self, Gated};
use crate::vclock::{self, ClockBase, Reading};
use crate::{sys, timecalls};

/// `si_code` of a fault raised by the kernel for a privileged instruction (#GP).
pub const SI_KERNEL: i32 = 0x80;

/// Whether this process's threads fault on the counter (set by the constructor).
static TRAPPING: AtomicBool = AtomicBool::new(false);

/// Whether `rdtsc` faults into dara in this process.
pub fn trapping() -> bool {
    TRAPPING.load(Ordering::Relaxed)
}

fn set_tsc_mode(mode: i32) -> i64 {
    // SAFETY: PR_SET_TSC takes a plain integer.
    unsafe { sys::syscall(libc::SYS_prctl, &[libc::PR_SET_TSC as u64, mode as u64]) }
}

/// Makes the counter fault from now on (call once the SIGSEGV handler is in place); false if the
/// kernel refuses (the counter then stays real; docs/determinism.md).
pub fn start_trapping() -> bool {
    let ok = set_tsc_mode(libc::PR_TSC_SIGSEGV) == 0;
    TRAPPING.store(ok, Ordering::Relaxed);
    ok
}

/// Runs an `execve` with the counter enabled, so the next image can start; if the exec fails
/// and this thread goes on, it faults on the counter again.
pub fn around_exec(exec: impl FnOnce() -> i64) -> i64 {
    if !trapping() {
        return exec();
    }
    set_tsc_mode(libc::PR_TSC_ENABLE);
    let rc = exec();
    set_tsc_mode(libc::PR_TSC_SIGSEGV);
    rc
}

/// Answers the counter instruction at the faulting pc of `uc`, if that is one; false otherwise
/// (a real fault).
pub fn emulate(uc: &mut ucontext_t) -> bool {
    let regs = &mut uc.uc_mcontext.gregs;
    let pc = regs[libc::REG_RIP as usize] as usize;
    // SAFETY: `pc` is where the faulting instruction was fetched.
    let Some(read) = (unsafe { CounterRead::at(pc as *const u8) }) else { return false };
    if read == CounterRead::Rdtscp {
        regs[libc::REG_RCX as usize] = timecalls::VIRTUAL_CPU as i64;
    }
    let len = read.len();
    let ticks = counter(pc as u64);
    regs[libc::REG_RAX as usize] = (ticks & 0xffff_ffff) as i64;
    regs[libc::REG_RDX as usize] = (ticks >> 32) as i64;
    regs[libc::REG_RIP as usize] = (pc + len) as i64;
    true
}

/// The virtual counter: a clock read on a gated thread (the counter instruction at `pc` its call
/// site), else the thread's last grant.
fn counter(pc: u64) -> u64 {
    match Gated::enter() {
        Some(gate) => {
            gate::enter_trap(pc);
            let ns = vclock::read(&gate, ClockBase::Monotonic);
            drop(gate);
            gate::leave_trap();
            ns
        }
        None => ClockBase::Monotonic.reading(gate::last_now()),
    }
}
