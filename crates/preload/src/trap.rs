//! The in-process syscall trap: a seccomp filter that sends interesting syscalls made from
//! anywhere but the preload's trampoline to a SIGSYS handler, which emulates them.
//!
//! Symbol hooks cannot see libc-internal calls (glibc's own futex waits, `arc4random`'s
//! `getrandom`) or raw `syscall` instructions; the trap does. The filter
//! lets everything from [`sys::return_address`] through, traps the calls listed in [`TRAPPED`]
//! (and `clone` without `CLONE_THREAD`, i.e. a new process, `read`/`readv` of descriptor 0,
//! `write`/`writev` of descriptor 1, and
//! `close` of or `dup2`/`dup3` onto dara's region descriptor), and allows the rest.
//!
//! The handler runs in signal context on the trapping thread: it uses only raw syscalls through
//! the trampoline, thread-local `Cell`s and atomics. A thread without a slot, or one already inside
//! the preload, gets the real syscall. A call dara cannot honour is posted as `Unsupported` and
//! the scheduler ends the execution ("fail closed").
use core::sync::atomic::{AtomicBool, Ordering};

use dara_abi::{FutexMatch, Op, NO_DEADLINE};
use libc::{c_int, c_long, c_void, siginfo_t, sock_filter, sock_fprog, timespec, ucontext_t};

use crate::gate::Gated;
use crate::hooks::sigwait::{self, INTERRUPTED};
use crate::vclock::{self, ClockBase, Slept};
use crate::{entropy, real, stop_world, sys, timecalls};

const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
const FUTEX_BITSET_MATCH_ANY: u32 = 0xFFFF_FFFF;

/// Syscalls trapped whatever their arguments. `rt_sigprocmask` so that libc's own masks never
/// block SIGSYS (see [`crate::sigmask`]): a trap whose SIGSYS is blocked kills the process.
/// `clone3` because its flags sit in memory the filter cannot read: glibc's own thread creation
/// gets ENOSYS and falls back to `clone`, whose flags the filter inspects; a raw `clone3` the
/// program makes is refused ([`clone3`]).
///
/// `open`/`openat` are not trapped (random devices are caught by the `open`/`fopen` symbol
/// hooks instead): the filter outlives `execve`, and the dynamic loader of the new program opens
/// its libraries before the preload can install the SIGSYS handler again. `sched_getaffinity`
/// is not trapped for the same reason: jemalloc (redis-server) issues it while the libraries
/// load, before the preload's constructor, and a trap there kills the process.
///
/// `exit` (of one thread; a process ends with `exit_group`) so that a thread's exit is posted
/// after glibc's teardown of it, destructors included ([`crate::thread_end`]).
///
/// `tgkill` (`raise`, `pthread_kill`, `abort`, raw calls) so that a SIGKILL a program sends
/// itself or one of its threads is known as its own ([`crate::hooks::signal::trapped_tgkill`]).
const TRAPPED: [c_long; 25] = [
    libc::SYS_futex,
    libc::SYS_futex_waitv,
    libc::SYS_sched_yield,
    libc::SYS_nanosleep,
    libc::SYS_clock_nanosleep,
    libc::SYS_clock_gettime,
    libc::SYS_gettimeofday,
    libc::SYS_time,
    libc::SYS_clock_getres,
    libc::SYS_times,
    libc::SYS_getrusage,
    libc::SYS_getcpu,
    libc::SYS_getrandom,
    libc::SYS_pause,
    libc::SYS_fork,
    libc::SYS_vfork,
    libc::SYS_execve,
    libc::SYS_execveat,
    libc::SYS_wait4,
    libc::SYS_waitid,
    libc::SYS_rt_sigprocmask,
    libc::SYS_close_range,
    libc::SYS_clone3,
    libc::SYS_exit,
    libc::SYS_tgkill,
];

/// Set once the filter is installed (the signal-mask hooks keep SIGSYS deliverable from then on).
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// Whether the trap is active in this process.
pub fn installed() -> bool {
    INSTALLED.load(Ordering::Relaxed)
}

// Offsets into `struct seccomp_data`.
const DATA_NR: u32 = 0;
const DATA_ARCH: u32 = 4;
const DATA_IP_LO: u32 = 8;
const DATA_IP_HI: u32 = 12;
const DATA_ARG0_LO: u32 = 16;
const DATA_ARG1_LO: u32 = 24;

const fn stmt(code: u32, k: u32) -> sock_filter {
    sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    }
}

const fn jump(code: u32, k: u32, jt: u8, jf: u8) -> sock_filter {
    sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    }
}

const PROGRAM_LEN: usize = TRAPPED.len() + 30;

/// The BPF program; see the module doc. Jump offsets are relative to the next instruction.
fn program(allowed_ip: u64) -> [sock_filter; PROGRAM_LEN] {
    use libc::{BPF_ABS, BPF_ALU, BPF_JEQ, BPF_JGT, BPF_JMP, BPF_JSET, BPF_K, BPF_LD, BPF_RET, BPF_SUB, BPF_W};
    let ld = BPF_LD | BPF_W | BPF_ABS;
    let jeq = BPF_JMP | BPF_JEQ | BPF_K;
    let n = TRAPPED.len();
    // Fixed positions of the argument checks and the shared tails.
    let (read_fd, write_fd, close_fd, dup_target, clone_flags) = (n + 16, n + 18, n + 20, n + 23, n + 26);
    let trap_at = n + 28;
    let allow_at = n + 29;
    let to = |from: usize, target: usize| (target - from - 1) as u8;
    // dara's descriptors, kept whatever the program closes (see `fdguard`): `fd - first` is at
    // most `last - first` exactly for them (below `first` it wraps around to a large number).
    let (first_kept, kept_span) = (crate::fdguard::FIRST_KEPT as u32, (crate::fdguard::LAST_KEPT - crate::fdguard::FIRST_KEPT) as u32);

    let mut p = [stmt(0, 0); PROGRAM_LEN];
    p[0] = stmt(ld, DATA_ARCH);
    p[1] = jump(jeq, AUDIT_ARCH_X86_64, 1, 0);
    p[2] = stmt(BPF_RET | BPF_K, libc::SECCOMP_RET_KILL_PROCESS);
    p[3] = stmt(ld, DATA_IP_LO);
    p[4] = jump(jeq, allowed_ip as u32, 0, 2);
    p[5] = stmt(ld, DATA_IP_HI);
    p[6] = jump(jeq, (allowed_ip >> 32) as u32, to(6, allow_at), 0);
    p[7] = stmt(ld, DATA_NR);
    for (i, &nr) in TRAPPED.iter().enumerate() {
        p[8 + i] = jump(jeq, nr as u32, to(8 + i, trap_at), 0);
    }
    // read/readv of descriptor 0 (a pipeline's stdin, read by stdio inside libc where no symbol
    // hook sees it). Only descriptor 0: the dynamic loader of an exec'd program reads its
    // libraries (other descriptors) before the SIGSYS handler exists again.
    p[8 + n] = jump(jeq, libc::SYS_read as u32, to(8 + n, read_fd), 0);
    p[9 + n] = jump(jeq, libc::SYS_readv as u32, to(9 + n, read_fd), 0);
    // write/writev of descriptor 1, for the same reason: stdio's writes (bash's `printf ... >&3`
    // points descriptor 1 at a socket and sends through stdio).
    p[10 + n] = jump(jeq, libc::SYS_write as u32, to(10 + n, write_fd), 0);
    p[11 + n] = jump(jeq, libc::SYS_writev as u32, to(11 + n, write_fd), 0);
    // close of dara's descriptors, dup2/dup3 onto them (see `fdguard`).
    p[12 + n] = jump(jeq, libc::SYS_close as u32, to(12 + n, close_fd), 0);
    p[13 + n] = jump(jeq, libc::SYS_dup2 as u32, to(13 + n, dup_target), 0);
    p[14 + n] = jump(jeq, libc::SYS_dup3 as u32, to(14 + n, dup_target), 0);
    p[15 + n] = jump(jeq, libc::SYS_clone as u32, to(15 + n, clone_flags), to(15 + n, allow_at));
    for (at, fd) in [(read_fd, 0), (write_fd, 1)] {
        p[at] = stmt(ld, DATA_ARG0_LO);
        p[at + 1] = jump(jeq, fd, to(at + 1, trap_at), to(at + 1, allow_at));
    }
    for (at, arg) in [(close_fd, DATA_ARG0_LO), (dup_target, DATA_ARG1_LO)] {
        p[at] = stmt(ld, arg);
        p[at + 1] = stmt(BPF_ALU | BPF_SUB | BPF_K, first_kept);
        p[at + 2] = jump(BPF_JMP | BPF_JGT | BPF_K, kept_span, to(at + 2, allow_at), to(at + 2, trap_at));
    }
    p[clone_flags] = stmt(ld, DATA_ARG0_LO);
    p[clone_flags + 1] = jump(
        BPF_JMP | BPF_JSET | BPF_K,
        libc::CLONE_THREAD as u32,
        to(clone_flags + 1, allow_at),
        0,
    );
    p[trap_at] = stmt(BPF_RET | BPF_K, libc::SECCOMP_RET_TRAP);
    p[allow_at] = stmt(BPF_RET | BPF_K, libc::SECCOMP_RET_ALLOW);
    p
}

/// Why the trap could not be installed.
pub enum InstallError {
    Handler,
    NoNewPrivs,
    Filter,
}

/// Installs the SIGSYS handler, then the filter (for every thread of the process).
pub fn install() -> Result<(), InstallError> {
    // SAFETY: a zeroed sigaction is a valid "no flags, empty mask" value.
    let mut action: libc::sigaction = unsafe { core::mem::zeroed() };
    action.sa_sigaction = on_sigsys as extern "C" fn(c_int, *mut siginfo_t, *mut c_void) as usize;
    action.sa_flags = libc::SA_SIGINFO;
    // SAFETY: installing a handler with a valid sigaction; the old action is not wanted.
    if unsafe { real::sigaction(libc::SIGSYS, &action, core::ptr::null_mut()) } != 0 {
        return Err(InstallError::Handler);
    }
    // SAFETY: PR_SET_NO_NEW_PRIVS takes plain integers.
    if unsafe {
        sys::syscall(
            libc::SYS_prctl,
            &[libc::PR_SET_NO_NEW_PRIVS as u64, 1, 0, 0, 0],
        )
    } != 0
    {
        return Err(InstallError::NoNewPrivs);
    }
    let filter = program(sys::return_address());
    let fprog = sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_ptr() as *mut sock_filter,
    };
    let args = [
        libc::SECCOMP_SET_MODE_FILTER as u64,
        libc::SECCOMP_FILTER_FLAG_TSYNC,
        &fprog as *const _ as u64,
    ];
    // SAFETY: `fprog` points to a well-formed program that outlives the call (the kernel copies it).
    if unsafe { sys::syscall(libc::SYS_seccomp, &args) } != 0 {
        return Err(InstallError::Filter);
    }
    INSTALLED.store(true, Ordering::Relaxed);
    // A program image started by an `execve` that dara ran from inside this handler inherits
    // the handler's signal mask, SIGSYS blocked: a trap would then kill it.
    let sigsys: u64 = 1 << (libc::SIGSYS - 1);
    // SAFETY: rt_sigprocmask reads one 8-byte signal set from a live local.
    unsafe { sys::syscall(libc::SYS_rt_sigprocmask, &[libc::SIG_UNBLOCK as u64, &sigsys as *const u64 as u64, 0, 8]) };
    Ok(())
}

extern "C" fn on_sigsys(_sig: c_int, _info: *mut siginfo_t, context: *mut c_void) {
    // SAFETY: for an SA_SIGINFO handler the kernel passes a valid ucontext_t that we may modify;
    // it is resumed by sigreturn when the handler returns.
    let uc = unsafe { &mut *(context as *mut ucontext_t) };
    let regs = &uc.uc_mcontext.gregs;
    // After a seccomp trap, rax holds the syscall number again (the kernel rolls it back).
    let nr = regs[libc::REG_RAX as usize] as c_long;
    let args = [
        regs[libc::REG_RDI as usize] as u64,
        regs[libc::REG_RSI as usize] as u64,
        regs[libc::REG_RDX as usize] as u64,
        regs[libc::REG_R10 as usize] as u64,
        regs[libc::REG_R8 as usize] as u64,
        regs[libc::REG_R9 as usize] as u64,
    ];
    // Not scheduling points: answered whoever the thread is.
    let answer = match nr {
        // It acts on the mask this handler's return restores.
        libc::SYS_rt_sigprocmask => Some(crate::sigmask::emulate(uc, args)),
        libc::SYS_close => Some(crate::fdguard::close(args[0])),
        libc::SYS_close_range => Some(crate::fdguard::close_range(args[0], args[1], args[2])),
        libc::SYS_clone3 => Some(clone3(uc.uc_mcontext.gregs[libc::REG_RIP as usize] as u64, args)),
        // SAFETY: a stop-the-world clone of the sanitizer runtime, on the stack it prepared.
        libc::SYS_clone if stop_world::is_helper_clone(&args) => Some(unsafe { stop_world::start(uc.uc_mcontext.gregs[libc::REG_RIP as usize] as u64, args) }),
        // The world is stopped (by the starting thread or the helper, which shares its TLS).
        _ if stop_world::active() => Some(stop_world::passthrough(nr, args)),
        _ => None,
    };
    if let Some(rc) = answer {
        uc.uc_mcontext.gregs[libc::REG_RAX as usize] = rc;
        return;
    }
    let regs = &mut uc.uc_mcontext.gregs;
    crate::gate::set_in_trap(true);
    let rc = emulate(nr, args);
    crate::gate::set_in_trap(false);
    if rc == RESTART {
        // Back onto the `syscall` instruction with its number: the pending signal's handler
        // runs first, as the handler returns, then the call is made (and trapped) again.
        regs[libc::REG_RIP as usize] -= SYSCALL_INSN_BYTES;
        regs[libc::REG_RAX as usize] = nr;
    } else {
        regs[libc::REG_RAX as usize] = rc;
    }
}

/// What an emulated call answers to be made again once the pending signal's handler has run
/// (the kernel's own `-ERESTARTSYS`, which never reaches a program).
pub(crate) const RESTART: i64 = -512;

/// Length of the x86-64 `syscall` instruction (`0f 05`) a seccomp trap returns after.
const SYSCALL_INSN_BYTES: i64 = 2;

/// How far into libc's `syscall()` wrapper its `syscall` instruction ends (about 0x20 bytes in
/// glibc's x86_64 syscall.S): the bound that tells a call made through it.
const SYSCALL_WRAPPER_BYTES: u64 = 64;

/// A trapped `clone3` (`ip`: the address after its `syscall` instruction). glibc's own thread
/// creation (`pthread_create` inside dara's hook, `thrd_create`, timer threads) gets ENOSYS and
/// falls back to `clone`. A raw `clone3` the program made through `syscall()` would start a
/// thread or process dara cannot follow (a new thread on its own stack cannot be run from this
/// handler either): the run stops with a message saying so, rather than the program failing
/// on an ENOSYS it would not see without dara.
fn clone3(ip: u64, a: [u64; 6]) -> i64 {
    let wrapper = libc::syscall as *const () as u64;
    let through_wrapper = (wrapper..wrapper + SYSCALL_WRAPPER_BYTES).contains(&ip);
    match Gated::enter() {
        Some(gate) if through_wrapper => {
            // SAFETY: the program passed clone3 a `struct clone_args`, whose first field is the
            // 64-bit flags (or a bad pointer: then the flags are not shown).
            let flags = (a[0] != 0 && a[1] >= 8).then(|| unsafe { (a[0] as *const u64).read_unaligned() });
            gate.post(Op::Unsupported, [libc::SYS_clone3 as u64, flags.unwrap_or(0), a[1], 0]);
            -(libc::ENOSYS as i64)
        }
        _ => -(libc::ENOSYS as i64),
    }
}

/// Performs the trapped syscall for real, through the trampoline.
pub(crate) fn passthrough(nr: c_long, args: [u64; 6]) -> i64 {
    // SAFETY: the exact syscall the program attempted, with its own arguments.
    unsafe { sys::syscall6(nr, args) }
}

/// Answers trapped syscall `nr` (also called by the vDSO thunks, outside any signal handler).
pub fn emulate(nr: c_long, a: [u64; 6]) -> i64 {
    if let Some(rc) = timecalls::setting(nr, a) {
        return rc;
    }
    match nr {
        libc::SYS_exit => crate::thread_end::exit_syscall(a[0]),
        // Randomness needs no slot: it is a stream draw, not a scheduling point.
        libc::SYS_getrandom => {
            // SAFETY: the program asked the kernel to write `a[1]` bytes at `a[0]`.
            let buf = unsafe { core::slice::from_raw_parts_mut(a[0] as *mut u8, a[1] as usize) };
            entropy::fill(buf);
            a[1] as i64
        }
        _ => match Gated::enter() {
            Some(gate) => gated(&gate, nr, a),
            None => ungated(nr, a),
        },
    }
}

/// A trapped syscall on a thread dara does not control (or inside the preload): run it for
/// real, except the forms that cannot be run from inside a signal handler.
fn ungated(nr: c_long, a: [u64; 6]) -> i64 {
    match nr {
        // A vfork child would run on, and scribble over, this handler's frame: fork instead.
        libc::SYS_vfork => passthrough(libc::SYS_fork, [0; 6]),
        // A child on a new stack would return from the trampoline onto that empty stack.
        libc::SYS_clone if a[1] != 0 => -(libc::ENOSYS as i64),
        libc::SYS_execve | libc::SYS_execveat => crate::tsc::around_exec(|| passthrough(nr, a)),
        // dup2/dup3 onto dara's region descriptor (see `fdguard`): busy, as the kernel says when
        // the target descriptor is being opened.
        libc::SYS_dup2 | libc::SYS_dup3 => -(libc::EBUSY as i64),
        _ => passthrough(nr, a),
    }
}

fn unsupported(gate: &Gated, nr: c_long, a: [u64; 6]) -> i64 {
    gate.post(Op::Unsupported, [nr as u64, a[0], a[1], a[2]]);
    // The scheduler never grants this; if it ever does, refuse the call.
    -(libc::ENOSYS as i64)
}

fn gated(gate: &Gated, nr: c_long, a: [u64; 6]) -> i64 {
    if let Some(rc) = timecalls::gated(gate, nr, a) {
        return rc;
    }
    match nr {
        libc::SYS_futex => futex(gate, nr, a),
        libc::SYS_sched_yield => {
            gate.post(Op::Yield, [0; 4]);
            0
        }
        libc::SYS_nanosleep => {
            // SAFETY: the program passed these to nanosleep.
            let (req, rem) = unsafe { (user_ref::<timespec>(a[0]), user_mut::<timespec>(a[1])) };
            sleep(gate, libc::CLOCK_MONOTONIC, 0, req, rem)
        }
        libc::SYS_clock_nanosleep => {
            // SAFETY: the program passed these to clock_nanosleep.
            let (req, rem) = unsafe { (user_ref::<timespec>(a[2]), user_mut::<timespec>(a[3])) };
            match sleep(gate, a[0] as libc::clockid_t, a[1] as c_int, req, rem) {
                i64::MIN => passthrough(nr, a),
                rc => rc,
            }
        }
        // A clock dara leaves alone (or, for the CPU calls, dara not active).
        libc::SYS_clock_gettime | libc::SYS_clock_getres => passthrough(nr, a),
        libc::SYS_execve | libc::SYS_execveat => crate::process::exec(gate, nr, a),
        libc::SYS_wait4 | libc::SYS_waitid => crate::process::wait(gate, nr, a),
        libc::SYS_read | libc::SYS_readv => crate::hooks::net::trapped_read(gate, nr, a).unwrap_or_else(|| passthrough(nr, a)),
        libc::SYS_tgkill => crate::hooks::signal::trapped_tgkill(gate, a),
        libc::SYS_write | libc::SYS_writev => crate::hooks::net::trapped_write(gate, nr, a).unwrap_or_else(|| passthrough(nr, a)),
        // dup2/dup3 onto dara's region descriptor (see `fdguard`), pause, futex_waitv, and raw fork, vfork or clone without CLONE_THREAD (glibc's fork()
        // goes through the `fork` hook, whose own clone reaches `ungated`).
        _ => unsupported(gate, nr, a),
    }
}

/// Shared by nanosleep and clock_nanosleep: returns 0, -EINVAL, or `i64::MIN` for "not a clock
/// dara controls" (the caller passes the call through).
fn sleep(
    gate: &Gated,
    clock: libc::clockid_t,
    flags: c_int,
    req: Option<&timespec>,
    rem: Option<&mut timespec>,
) -> i64 {
    let Some(base) = ClockBase::of(clock) else {
        return i64::MIN;
    };
    let Some(req) = req else {
        return -(libc::EFAULT as i64);
    };
    let deadline = if flags & libc::TIMER_ABSTIME != 0 {
        vclock::absolute_deadline(base, req)
    } else {
        vclock::timespec_ns(req).map(|d| gate.deadline_after(d))
    };
    let Some(deadline) = deadline else {
        return -(libc::EINVAL as i64);
    };
    // Interrupted, the call fails with EINTR and the handler runs as this handler returns.
    let (left_ns, rc) = match vclock::sleep_until(gate, deadline) {
        Slept::Full => (0, 0),
        Slept::Interrupted { left_ns } => (left_ns, -(libc::EINTR as i64)),
    };
    if let Some(rem) = rem.filter(|_| flags & libc::TIMER_ABSTIME == 0) {
        *rem = vclock::ns_timespec(left_ns);
    }
    rc
}

fn futex(gate: &Gated, nr: c_long, a: [u64; 6]) -> i64 {
    let op = a[1] as c_int;
    let cmd = op & !(libc::FUTEX_PRIVATE_FLAG | libc::FUTEX_CLOCK_REALTIME);
    let (addr, val) = (a[0], a[2] as u32 as u64);
    match cmd {
        libc::FUTEX_WAIT | libc::FUTEX_WAIT_BITSET => {
            // SAFETY: the program passed this timeout (or null) to futex.
            let timeout = unsafe { user_ref::<timespec>(a[3]) };
            let deadline = match (cmd, timeout) {
                (_, None) => Some(NO_DEADLINE),
                (libc::FUTEX_WAIT, Some(ts)) => {
                    vclock::timespec_ns(ts).map(|d| gate.deadline_after(d))
                }
                (_, Some(ts)) => {
                    let base = if op & libc::FUTEX_CLOCK_REALTIME != 0 {
                        ClockBase::Realtime
                    } else {
                        ClockBase::Monotonic
                    };
                    vclock::absolute_deadline(base, ts)
                }
            };
            let matching = futex_match(op, cmd == libc::FUTEX_WAIT, a[5]);
            match deadline {
                None => -(libc::EINVAL as i64),
                Some(_) if matching.bitset == 0 => -(libc::EINVAL as i64),
                Some(deadline) => match gate.post(Op::FutexWait, [addr, val, deadline, matching.to_arg()]).result {
                    // A timed wait is never restarted once a handler ran; an untimed one is
                    // when every handler asked for SA_RESTART. The handler runs as this
                    // handler returns, before the call returns or is made again.
                    INTERRUPTED if deadline == NO_DEADLINE && sigwait::handlers_restart() => RESTART,
                    result => result,
                },
            }
        }
        libc::FUTEX_WAKE | libc::FUTEX_WAKE_BITSET => {
            let matching = futex_match(op, cmd == libc::FUTEX_WAKE, a[5]);
            gate.post(Op::FutexWake, [addr, val, matching.to_arg(), 0]).result
        }
        _ => unsupported(gate, nr, a),
    }
}

/// Which waiters a futex call with operation word `op` matches: every one for the plain
/// commands (`any`), else the bitset argument's; process-shared without `FUTEX_PRIVATE_FLAG`.
fn futex_match(op: c_int, any: bool, bitset_arg: u64) -> FutexMatch {
    let bitset = if any { FUTEX_BITSET_MATCH_ANY } else { bitset_arg as u32 };
    FutexMatch { bitset, shared: op & libc::FUTEX_PRIVATE_FLAG == 0 }
}

/// A shared reference to a user-supplied pointer, `None` if null.
///
/// # Safety
/// A non-null `addr` must point to a valid, aligned `T` that stays alive and unaliased by
/// writes for the duration of the emulated call (the contract of the syscall the program made).
unsafe fn user_ref<'a, T>(addr: u64) -> Option<&'a T> {
    // SAFETY: see the function contract.
    unsafe { (addr as *const T).as_ref() }
}

/// A mutable reference to a user-supplied pointer, `None` if null.
///
/// # Safety
/// As for [`user_ref`], and the program gave the kernel the right to write it.
pub unsafe fn user_mut<'a, T>(addr: u64) -> Option<&'a mut T> {
    // SAFETY: see the function contract.
    unsafe { (addr as *mut T).as_mut() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_futex_call_without_the_private_flag_is_shared() {
        let wait = futex_match(libc::FUTEX_WAIT, true, 0);
        assert_eq!(wait, FutexMatch { bitset: FUTEX_BITSET_MATCH_ANY, shared: true });
        let private = futex_match(libc::FUTEX_WAKE_BITSET | libc::FUTEX_PRIVATE_FLAG, false, 0b101);
        assert_eq!(private, FutexMatch { bitset: 0b101, shared: false });
        assert_eq!(FutexMatch::from_arg(wait.to_arg()), wait);
        assert_eq!(FutexMatch::from_arg(private.to_arg()), private);
    }

    #[test]
    fn filter_jumps_stay_in_bounds() {
        let p = program(0x1234_5678_9abc_def0);
        for (i, ins) in p.iter().enumerate() {
            if ins.code as u32 & 0x07 == libc::BPF_JMP {
                assert!(i + 1 + (ins.jt as usize) < p.len());
                assert!(i + 1 + (ins.jf as usize) < p.len());
            }
        }
        assert_eq!(p[PROGRAM_LEN - 1].k, libc::SECCOMP_RET_ALLOW);
        assert_eq!(p[PROGRAM_LEN - 2].k, libc::SECCOMP_RET_TRAP);
    }
}
