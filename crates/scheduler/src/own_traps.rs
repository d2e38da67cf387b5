//! The scheduler thread runs with the time-stamp counter disabled and `cpuid` faulting, as the
//! threads it gates do.
//!
//! **Why.** The preload makes every gated thread fault on `rdtsc` (`PR_SET_TSC`,
//! `PR_TSC_SIGSEGV`) so the counter can be answered from the virtual clock. The kernel keeps that
//! setting in CR4.TSD and rewrites CR4 on a context switch between two tasks whose settings
//! differ. On the machines this project runs on (virtual machines where a CR4 write exits to the
//! hypervisor) such a switch costs several microseconds, and a scheduling point switches twice
//! (thread → scheduler → thread): with only the targets trapping, a point cost about 23 µs instead
//! of about 6 µs (bisected to 30182e5; docs/performance.md). With the scheduler thread trapping
//! too, the two sides agree and no switch between them touches CR4.
//!
//! **`cpuid` faulting, the same way.** The gated threads fault on `cpuid` (`ARCH_SET_CPUID`, the
//! preload's `cpuid.rs`), a setting the kernel keeps in an MSR and rewrites on a switch between
//! tasks whose settings differ; an MSR write exits to the hypervisor too. A futex round trip
//! between two threads on one CPU: 3.7 µs when both fault or neither does, 7.9-9.7 µs when one
//! does. So the scheduler thread faults on `cpuid` too while it drives an execution. Its code
//! asks `cpuid` seldom if ever (Rust's feature detection caches at the first question); a thread
//! that does, or one it created (the setting is inherited; `execve` resets it), turns faulting off
//! for itself in [`on_sigsegv`] and retries the instruction.
//!
//! **What it takes.**
//! - The thread's own clock reads must not execute `rdtsc`, which the vDSO's `clock_gettime` and
//!   `gettimeofday` do. This binary therefore defines those two symbols (the executable's
//!   definitions win over libc's for its own calls, `std::time` included): in a thread that
//!   disabled its counter here they make the system call; in every other thread they call libc's,
//!   so the vDSO (the coarse clocks always go there: the vDSO reads no counter for them, see
//!   [`crate::coarse_time`]).
//! - Children: the flag survives `fork` and `execve`, and a new program's dynamic loader reads
//!   the counter before anything could catch the fault. Every command dara starts re-enables it
//!   between fork and exec (`dara_tracer::launch::enable_counter_in_child`, called from the
//!   tracer's and the harness's `pre_exec`).
//! - A thread created by this thread inherits the flag too. Its first `rdtsc` faults into
//!   [`on_sigsegv`], which re-enables the counter for that thread and returns to the instruction;
//!   any other SIGSEGV goes to the handler that was there before (Rust's stack-overflow report,
//!   or the default action).
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use dara_abi::cpuid::{ARCH_SET_CPUID, CPUID, CPUID_FAULTS, CPUID_RUNS};

/// `si_code` of a fault the kernel raises for a privileged instruction (#GP).
const SI_KERNEL: i32 = 0x80;

thread_local! {
    /// Whether this thread disabled its counter here (and so reads clocks by system call).
    static DISABLED: Cell<bool> = const { Cell::new(false) };
}

/// libc's `clock_gettime` and `gettimeofday` (0 when not found).
static LIBC_CLOCKS: OnceLock<(usize, usize)> = OnceLock::new();
/// The SIGSEGV action found before ours, set once when ours is installed.
static PREVIOUS_SEGV: OnceLock<libc::sigaction> = OnceLock::new();
/// How many threads re-enabled their counter in [`on_sigsegv`] (a missed clock path if it is the
/// scheduler's own thread).
static REENABLED: AtomicUsize = AtomicUsize::new(0);

/// The counter is disabled in this thread (and `cpuid` faults, where the CPU can) until the
/// guard drops.
pub struct CounterDisabled(());

impl Drop for CounterDisabled {
    fn drop(&mut self) {
        set_mode(libc::PR_TSC_ENABLE);
        DISABLED.with(|d| d.set(false));
        set_cpuid(CPUID_RUNS);
    }
}

/// Disables the time-stamp counter in the calling thread (the one that will hand the run token
/// to the gated threads) until the guard drops. Returns `None`, and changes nothing, when libc's
/// clock functions cannot be found or the kernel refuses (then every switch pays, as before).
pub fn disable_in_this_thread() -> Option<CounterDisabled> {
    let (clock_gettime, gettimeofday) = libc_clocks();
    if clock_gettime == 0 || gettimeofday == 0 || DISABLED.with(Cell::get) || !install_handler() {
        return None;
    }
    DISABLED.with(|d| d.set(true));
    if set_mode(libc::PR_TSC_SIGSEGV) != 0 {
        DISABLED.with(|d| d.set(false));
        return None;
    }
    // Where the CPU cannot fault on `cpuid` the targets do not either: nothing to match.
    set_cpuid(CPUID_FAULTS);
    Some(CounterDisabled(()))
}

fn set_cpuid(mode: u64) -> i64 {
    // SAFETY: ARCH_SET_CPUID takes a plain integer.
    unsafe { libc::syscall(libc::SYS_arch_prctl, ARCH_SET_CPUID, mode) }
}

/// How many threads found their counter disabled by inheritance and re-enabled it.
pub fn reenabled_threads() -> usize {
    REENABLED.load(Ordering::Relaxed)
}

fn set_mode(mode: i32) -> i32 {
    // SAFETY: PR_SET_TSC takes a plain integer.
    unsafe { libc::prctl(libc::PR_SET_TSC, mode as libc::c_ulong, 0, 0, 0) }
}

fn libc_clocks() -> (usize, usize) {
    *LIBC_CLOCKS.get_or_init(|| {
        let symbol = |name: &core::ffi::CStr| {
            // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name only looks the symbol up.
            unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) as usize }
        };
        (symbol(c"clock_gettime"), symbol(c"gettimeofday"))
    })
}

/// Installs [`on_sigsegv`] once, keeping the action it replaces; false if that failed.
fn install_handler() -> bool {
    PREVIOUS_SEGV
        .get_or_init(|| {
            // SAFETY: all-zero sigactions are valid; the handler is async-signal-safe and reads
            // PREVIOUS_SEGV, which is set (by this initialisation) before any thread disables
            // its counter, so before any counter fault can reach it.
            unsafe {
                let mut ours: libc::sigaction = std::mem::zeroed();
                ours.sa_sigaction = on_sigsegv as extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) as usize;
                ours.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_NODEFER;
                let mut previous: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(libc::SIGSEGV, &ours, &mut previous) != 0 {
                    previous.sa_sigaction = usize::MAX;
                }
                previous
            }
        })
        .sa_sigaction
        != usize::MAX
}

/// A counter read in a thread that inherited the disabled counter: enable it and retry the
/// instruction; a `cpuid` in a thread that faults on it: the same. Anything else: the previous
/// action. Runs in signal context: no allocation.
extern "C" fn on_sigsegv(signal: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo and ucontext to an SA_SIGINFO handler; the
    // faulting pc of a #GP on rdtsc or cpuid points at the instruction's bytes, which are mapped
    // code (the second byte only read after a first 0f, which opens a two-byte opcode).
    unsafe {
        let pc = (*(context as *const libc::ucontext_t)).uc_mcontext.gregs[libc::REG_RIP as usize] as *const u8;
        if (*info).si_code == SI_KERNEL && !pc.is_null() && dara_abi::counter::CounterRead::at(pc).is_some() {
            set_mode(libc::PR_TSC_ENABLE);
            DISABLED.with(|d| d.set(false));
            REENABLED.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if (*info).si_code == SI_KERNEL && !pc.is_null() && *pc == CPUID[0] && *pc.add(1) == CPUID[1] {
            set_cpuid(CPUID_RUNS);
            return;
        }
        match PREVIOUS_SEGV.get().copied() {
            Some(previous) if previous.sa_flags & libc::SA_SIGINFO != 0 && previous.sa_sigaction > libc::SIG_IGN => {
                let handler: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) = std::mem::transmute(previous.sa_sigaction);
                handler(signal, info, context);
            }
            Some(previous) if previous.sa_sigaction > libc::SIG_IGN => {
                let handler: extern "C" fn(libc::c_int) = std::mem::transmute(previous.sa_sigaction);
                handler(signal);
            }
            _ => {
                // The default action: restore it; the instruction faults again on return.
                let mut default: libc::sigaction = std::mem::zeroed();
                default.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(libc::SIGSEGV, &default, std::ptr::null_mut());
            }
        }
    }
}

/// This binary's `clock_gettime`: see the module doc.
///
/// # Safety
/// As libc's: `ts` points at writable memory for a timespec.
#[no_mangle]
pub unsafe extern "C" fn clock_gettime(clock: libc::clockid_t, ts: *mut libc::timespec) -> libc::c_int {
    // The coarse clocks come from the last timer tick: the vDSO reads no counter for them.
    let coarse = matches!(clock, libc::CLOCK_MONOTONIC_COARSE | libc::CLOCK_REALTIME_COARSE);
    match libc_clocks().0 {
        real if real != 0 && (coarse || !DISABLED.with(Cell::get)) => {
            // SAFETY: the address is libc's clock_gettime, with this signature.
            let real: unsafe extern "C" fn(libc::clockid_t, *mut libc::timespec) -> libc::c_int = unsafe { std::mem::transmute(real) };
            // SAFETY: forwarded as received.
            unsafe { real(clock, ts) }
        }
        // SAFETY: the system call takes the same arguments as the function.
        _ => unsafe { libc::syscall(libc::SYS_clock_gettime, clock, ts) as libc::c_int },
    }
}

/// This binary's `gettimeofday`: see the module doc.
///
/// # Safety
/// As libc's: `tv` (and `tz` when not null) point at writable memory.
#[no_mangle]
pub unsafe extern "C" fn gettimeofday(tv: *mut libc::timeval, tz: *mut libc::c_void) -> libc::c_int {
    match libc_clocks().1 {
        real if real != 0 && !DISABLED.with(Cell::get) => {
            // SAFETY: the address is libc's gettimeofday, with this signature.
            let real: unsafe extern "C" fn(*mut libc::timeval, *mut libc::c_void) -> libc::c_int = unsafe { std::mem::transmute(real) };
            // SAFETY: forwarded as received.
            unsafe { real(tv, tz) }
        }
        // SAFETY: the system call takes the same arguments as the function.
        _ => unsafe { libc::syscall(libc::SYS_gettimeofday, tv, tz) as libc::c_int },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode() -> i32 {
        let mut mode: libc::c_int = 0;
        // SAFETY: PR_GET_TSC writes the mode into the live integer.
        unsafe { libc::prctl(libc::PR_GET_TSC, &mut mode as *mut libc::c_int, 0, 0, 0) };
        mode
    }

    /// Whether `cpuid` faults in this thread (ARCH_GET_CPUID answers 0 then).
    fn cpuid_faults() -> bool {
        const ARCH_GET_CPUID: u64 = 0x1011;
        // SAFETY: ARCH_GET_CPUID takes no pointer.
        unsafe { libc::syscall(libc::SYS_arch_prctl, ARCH_GET_CPUID, 0) == 0 }
    }

    #[test]
    fn cpuid_in_a_thread_that_faults_on_it_is_answered_and_stops_faulting() {
        std::thread::spawn(|| {
            let guard = disable_in_this_thread().expect("the kernel takes PR_SET_TSC");
            if !cpuid_faults() {
                return; // the CPU cannot fault on cpuid: nothing to check here
            }
            let faulting = std::thread::spawn(|| {
                let inherited = cpuid_faults();
                let vendor = core::arch::x86_64::__cpuid(0);
                (inherited, vendor.ebx != 0, cpuid_faults())
            });
            assert_eq!(faulting.join().unwrap(), (true, true, false), "inherited, answered, then off for that thread");
            drop(guard);
            assert!(!cpuid_faults(), "the guard turns faulting off");
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_disabled_thread_reads_clocks_and_its_children_and_threads_run() {
        // In a thread of its own: the test harness's thread keeps its counter.
        std::thread::spawn(|| {
            let guard = disable_in_this_thread().expect("the kernel takes PR_SET_TSC");
            assert_eq!(mode(), libc::PR_TSC_SIGSEGV);
            // std's clocks go through this binary's clock_gettime: a system call, no counter.
            let start = std::time::Instant::now();
            let _ = std::time::SystemTime::now();
            assert!(start.elapsed() < std::time::Duration::from_secs(60));
            let _ = crate::coarse_time::CoarseInstant::now();
            // A thread created now inherits the disabled counter; its first counter read (the
            // vDSO's) faults into on_sigsegv, which enables it for that thread.
            assert_eq!(mode(), libc::PR_TSC_SIGSEGV, "the clock reads above did not fault");
            let before = reenabled_threads();
            let (inherited, after) = std::thread::spawn(|| {
                let inherited = mode();
                let _ = std::time::Instant::now();
                (inherited, mode())
            })
            .join()
            .unwrap();
            assert_eq!(inherited, libc::PR_TSC_SIGSEGV, "threads inherit the disabled counter");
            assert_eq!(after, libc::PR_TSC_ENABLE, "the new thread's counter works after its first read");
            assert!(reenabled_threads() > before);
            // A command started with enable_counter_in_child between fork and exec runs; its dynamic
            // loader reads the counter first thing.
            let mut cmd = std::process::Command::new("/bin/true");
            // SAFETY: the closure makes one async-signal-safe system call.
            unsafe {
                std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
                    dara_tracer::launch::enable_counter_in_child();
                    Ok(())
                });
            }
            assert!(cmd.status().unwrap().success());
            drop(guard);
            assert_eq!(mode(), libc::PR_TSC_ENABLE);
        })
        .join()
        .unwrap();
    }
}
