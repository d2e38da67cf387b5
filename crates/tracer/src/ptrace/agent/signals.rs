//! Signals on the ptrace path, as the preload's requests have them (crates/preload/src/hooks/
//! signal.rs and sigwait.rs): a `kill`, `tgkill` or `tkill` is a `ProcessKill` scheduling point;
//! `pause` and `rt_sigsuspend` post `SigSuspend { mask }`, `rt_sigtimedwait` (glibc's and musl's
//! `sigwaitinfo`, `sigtimedwait`, `sigwait`) posts `SigWait { set, deadline }`.
//!
//! # Why the agent holds nothing itself
//! A parked tracee is in a ptrace stop, where a signal sent to it stays pending in the kernel
//! (only SIGKILL wakes a stopped tracee): what the preload gets by blocking the caught signals
//! while its thread is parked, the agent gets for free, and `/proc/<pid>/task/<tid>/status`
//! shows it to the scheduler, which offers the `Interrupt` of a wait that signal ends
//! (scheduler's `execution/signals.rs`, with the mask each post leaves in the slot). A signal
//! pending when a thread is resumed for any other grant is delivered as it goes on: right after
//! its grant, as the preload delivers it, at the same point of every run.
//!
//! # Finishing a wait a signal ended
//! Granted its `Interrupt`, a `sigsuspend` (or `pause`) is let run for real: the signal is
//! pending and its mask lets it through, so the kernel returns at once, runs the handler under
//! the wait's mask (the agent lets the signal through at its delivery stop) and gives the
//! thread's own mask back, and the call fails with EINTR, all as without dara. A `sigtimedwait`
//! with a signal of its set pending runs for real too (it takes that signal and its siginfo at
//! once); one ended by a handler's signal fails with EINTR, the handler running as the thread
//! goes on. A `SigWait` granted `-EAGAIN` timed out (a virtual-time deadline). Were the signal
//! gone at the grant (it cannot be: only one thread runs), the call fails with EINTR rather
//! than block in the kernel.
use dara_abi::{Deadline, Request, NO_DEADLINE};

use super::calls::{Action, ClockAnswer, Then};
use super::tracees::CallStop;
use super::{resume, resume_to_exit, Agent};
use crate::ptrace::remote::{self, Registers, Syscall};

/// The kernel's signal-set size (64 signals), the only one these calls accept.
const KERNEL_SIGSET_BYTES: u64 = 8;

const fn bit(sig: i32) -> u64 {
    1 << (sig - 1)
}

/// Signals a wait never counts as ending it: the fault signals the kernel raises at once, and
/// those dara's traps use (SIGSYS; SIGTRAP for probes), as the scheduler counts them.
const SYNCHRONOUS: u64 = bit(libc::SIGSYS) | bit(libc::SIGSEGV) | bit(libc::SIGBUS) | bit(libc::SIGFPE) | bit(libc::SIGILL) | bit(libc::SIGTRAP);

/// What signal call `call` of thread `tid` (process `pid`, last grant at `last_now`) means;
/// None for a call of another kind.
pub fn decode(call: Syscall, tid: i32, pid: i32, last_now: u64) -> Option<Action> {
    let a = call.args;
    let einval = Action::Answer(-(libc::EINVAL as i64));
    Some(match call.nr {
        libc::SYS_kill => Action::Kill { pid: Some(a[0] as i32), signal: a[1] as i32 },
        libc::SYS_tgkill => to_thread(tid, Some(a[0] as i32), a[1] as i32, a[2] as i32),
        libc::SYS_tkill => to_thread(tid, None, a[0] as i32, a[1] as i32),
        libc::SYS_pause => match remote::signal_mask(tid) {
            Ok(mask) => suspend(mask),
            Err(_) => Action::Run,
        },
        libc::SYS_rt_sigsuspend if a[1] != KERNEL_SIGSET_BYTES => einval,
        libc::SYS_rt_sigsuspend => match read_set(pid, a[0]) {
            Ok(mask) => suspend(mask),
            Err(e) => Action::Answer(e),
        },
        libc::SYS_rt_sigtimedwait if a[3] != KERNEL_SIGSET_BYTES => einval,
        libc::SYS_rt_sigtimedwait => {
            let set = match read_set(pid, a[0]) {
                Ok(set) => set & !bit(libc::SIGSYS),
                Err(e) => return Some(Action::Answer(e)),
            };
            let deadline = match super::calls::timespec_arg(pid, a[2]) {
                // A zero timeout only looks: it never blocks.
                Ok(Some(0)) => return Some(Action::Run),
                Ok(Some(ns)) => last_now.saturating_add(ns),
                Ok(None) => NO_DEADLINE,
                Err(e) => return Some(Action::Answer(e)),
            };
            Action::Post(Request::SigWait { set, deadline: Deadline::from_ns(deadline) }, Then::SigWait { set })
        }
        _ => return None,
    })
}

/// The signals a `ppoll`, `pselect6`, `epoll_pwait` or `epoll_pwait2` of process `pid` waits under (its mask argument), if it
/// gives one: the scheduler counts a pending signal that mask lets through as ending the wait,
/// as the kernel applies it while the call sleeps (the preload's `WaitMask`).
pub fn wait_mask(call: Syscall, pid: i32) -> Option<u64> {
    let a = call.args;
    let set = match call.nr {
        libc::SYS_ppoll if a[4] == KERNEL_SIGSET_BYTES => a[3],
        libc::SYS_epoll_pwait | libc::SYS_epoll_pwait2 if a[5] == KERNEL_SIGSET_BYTES => a[4],
        libc::SYS_pselect6 => pselect_mask_pointer(pid, a[5])?,
        _ => return None,
    };
    (set != 0).then(|| read_set(pid, set).ok()).flatten()
}

/// Whether a signal may end `request` while it is parked (the model's `signals.rs`: waits for
/// readiness, receives, sends, connects and accepts, sleeps, futex, semaphore, condition and
/// child waits, signal waits), so that the scheduler needs the mask it waits under. Any other
/// post (a probe, a yield, a clock read: most of them) leaves "all blocked" and costs no
/// `PTRACE_GETSIGMASK` (about 3 µs a post on `lock_pingpong`, 7% of its run).
pub fn may_be_interrupted(request: &Request) -> bool {
    matches!(
        request,
        Request::NetPoll { .. }
            | Request::NetEpollWait { .. }
            | Request::NetRecv { .. }
            | Request::NetSend { .. }
            | Request::NetAccept { .. }
            | Request::NetConnect { .. }
            | Request::FifoOpen { .. }
            | Request::Sleep { .. }
            | Request::FutexWait { .. }
            | Request::SemWait { .. }
            | Request::CondWait { .. }
            | Request::ProcessWait { .. }
            | Request::SigSuspend { .. }
            | Request::SigWait { .. }
    )
}

/// The sigset pointer inside `pselect6`'s sixth argument (a `{ const sigset_t *ss; size_t len }`
/// at `addr`); None for none or one that cannot be read.
pub fn pselect_mask_pointer(pid: i32, addr: u64) -> Option<u64> {
    let mut arg = [0u8; 16];
    if addr == 0 || remote::read(pid, addr, &mut arg).is_err() {
        return None;
    }
    let set = u64::from_le_bytes(arg[..8].try_into().expect("8 bytes"));
    let len = u64::from_le_bytes(arg[8..].try_into().expect("8 bytes"));
    (set != 0 && len == KERNEL_SIGSET_BYTES).then_some(set)
}

/// A wait for a signal under `mask` (`sigsuspend`'s, or the thread's own for `pause`).
fn suspend(mask: u64) -> Action {
    let mask = mask & !bit(libc::SIGSYS);
    Action::Post(Request::SigSuspend { mask }, Then::SigSuspend { mask })
}

/// A `tgkill(tgid, target, sig)` (`tgid` None: a `tkill`, within the caller's process) by thread
/// `tid`: posted as a kill of the process, as the preload's `trapped_tgkill` posts it, when the
/// signal is SIGKILL (which ends the whole process) or one the process catches sent to another
/// of its threads (Go's preemption signal, SIGURG, `pthread_kill`): that thread may be parked in
/// a wait the signal ends, and the scheduler looks at pending signals after a kill. Anything
/// else (a thread raising a signal at itself: `abort`, `raise`) runs as it is.
fn to_thread(tid: i32, tgid: Option<i32>, target: i32, sig: i32) -> Action {
    let Some((caught, own_tid)) = thread_status(tid) else { return Action::Run };
    let caught_here = (1..=64).contains(&sig) && caught & bit(sig) != 0;
    if sig == libc::SIGKILL || caught_here && target != own_tid {
        Action::Kill { pid: tgid, signal: sig }
    } else {
        Action::Run
    }
}

/// The signals thread `tid`'s process catches (`SigCgt`) and the thread's id as the program
/// sees it (the last of `NStid`: inside dara's PID namespace, when the execution has one).
fn thread_status(tid: i32) -> Option<(u64, i32)> {
    let status = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    let field = |key: &str| status.lines().find_map(|l| l.strip_prefix(key)).map(str::trim);
    let caught = u64::from_str_radix(field("SigCgt:")?, 16).ok()?;
    let own = field("NStid:").and_then(|v| v.split_whitespace().last()).and_then(|v| v.parse().ok()).unwrap_or(tid);
    Some((caught, own))
}

/// The kernel signal set (8 bytes) at `addr` of process `pid`; `Err(-EFAULT)`.
fn read_set(pid: i32, addr: u64) -> Result<u64, i64> {
    let mut set = [0u8; 8];
    remote::read(pid, addr, &mut set).map_err(|_| -(libc::EFAULT as i64))?;
    Ok(u64::from_le_bytes(set))
}

/// How a signal wait the scheduler granted goes on (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// Made for real: it returns at once.
    Run,
    /// Answered without running it.
    Return(i64),
}

/// A `sigsuspend`/`pause` under `mask` granted: run, if a caught signal the mask lets through
/// is pending for thread `tid` of `pid`.
pub fn suspend_granted(pid: i32, tid: i32, mask: u64) -> Ending {
    match crate::procfs::signals(pid as u32, tid as u32) {
        Some(s) if s.pending & s.caught & !mask & !SYNCHRONOUS != 0 => Ending::Run,
        _ => Ending::Return(-(libc::EINTR as i64)),
    }
}

/// A `sigtimedwait` for `set` granted `result`: timed out (`-EAGAIN`), takes a pending signal
/// of its set for real, or was ended by a handler's signal (EINTR).
pub fn wait_granted(pid: i32, tid: i32, set: u64, result: i64) -> Ending {
    if result == -(libc::EAGAIN as i64) {
        return Ending::Return(result);
    }
    match crate::procfs::signals(pid as u32, tid as u32) {
        Some(s) if s.pending & set != 0 => Ending::Run,
        _ => Ending::Return(-(libc::EINTR as i64)),
    }
}

/// A sender waiting for the death of the process its signal ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeathWait {
    /// The process's kernel pid.
    pub target: i32,
    /// The sender is stopped at its `kill`'s exit (else the call has not returned yet).
    pub at_exit: bool,
}

impl Agent {
    /// A `kill` granted with `result`, the number of processes the scheduler says its signal
    /// ends. Sent for real; when it ends one other process the agent runs, the sender stops at
    /// the call's exit and waits there until that process is gone, as the preload's sender waits
    /// (so the SIGCHLD that follows reaches its parent at the same point of every run, and the
    /// scheduler, which waits for a killed process to go, is not left waiting).
    pub(super) fn kill_granted(&mut self, tid: i32, regs: Registers, result: i64) {
        let sender = &self.tracees[&tid];
        let named = regs.syscall().args[0] as i32;
        let is_kill = sender.stop == CallStop::Seccomp && regs.syscall().nr == libc::SYS_kill;
        let target = (is_kill && result == 1 && named > 0)
            .then(|| self.logical_process(named as u32))
            .flatten()
            .and_then(|process| self.tracees.values().find(|t| t.process == process).map(|t| t.pid))
            .filter(|&pid| pid != sender.pid);
        match target {
            Some(target) => {
                self.tracees.get_mut(&tid).expect("granted tracee").awaits_death = Some(DeathWait { target, at_exit: false });
                resume_to_exit(tid);
            }
            None => self.run_call(tid, regs),
        }
    }

    /// At a call's exit: true if it was a `kill` whose sender waits for its target's death (it
    /// stays stopped until [`Agent::deaths_seen`] lets it go). The target's threads the agent
    /// holds parked are let go first, to take the signal: a ptrace stop holds a pending signal
    /// (SIGKILL aside) until the tracee runs.
    pub(super) fn kill_returned(&mut self, tid: i32) -> bool {
        let Some(wait) = self.tracees.get_mut(&tid).and_then(|t| t.awaits_death.as_mut()) else { return false };
        wait.at_exit = true;
        let target = wait.target;
        let parked: Vec<(i32, Then, CallStop)> = self.tracees.iter().filter(|(_, t)| t.pid == target).filter_map(|(&t, tracee)| Some((t, tracee.parked?, tracee.stop))).collect();
        for (thread, then, stop) in parked {
            let at_call = !matches!(then, Then::StepOver { .. } | Then::Started | Then::Clock(ClockAnswer::Counter(_)));
            if at_call && stop == CallStop::Seccomp {
                // Skipped, so that no call runs before the signal is delivered on the way out.
                if let Ok(mut regs) = Registers::read(thread) {
                    let _ = regs.skip_with(-(libc::EINTR as i64));
                }
            }
            resume(thread, 0);
        }
        self.deaths_seen();
        true
    }

    /// Lets a parked tracee take a pending signal that ends its process (not caught, ignored or
    /// blocked, terminating by default: a Ctrl-C dara passes on to `busybox httpd` waiting in
    /// `accept`). A ptrace stop holds it pending until the tracee runs, where the preload's
    /// parked thread dies of it at once; so the tracee's call is skipped (`EINTR`, never run) and
    /// the tracee resumed: the signal is delivered on the way out and the process ends, as a
    /// process killed while parked does. One thread per process is enough.
    pub(super) fn let_fatal_signals_in(&mut self) {
        let mut ended = Vec::new();
        let doomed: Vec<(i32, Then, CallStop)> = self
            .tracees
            .iter()
            .filter(|(_, t)| t.parked.is_some() && t.awaits_death.is_none())
            .filter(|(&tid, t)| fatal_pending(t.pid, tid))
            .filter(|(_, t)| !ended.contains(&t.pid) && {
                ended.push(t.pid);
                true
            })
            .filter_map(|(&tid, t)| Some((tid, t.parked?, t.stop)))
            .collect();
        for (tid, then, stop) in doomed {
            let at_call = !matches!(then, Then::StepOver { .. } | Then::Started | Then::Clock(ClockAnswer::Counter(_)));
            if at_call && stop == CallStop::Seccomp {
                if let Ok(mut regs) = Registers::read(tid) {
                    let _ = regs.skip_with(-(libc::EINTR as i64));
                }
            }
            resume(tid, 0);
        }
    }

    /// Lets go the senders waiting at their `kill`'s exit whose target has no thread left.
    pub(super) fn deaths_seen(&mut self) {
        let waiting: Vec<(i32, i32)> = self.tracees.iter().filter_map(|(&tid, t)| t.awaits_death.filter(|w| w.at_exit).map(|w| (tid, w.target))).collect();
        for (tid, target) in waiting {
            if !self.tracees.values().any(|t| t.pid == target) {
                self.tracees.get_mut(&tid).expect("listed above").awaits_death = None;
                resume(tid, 0);
            }
        }
    }
}

/// Signals whose default action does not end the process, and those dara's traps use.
const NOT_FATAL: [i32; 10] = [libc::SIGCHLD, libc::SIGCONT, libc::SIGURG, libc::SIGWINCH, libc::SIGSTOP, libc::SIGTSTP, libc::SIGTTIN, libc::SIGTTOU, libc::SIGSYS, libc::SIGTRAP];

/// Whether thread `tid` of `pid` has a signal pending (for it or its process) that ends the
/// process when delivered: not caught, ignored or blocked, terminating by default.
fn fatal_pending(pid: i32, tid: i32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status")) else { return false };
    let mask = |key: &str| status.lines().find_map(|l| l.strip_prefix(key)).and_then(|v| u64::from_str_radix(v.trim(), 16).ok()).unwrap_or(0);
    let harmless = NOT_FATAL.iter().fold(0, |all, &sig| all | bit(sig));
    let pending = (mask("SigPnd:") | mask("ShdPnd:")) & !(mask("SigBlk:") | mask("SigIgn:") | mask("SigCgt:") | harmless);
    pending != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(nr: i64, args: [u64; 6]) -> Syscall {
        Syscall { nr, args }
    }

    #[test]
    fn a_sigsuspend_posts_its_mask_without_sigsys_and_a_sigtimedwait_its_set_and_deadline() {
        let (pid, tid) = (std::process::id() as i32, std::process::id() as i32);
        let mask: u64 = !bit(libc::SIGUSR1);
        let Some(Action::Post(Request::SigSuspend { mask: posted }, Then::SigSuspend { .. })) = decode(call(libc::SYS_rt_sigsuspend, [&mask as *const u64 as u64, 8, 0, 0, 0, 0]), tid, pid, 0) else { panic!("not a sigsuspend") };
        assert_eq!(posted, !bit(libc::SIGUSR1) & !bit(libc::SIGSYS));
        assert_eq!(decode(call(libc::SYS_rt_sigsuspend, [&mask as *const u64 as u64, 16, 0, 0, 0, 0]), tid, pid, 0), Some(Action::Answer(-(libc::EINVAL as i64))));
        let set = bit(libc::SIGUSR2);
        let timeout = libc::timespec { tv_sec: 1, tv_nsec: 0 };
        let args = [&set as *const u64 as u64, 0, &timeout as *const libc::timespec as u64, 8, 0, 0];
        let Some(Action::Post(Request::SigWait { set: posted, deadline }, Then::SigWait { .. })) = decode(call(libc::SYS_rt_sigtimedwait, args), tid, pid, 500) else { panic!("not a sigwait") };
        assert_eq!((posted, deadline.to_ns()), (set, 1_000_000_500));
        let zero = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        let args = [&set as *const u64 as u64, 0, &zero as *const libc::timespec as u64, 8, 0, 0];
        assert_eq!(decode(call(libc::SYS_rt_sigtimedwait, args), tid, pid, 0), Some(Action::Run), "a zero timeout never blocks");
    }

    #[test]
    fn a_signal_the_process_does_not_catch_raised_at_itself_is_no_scheduling_point() {
        let tid = std::process::id() as i32;
        // The test harness catches neither SIGUSR2 nor SIGWINCH.
        assert_eq!(decode(call(libc::SYS_tgkill, [tid as u64, tid as u64, libc::SIGWINCH as u64, 0, 0, 0]), tid, tid, 0), Some(Action::Run));
        assert_eq!(decode(call(libc::SYS_tgkill, [tid as u64, 1, libc::SIGKILL as u64, 0, 0, 0]), tid, tid, 0), Some(Action::Kill { pid: Some(tid), signal: libc::SIGKILL }));
        assert_eq!(decode(call(libc::SYS_kill, [7, libc::SIGTERM as u64, 0, 0, 0, 0]), tid, tid, 0), Some(Action::Kill { pid: Some(7), signal: libc::SIGTERM }));
    }
}
