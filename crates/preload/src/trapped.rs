//! What the SIGSYS handler does with each call the syscall trap ([`crate::trap`]) catches.
//!
//! Some are answered whoever the thread is (`rt_sigprocmask` on the mask the handler's return
//! restores, `getppid` and `getsid` as the hooks show them, `close` and `close_range` of dara's descriptors, `clone3`, `io_uring_setup` and `io_setup`, the sanitizer's
//! stop-the-world clone); the rest are emulated: as scheduling points for a gated thread (futex
//! waits and wakes, sleeps, clocks and `sysinfo`, `execve`, `wait4`, reads and writes of descriptors 0 and 1,
//! `tgkill`, `sendfile`/`splice`/`tee` on a socket or pipe, `sendmmsg`/`recvmmsg` a message at a time), as posts answered at once (the `timerfd` calls), for real otherwise. A call dara
//! cannot honour is posted as `Unsupported` and the scheduler ends the execution ("fail closed").
//!
//! The handler runs in signal context on the trapping thread: it uses only raw syscalls through
//! the trampoline (and, for the messages of a batch, libc's `sendmsg` and `recvmsg`, which are
//! async-signal-safe system calls the trap lets through), thread-local `Cell`s and atomics. A thread without a slot, or one already
//! inside the preload, gets the real syscall. The vDSO thunks ([`crate::vdso`]) answer through
//! [`emulate`] too, outside any signal handler.
use dara_abi::{Addr, Deadline, FutexMatch, Request, Unsupported, NO_DEADLINE};
use libc::{c_int, c_long, c_void, siginfo_t, timespec, ucontext_t};

use crate::gate::Gated;
use crate::interrupt::{self, INTERRUPTED};
use crate::trap::{passthrough, user_mut, user_ref, RESTART};
use crate::vclock::{self, ClockBase, Slept};
use crate::{entropy, stop_world, timecalls};

/// The SIGSYS handler [`crate::trap::install`] installs.
pub extern "C" fn on_sigsys(_sig: c_int, _info: *mut siginfo_t, context: *mut c_void) {
    // SAFETY: for an SA_SIGINFO handler the kernel passes a valid ucontext_t that we may modify;
    // it is resumed by sigreturn when the handler returns.
    let uc = unsafe { &mut *(context as *mut ucontext_t) };
    let held = crate::deferred_signals::held();
    if held != 0 {
        // SAFETY: the first word of the mask this handler's return restores (the kernel's set).
        unsafe { *(core::ptr::addr_of_mut!(uc.uc_sigmask) as *mut u64) &= !held };
    }
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
        // A new thread, wherever its creator is: made here, so that it starts at its barrier.
        libc::SYS_clone if args[0] & libc::CLONE_THREAD as u64 != 0 => Some(crate::thread_start::clone_thread(uc, args)),
        // Kernel-side asynchronous I/O (see `trap::TRAPPED`).
        libc::SYS_io_uring_setup | libc::SYS_io_setup => Some(-(libc::ENOSYS as i64)),
        // A program's own seccomp filter (see `hooks::sandbox`).
        libc::SYS_seccomp => Some(crate::hooks::sandbox::trapped_seccomp(args)),
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
    crate::gate::enter_trap(regs[libc::REG_RIP as usize] as u64);
    let rc = emulate(nr, args);
    crate::gate::leave_trap();
    if rc == RESTART {
        // Back onto the `syscall` instruction with its number: the pending signal's handler
        // runs first, as the handler returns, then the call is made (and trapped) again.
        regs[libc::REG_RIP as usize] -= SYSCALL_INSN_BYTES;
        regs[libc::REG_RAX as usize] = nr;
    } else {
        regs[libc::REG_RAX as usize] = rc;
    }
}

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
            gate.post(Request::Unsupported(Unsupported::Clone3 { flags: flags.unwrap_or(0), size: a[1] }));
            -(libc::ENOSYS as i64)
        }
        _ => -(libc::ENOSYS as i64),
    }
}

/// Answers trapped syscall `nr` (also called by the vDSO thunks, outside any signal handler).
pub fn emulate(nr: c_long, a: [u64; 6]) -> i64 {
    if let Some(rc) = timecalls::setting(nr, a) {
        return rc;
    }
    if let Some(rc) = crate::hooks::process::trapped_identity(nr, a) {
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

fn gated(gate: &Gated, nr: c_long, a: [u64; 6]) -> i64 {
    if let Some(rc) = timecalls::gated(gate, nr, a) {
        return rc;
    }
    if let Some(rc) = crate::hooks::timerfd::trapped(gate, nr, a) {
        return rc;
    }
    match nr {
        libc::SYS_futex => futex(gate, nr, a),
        libc::SYS_sched_yield => {
            gate.post(Request::Yield);
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
        // glibc's fork called inside libc (`daemon`, `forkpty`), or a raw fork.
        libc::SYS_fork | libc::SYS_vfork => crate::process::trapped_fork(gate, nr, a),
        libc::SYS_clone if crate::process::clone_forks(&a) => crate::process::trapped_fork(gate, nr, a),
        libc::SYS_write | libc::SYS_writev => crate::hooks::net::trapped_write(gate, nr, a).unwrap_or_else(|| passthrough(nr, a)),
        libc::SYS_sendfile | libc::SYS_splice | libc::SYS_tee => {
            dara_abi::transfer::TransferCall::of_syscall(nr).and_then(|call| crate::hooks::transfer::trapped(gate, call, a)).unwrap_or_else(|| passthrough(nr, a))
        }
        libc::SYS_sendmmsg => crate::hooks::mmsg::trapped_send(gate, a),
        libc::SYS_recvmmsg => crate::hooks::mmsg::trapped_receive(gate, a),
        // dup2/dup3 onto dara's region descriptor (see `fdguard`), pause, futex_waitv, and a
        // clone without CLONE_THREAD on a stack of its own or sharing memory (posix_spawn's,
        // which dara runs itself when the program calls it; glibc's fork() goes through the
        // `fork` hook, whose own clone reaches `ungated`).
        _ => crate::process::unsupported(gate, nr, a),
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
    let (addr, val) = (Addr(a[0]), a[2] as u32);
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
                Some(deadline) => match gate.post(Request::FutexWait { addr, expected: val, deadline: Deadline::from_ns(deadline), matching }).result {
                    // A timed wait is never restarted once a handler ran; an untimed one is
                    // when every handler asked for SA_RESTART. The handler runs as this
                    // handler returns, before the call returns or is made again.
                    INTERRUPTED if deadline == NO_DEADLINE && interrupt::handlers_restart() => RESTART,
                    result => result,
                },
            }
        }
        libc::FUTEX_WAKE | libc::FUTEX_WAKE_BITSET => {
            let matching = futex_match(op, cmd == libc::FUTEX_WAKE, a[5]);
            gate.post(Request::FutexWake { addr, count: val, matching }).result
        }
        _ => crate::process::unsupported(gate, nr, a),
    }
}

fn futex_match(op: c_int, any: bool, bitset_arg: u64) -> FutexMatch {
    FutexMatch::of_call(op, any, bitset_arg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_futex_call_without_the_private_flag_is_shared() {
        let wait = futex_match(libc::FUTEX_WAIT, true, 0);
        assert_eq!(wait, FutexMatch { bitset: u32::MAX, shared: true });
        let private = futex_match(libc::FUTEX_WAKE_BITSET | libc::FUTEX_PRIVATE_FLAG, false, 0b101);
        assert_eq!(private, FutexMatch { bitset: 0b101, shared: false });
        assert_eq!(FutexMatch::from_arg(wait.to_arg()), wait);
        assert_eq!(FutexMatch::from_arg(private.to_arg()), private);
    }
}
