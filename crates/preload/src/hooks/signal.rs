//! Signals. Which ones the program catches is noted in [`crate::dispositions`]: a parked thread blocks
//! those, so a handler never runs beside the token holder and a pending one runs right after the
//! thread's next grant, at the same point of every run (see `gate`). Signals left at their
//! default action are not blocked: a process told to terminate dies at once, as it would
//! without dara, and the scheduler waits for it (see `kill`).
//!
//! Keeping the syscall trap alive. A seccomp trap whose SIGSYS is blocked or has a foreign handler
//! kills the process, so once the trap is installed the program may neither block SIGSYS (it is
//! silently left out of any mask it sets; servers commonly block "all" signals in worker threads)
//! nor replace its handler (the call succeeds and changes nothing), and a handler's own mask
//! never holds it. (libc's raw `rt_sigprocmask` calls are trapped for the same reason: see
//! `sigmask`.) SIGSEGV likewise, while the time-stamp counter faults with it: the program's
//! action is kept by [`crate::fault::program_action`], which runs it for real faults.
use libc::{c_int, sigset_t};

use super::Obj;
use super::signal_entry;
use crate::dispositions::{caught, note_disposition, note_restart, program_handler};
use crate::fault::program_action;
use crate::{real, sys, trap};

/// `mask` (a kernel signal word) without SIGSYS, and without SIGSEGV while the time-stamp counter
/// faults with it: the masks dara applies for the program (a handler's, a wait's) never hold them.
pub fn keep_traps_open(mask: u64) -> u64 {
    let segv = if program_action::owned() { 1 << (libc::SIGSEGV - 1) } else { 0 };
    mask & !(1 << (libc::SIGSYS - 1)) & !segv
}

/// `set` without SIGSYS (and SIGSEGV while the time-stamp counter faults with it), if it needed
/// changing: the kernel kills a thread that traps with the signal blocked.
fn without_sigsys(how: c_int, set: Obj<sigset_t>) -> Option<sigset_t> {
    let set = set.get()?;
    if how == libc::SIG_UNBLOCK || !trap::installed() {
        return None;
    }
    let mut copy = *set;
    // SAFETY: `copy` is a valid sigset_t and SIGSYS a valid signal number.
    unsafe { libc::sigdelset(&mut copy, libc::SIGSYS) };
    if program_action::owned() {
        // SAFETY: as above.
        unsafe { libc::sigdelset(&mut copy, libc::SIGSEGV) };
    }
    Some(copy)
}

#[no_mangle]
pub unsafe extern "C" fn sigprocmask(
    how: c_int,
    set: *const sigset_t,
    old: *mut sigset_t,
) -> c_int {
    // SAFETY: the program's own argument.
    let filtered = without_sigsys(how, unsafe { Obj::from_const(set) });
    let set = filtered.as_ref().map_or(set, |s| s as *const sigset_t);
    // SAFETY: the program's arguments, with SIGSYS possibly removed from a local copy of `set`.
    unsafe { real::sigprocmask(how, set, old) }
}

#[no_mangle]
pub unsafe extern "C" fn pthread_sigmask(
    how: c_int,
    set: *const sigset_t,
    old: *mut sigset_t,
) -> c_int {
    // SAFETY: the program's own argument.
    let filtered = without_sigsys(how, unsafe { Obj::from_const(set) });
    let set = filtered.as_ref().map_or(set, |s| s as *const sigset_t);
    // SAFETY: the program's arguments, with SIGSYS possibly removed from a local copy of `set`.
    unsafe { real::pthread_sigmask(how, set, old) }
}

#[no_mangle]
pub unsafe extern "C" fn sigaction(
    sig: c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> c_int {
    if sig == libc::SIGSYS && trap::installed() {
        // Report the default disposition and keep ours.
        // SAFETY: the program's own out-parameter.
        if let Some(old) = unsafe { Obj::new(old) }.get_mut() {
            // SAFETY: all-zero is a valid sigaction (SIG_DFL, empty mask, no flags).
            *old = unsafe { core::mem::zeroed() };
        }
        return 0;
    }
    if sig == libc::SIGSEGV && program_action::owned() {
        // Dara's handler stays; the program's action is kept beside it.
        // SAFETY: the program's own out-parameter.
        if let Some(old) = unsafe { Obj::new(old) }.get_mut() {
            *old = program_action::get();
        }
        // SAFETY: the program passed a valid sigaction (or null).
        if let Some(act) = unsafe { act.as_ref() } {
            program_action::set(act);
        }
        return 0;
    }
    // A handler's mask (often "every signal") applies while it runs: keep SIGSYS out of it.
    // SAFETY: the program passed a valid sigaction (or null).
    let filtered = unsafe { act.as_ref() }.filter(|_| trap::installed()).map(|a| {
        let mut copy = *a;
        // SAFETY: `copy.sa_mask` is a valid sigset_t and SIGSYS a valid signal number.
        unsafe { libc::sigdelset(&mut copy.sa_mask, libc::SIGSYS) };
        if program_action::owned() {
            // SAFETY: as above; an rdtsc in the handler faults with SIGSEGV.
            unsafe { libc::sigdelset(&mut copy.sa_mask, libc::SIGSEGV) };
        }
        copy
    });
    // dara's entry in front of a handler (see `signal_entry`), once the trap is in place.
    let installed = filtered.as_ref().map(|a| signal_entry::installed_action(sig, a));
    let act = filtered.as_ref().map_or(act, |a| a as *const libc::sigaction);
    let before = program_handler(sig);
    let kernel_act = installed.as_ref().map_or(act, |a| a as *const libc::sigaction);
    // SAFETY: the program's own arguments, with SIGSYS possibly removed from a copy of `act`
    // and dara's entry in front of its handler.
    let rc = unsafe { real::sigaction(sig, kernel_act, old) };
    if rc == 0 {
        // SAFETY: the program's own out-parameter (or null).
        if let Some(old) = unsafe { Obj::new(old) }.get_mut() {
            signal_entry::reported_action(old, before);
        }
        // SAFETY: the program passed a valid sigaction (or null).
        if let Some(act) = unsafe { act.as_ref() } {
            note_disposition(sig, act.sa_sigaction);
            note_restart(sig, act.sa_flags & libc::SA_RESTART != 0);
            if installed.is_some() {
                signal_entry::note_action(sig, act);
            }
        }
    }
    rc
}

/// glibc's `signal` (BSD semantics: `SA_RESTART`), through the `sigaction` hook: SIGSYS and
/// SIGSEGV stay dara's, and a handler gets dara's entry in front of it.
#[no_mangle]
pub unsafe extern "C" fn signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    // SAFETY: the program's own arguments.
    unsafe { signal_with_flags(sig, handler, libc::SA_RESTART) }
}

/// `signal` with System V semantics (`__sysv_signal`, `sysv_signal`: one-shot, not deferred, no
/// restart) or BSD's (`bsd_signal`), through the `sigaction` hook, so SIGSYS and SIGSEGV stay
/// dara's as they do for `sigaction`. glibc's `signal` is `__sysv_signal` in a program compiled
/// in a strict standard mode (`-std=c11`): zstd is, and its SIGSEGV handler replaced dara's, so
/// the first trapped `cpuid` crashed it.
///
/// # Safety
/// `handler` is a signal handler, SIG_DFL or SIG_IGN, as for `signal`.
unsafe fn signal_with_flags(sig: c_int, handler: libc::sighandler_t, flags: c_int) -> libc::sighandler_t {
    // SAFETY: all-zero sigactions are valid (SIG_DFL, empty mask, no flags).
    let (mut action, mut old): (libc::sigaction, libc::sigaction) = unsafe { (core::mem::zeroed(), core::mem::zeroed()) };
    action.sa_sigaction = handler;
    action.sa_flags = flags;
    // SAFETY: two live sigactions.
    if unsafe { sigaction(sig, &action, &mut old) } != 0 {
        return libc::SIG_ERR;
    }
    old.sa_sigaction
}

#[no_mangle]
pub unsafe extern "C" fn __sysv_signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    // SAFETY: the program's own arguments.
    unsafe { signal_with_flags(sig, handler, libc::SA_RESETHAND | libc::SA_NODEFER) }
}

#[no_mangle]
pub unsafe extern "C" fn sysv_signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    // SAFETY: the program's own arguments.
    unsafe { signal_with_flags(sig, handler, libc::SA_RESETHAND | libc::SA_NODEFER) }
}

#[no_mangle]
pub unsafe extern "C" fn bsd_signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    // SAFETY: the program's own arguments.
    unsafe { signal_with_flags(sig, handler, libc::SA_RESTART) }
}

/// `kill` by a traced thread: a scheduling point naming the target by logical process (pids
/// differ from run to run), then the real `kill`. The grant says how many traced processes the
/// signal terminates; for a single target the sender waits until it is dead, with its caught
/// signals blocked, so the SIGCHLD that follows is handled when `kill` returns, in every run.
/// `None` when the thread is not gated.
fn kill_gated(pid: libc::pid_t, sig: c_int) -> Option<c_int> {
    let gate = crate::gate::Gated::enter()?;
    let dies = post_kill(&gate, pid, sig);
    let blocked = caught();
    let mut saved: u64 = 0;
    // SAFETY: rt_sigprocmask with two live 8-byte sets.
    unsafe { sys::syscall(libc::SYS_rt_sigprocmask, &[libc::SIG_BLOCK as u64, &blocked as *const u64 as u64, &mut saved as *mut u64 as u64, 8]) };
    // SAFETY: the program's own arguments.
    let rc = unsafe { real::kill(pid, sig) };
    if rc == 0 && dies && pid > 0 {
        crate::process::wait_until_dead(pid as u32);
    }
    // The post parked the thread with its caught signals blocked, so `saved` is that parked
    // mask; the program's own is the one the post kept (restoring `saved` left every caught
    // signal blocked in this thread for good after its first kill).
    let program = crate::gate::program_mask().unwrap_or(saved);
    drop(gate);
    // SAFETY: restores the program's mask; pending caught signals are delivered now.
    unsafe { sys::syscall(libc::SYS_rt_sigprocmask, &[libc::SIG_SETMASK as u64, &program as *const u64 as u64, 0, 8]) };
    Some(rc)
}

/// Posts the `ProcessKill` of a signal `sig` to `pid` (a process group or every process when not
/// positive); whether the grant says it terminates some traced process.
fn post_kill(gate: &crate::gate::Gated, pid: libc::pid_t, sig: c_int) -> bool {
    use dara_abi::ProcessTarget;
    let target = if pid > 0 { crate::process::logical_process(pid as u32).map_or(ProcessTarget::Untraced, ProcessTarget::Process) } else { ProcessTarget::Any };
    gate.post(dara_abi::Request::ProcessKill { target, signal: sig, pid }).result > 0
}

/// A trapped `tgkill(tgid, tid, sig)` (glibc's `raise`, `pthread_kill` and `abort` make one, as
/// does a raw system call): a SIGKILL, which ends the whole process `tgid`, is posted as that
/// process's kill first, so that dara knows it as the program's own and not a kill from outside.
/// Any other signal sent to another of its threads (`pthread_kill`) is posted as a kill too:
/// that thread may be parked in a wait the signal ends (a caught signal ends a `poll` or a
/// sleep; a blocked one ends a `sigwait` for it), and the scheduler looks at pending signals
/// after a kill, so the `Interrupt` is offered at the sender's next scheduling point in every
/// run (not at whatever kill or exit came later). Before, only caught signals were posted, and
/// pbzip2's main thread stopping its signal thread (parked in `sigwait` for SIGUSR1) with
/// `pthread_kill` was judged a deadlock. Signals to the thread itself and signal 0 go as they
/// are. Returns the call's result.
///
/// The signal is sent with every signal but SIGSYS blocked: one sent to this very thread must
/// not run its handler here, inside dara's SIGSYS handler (where the handler would see dara's
/// frame as its context, and its hooked calls would not be scheduling points). The kernel
/// restores the program's mask as the SIGSYS handler returns and delivers it then, right after
/// the call, as it would have without dara.
pub fn trapped_tgkill(gate: &crate::gate::Gated, a: [u64; 6]) -> i64 {
    let (tgid, sig) = (a[0] as libc::pid_t, a[2] as c_int);
    let to_other_thread = || {
        // SAFETY: gettid takes no arguments.
        a[1] as i64 != unsafe { sys::syscall(libc::SYS_gettid, &[]) }
    };
    if tgid > 0 && (sig == libc::SIGKILL || (1..=64).contains(&sig) && to_other_thread()) {
        post_kill(gate, tgid, sig);
    }
    let all_but_sigsys: u64 = !(1 << (libc::SIGSYS - 1));
    // SAFETY: rt_sigprocmask reads one live 8-byte set; the SIGSYS handler's return restores the
    // program's own mask from its saved context.
    unsafe { sys::syscall(libc::SYS_rt_sigprocmask, &[libc::SIG_BLOCK as u64, &all_but_sigsys as *const u64 as u64, 0, 8]) };
    crate::trap::passthrough(libc::SYS_tgkill, a)
}

#[no_mangle]
pub unsafe extern "C" fn kill(pid: libc::pid_t, sig: c_int) -> c_int {
    // SAFETY: the program's own arguments, forwarded unchanged.
    kill_gated(pid, sig).unwrap_or_else(|| unsafe { real::kill(pid, sig) })
}
