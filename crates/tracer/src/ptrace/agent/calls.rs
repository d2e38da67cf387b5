//! What a system call a tracee stopped in means to dara: run it, answer it on the spot, or post a
//! [`Request`] and finish it once the scheduler grants it ([`Then`]). The same requests, with the
//! same arguments, as the preload's SIGSYS handler posts for the same calls
//! (crates/preload/src/trapped.rs), so the scheduler cannot tell the two paths apart.
//!
//! Pure apart from reading the program's arguments (timeouts) from its memory: no ptrace here.
use dara_abi::clock::{self, ClockBase};
use dara_abi::wait_call::WaitCall;
use dara_abi::{Addr, Deadline, FutexMatch, NetFlags, Request, Unsupported, NO_DEADLINE};

use crate::ptrace::remote::{self, Syscall};

/// What to do with a call.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Action {
    /// Let it run for real, no scheduling point (its effect is private or deterministic).
    Run,
    /// Return this without running it.
    Answer(i64),
    /// A clock read: answered from the thread's last grant (coarse steps) or posted.
    Clock(ClockAnswer),
    /// Fill `len` bytes at `addr` from the process's entropy stream (`getrandom`, a `read` of
    /// /dev/urandom or /dev/random).
    Random { addr: u64, len: u64 },
    /// Fill the buffers of the `count` iovecs at `iov` from the stream (a `readv` of a random
    /// device).
    RandomVector { iov: u64, count: u64 },
    /// Write the CPU set dara shows (`sched_getaffinity`).
    Affinity { addr: u64, size: u64 },
    /// A scheduling point.
    Post(Request, Then),
    /// A `wait4`/`waitid`: posted as `ProcessWait` once its pid is named by logical process.
    Wait(WaitCall),
    /// An `execve` of the program whose path is at `path`: followed when the agent can run it.
    Exec { path: u64 },
    /// `listen`: a listener outside peers may reach is split (`agent/listeners.rs`).
    Listen { fd: i32, backlog: i32 },
    /// `bind`: a UDP socket outside peers may reach is split (`agent/listeners.rs`).
    Bind { fd: i32 },
    /// `getsockname`: a split listener shows its public port.
    LocalName { fd: i32, addr: u64 },
    /// `getpeername`: a connection dara relays for an outside client shows that client.
    PeerName,
    /// A signal sent to process `pid` as the program names it (None: the sender's own), posted
    /// as `ProcessKill` once the pid is named by logical process (`agent/signals.rs`).
    Kill { pid: Option<i32>, signal: i32 },
}

/// How to finish a posted call once it is granted.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Then {
    /// Return the grant's result without running the call (futex, yield).
    Return,
    /// A sleep: 0, or -EINTR when a signal ended it.
    Slept,
    /// Run the call for real (an exit).
    Run,
    /// A thread's or process's first post was granted: it starts (a fresh program image gets
    /// its `AT_RANDOM` bytes and loses its vDSO first).
    Started,
    /// Answer a clock read from the grant's time.
    Clock(ClockAnswer),
    /// The grant allows a thread: claim its slot, then run the real `clone`.
    CreateThread,
    /// The grant allows a process: claim it, then run the real call (a `vfork` made a fork).
    CreateProcess { vfork: Vfork },
    /// The thread's last call: run it; its slot is finished once the thread is gone.
    ExitThread,
    /// A probe at `addr` was granted: step its instruction with the original byte back.
    StepOver { addr: u64 },
    /// The wake of a thread's cleared tid word (see `Agent::exit_thread`) was granted: the
    /// thread posts its exit next.
    WokeJoiners,
    /// A receive (or accept) granted with the bytes the scheduler saw queued: run it, taking at
    /// most that many when `len_arg` names its length argument (a socket's single-buffer read).
    /// `timed`: it waited with the socket's `SO_RCVTIMEO`, and a grant of `EAGAIN` is that
    /// timeout firing: answered, not run. `into`: the buffer of a receive that takes its whole
    /// grant (`agent/whole_grant.rs`).
    Receive { len_arg: Option<usize>, timed: bool, into: Option<u64> },
    /// A send granted with the most bytes it may move (see `dara_abi::request::STREAM_SEND_MOST`):
    /// run it, cut to that many when `len_arg` names its length argument (a single-buffer send
    /// on a non-blocking socket, whose caller takes a short write; a blocking caller's is not
    /// cut).
    Send { len_arg: Option<usize> },
    /// A split listener's `NetListen` was granted: the twin takes the program's descriptor.
    SwapTwin { fd: i32, twin: i32, cloexec: bool },
    /// A wait for readiness: run the call with a zero timeout (argument `timeout_arg` set to 0,
    /// or to a zeroed `timespec` when `timespec`) and look at its result; a blocking call that
    /// finds nothing posts again.
    ReadyWait { timeout_arg: usize, blocking: bool, timespec: bool },
    /// A `select`/`pselect6` granted (`agent/select.rs`): run as a `poll` of its entries with
    /// a zero timeout, and its sets written back from what that found.
    Select(super::select::SelectCall),
    /// An `execve` was granted: claim the new image's slot and run the call (its exec stop
    /// starts the new image; a failure gives the slot back).
    Exec,
    /// A wait for a child granted with the logical process to collect (1-based; 0: none exited,
    /// for `WNOHANG`; negative: an error).
    Collect(WaitCall),
    /// A `kill`/`tgkill`/`tkill` granted: sent for real.
    Kill,
    /// A `sigsuspend`/`pause` under `mask` ended by a signal (`agent/signals.rs`).
    SigSuspend { mask: u64 },
    /// A `sigtimedwait` for `set` ended by a signal or its timeout (`agent/signals.rs`).
    SigWait { set: u64 },
    /// A wait of a `sendfile`/`splice`/`tee` on a stream was granted (`agent/transfer.rs`).
    Transfer(super::transfer::Step),
}

/// How a vfork-like call is made a fork: a thread parked in the kernel until its child execs
/// would stop the whole system, so the parent goes on (the child has its own copy).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Vfork {
    No,
    /// `vfork()`: made `fork()`.
    Call,
    /// `clone(CLONE_VM | CLONE_VFORK, ...)`: both flags dropped.
    CloneFlags,
}

/// Where a clock read's answer goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClockAnswer {
    /// `clock_gettime`: a timespec at `addr`.
    Timespec { base: ClockBase, addr: u64 },
    /// `gettimeofday`: a timeval at `tv`, a zeroed timezone at `tz` (either may be null).
    Timeval { tv: u64, tz: u64 },
    /// `time`: seconds returned and stored at `addr` (may be null).
    Seconds { addr: u64 },
    /// `rdtsc`/`rdtscp` (faulting under `PR_TSC_SIGSEGV`): the counter in edx:eax (and the
    /// CPU in ecx), the instruction stepped over. Ticks once per virtual nanosecond and reads
    /// like CLOCK_MONOTONIC, as the preload's counter does.
    Counter(dara_abi::counter::CounterRead),
}

/// The errno of a call dara refuses, as a negative result.
const fn errno(e: i32) -> i64 {
    -(e as i64)
}

/// What call `call` of a process that reads its clocks on `last_now` (the thread's last grant's
/// virtual time) and an epoch of `epoch_ns` means; reads timeouts from process `pid`.
pub fn decode(call: Syscall, pid: i32, last_now: u64, epoch_ns: u64) -> Action {
    let a = call.args;
    let after = |d: u64| Deadline::from_ns(last_now.saturating_add(d));
    match call.nr {
        libc::SYS_futex => futex(a, pid, last_now, epoch_ns),
        libc::SYS_sched_yield => Action::Post(Request::Yield, Then::Return),
        libc::SYS_nanosleep => match timespec_arg(pid, a[0]) {
            Ok(Some(d)) => Action::Post(Request::Sleep { deadline: after(d) }, Then::Slept),
            Ok(None) => Action::Answer(errno(libc::EFAULT)),
            Err(e) => Action::Answer(e),
        },
        libc::SYS_clock_nanosleep => {
            let Some(base) = ClockBase::of(a[0] as i32) else { return Action::Run };
            match timespec_arg(pid, a[2]) {
                Ok(Some(t)) if a[1] as i32 & libc::TIMER_ABSTIME != 0 => Action::Post(Request::Sleep { deadline: Deadline::from_ns(base.virtual_time_of(t, epoch_ns)) }, Then::Slept),
                Ok(Some(d)) => Action::Post(Request::Sleep { deadline: after(d) }, Then::Slept),
                Ok(None) => Action::Answer(errno(libc::EFAULT)),
                Err(e) => Action::Answer(e),
            }
        }
        libc::SYS_clock_gettime => match ClockBase::of(a[0] as i32) {
            Some(base) => Action::Clock(ClockAnswer::Timespec { base, addr: a[1] }),
            None => Action::Run,
        },
        libc::SYS_gettimeofday => Action::Clock(ClockAnswer::Timeval { tv: a[0], tz: a[1] }),
        libc::SYS_time => Action::Clock(ClockAnswer::Seconds { addr: a[0] }),
        libc::SYS_clock_getres => match ClockBase::of(a[0] as i32) {
            // Every virtual clock moves in nanoseconds.
            Some(_) if a[1] != 0 => match remote::write_pair(pid, a[1], (0, 1)) {
                Ok(()) => Action::Answer(0),
                Err(_) => Action::Answer(errno(libc::EFAULT)),
            },
            Some(_) => Action::Answer(0),
            None => Action::Run,
        },
        libc::SYS_getcpu => {
            // CPU 0, node 0, as the preload answers.
            for addr in [a[0], a[1]].into_iter().filter(|&p| p != 0) {
                if remote::write(pid, addr, &0u32.to_le_bytes()).is_err() {
                    return Action::Answer(errno(libc::EFAULT));
                }
            }
            Action::Answer(0)
        }
        libc::SYS_getrandom => Action::Random { addr: a[0], len: a[1] },
        libc::SYS_sched_getaffinity => Action::Affinity { addr: a[2], size: a[1] },
        libc::SYS_clone => {
            let flags = a[0];
            if flags & libc::CLONE_THREAD as u64 != 0 {
                Action::Post(Request::ThreadCreate, Then::CreateThread)
            } else {
                let vforks = flags & (libc::CLONE_VM | libc::CLONE_VFORK) as u64 != 0;
                Action::Post(Request::ProcessFork, Then::CreateProcess { vfork: if vforks { Vfork::CloneFlags } else { Vfork::No } })
            }
        }
        libc::SYS_fork => Action::Post(Request::ProcessFork, Then::CreateProcess { vfork: Vfork::No }),
        libc::SYS_vfork => Action::Post(Request::ProcessFork, Then::CreateProcess { vfork: Vfork::Call }),
        // glibc falls back to clone, whose flags sit in a register; Go 1.19 never uses clone3.
        libc::SYS_clone3 => Action::Answer(errno(libc::ENOSYS)),
        // As a kernel built without io_uring and native AIO answers (docs/limits.md,
        // "Asynchronous I/O in the kernel").
        libc::SYS_io_uring_setup | libc::SYS_io_setup => Action::Answer(errno(libc::ENOSYS)),
        libc::SYS_exit => Action::Post(Request::ThreadExit, Then::ExitThread),
        libc::SYS_exit_group => Action::Post(Request::ProcessExit { status: a[0] as i32 }, Then::Run),
        libc::SYS_epoll_wait | libc::SYS_epoll_pwait => epoll_wait(a[0] as i32, Timeout::of_ms(a[3] as i32), 3, false, last_now),
        libc::SYS_epoll_pwait2 => match Timeout::of_timespec(pid, a[3]) {
            Ok(timeout) => epoll_wait(a[0] as i32, timeout, 3, true, last_now),
            Err(e) => Action::Answer(e),
        },
        libc::SYS_poll => poll(a, Timeout::of_ms(a[2] as i32), false, last_now),
        libc::SYS_ppoll => match Timeout::of_timespec(pid, a[2]) {
            Ok(timeout) => poll(a, timeout, true, last_now),
            Err(e) => Action::Answer(e),
        },
        libc::SYS_execve => Action::Exec { path: a[0] },
        libc::SYS_wait4 | libc::SYS_waitid => match WaitCall::of(call.nr == libc::SYS_waitid, a) {
            Some(wait) => Action::Wait(wait),
            None => Action::Post(Request::Unsupported(Unsupported::Syscall { nr: call.nr as u64, args: [a[0], a[1], a[2]] }), Then::Return),
        },
        libc::SYS_listen => Action::Listen { fd: a[0] as i32, backlog: a[1] as i32 },
        libc::SYS_bind => Action::Bind { fd: a[0] as i32 },
        libc::SYS_getsockname => Action::LocalName { fd: a[0] as i32, addr: a[1] },
        libc::SYS_getpeername => Action::PeerName,
        // Waits dara models for the preload but not yet on this path, and anything else in the
        // filter: the run stops and names the call.
        nr => Action::Post(Request::Unsupported(Unsupported::Syscall { nr: nr as u64, args: [a[0], a[1], a[2]] }), Then::Return),
    }
}

/// How long a wait for readiness may block, as the program gave it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Timeout {
    Forever,
    /// Zero: the call must not block.
    Never,
    After(u64),
}

impl Timeout {
    /// A timeout in milliseconds (`poll`, `epoll_wait`): negative waits forever.
    fn of_ms(ms: i32) -> Timeout {
        match ms {
            ms if ms < 0 => Timeout::Forever,
            0 => Timeout::Never,
            ms => Timeout::After(ms as u64 * 1_000_000),
        }
    }

    /// A `timespec` timeout (`ppoll`, `epoll_pwait2`): null waits forever; `Err(-errno)`.
    pub(super) fn of_timespec(pid: i32, addr: u64) -> Result<Timeout, i64> {
        timespec_arg(pid, addr).map(Timeout::of_ns)
    }

    /// A timeout in nanoseconds, `None` for none (a null pointer): waits forever.
    pub(super) fn of_ns(ns: Option<u64>) -> Timeout {
        match ns {
            None => Timeout::Forever,
            Some(0) => Timeout::Never,
            Some(ns) => Timeout::After(ns),
        }
    }

    /// The request's deadline (none for a call that must not block, which is always enabled)
    /// and flags.
    pub(super) fn deadline_and_flags(self, last_now: u64) -> (Deadline, NetFlags) {
        match self {
            Timeout::Forever => (Deadline::from_ns(NO_DEADLINE), NetFlags(0)),
            Timeout::Never => (Deadline::from_ns(NO_DEADLINE), NetFlags(dara_abi::net_flags::NONBLOCK)),
            Timeout::After(ns) => (Deadline::from_ns(last_now.saturating_add(ns)), NetFlags(0)),
        }
    }
}

/// `epoll_wait`/`epoll_pwait`/`epoll_pwait2` on `epoll`, its timeout in argument `timeout_arg`.
fn epoll_wait(epoll: i32, timeout: Timeout, timeout_arg: usize, timespec: bool, last_now: u64) -> Action {
    let (deadline, flags) = timeout.deadline_and_flags(last_now);
    Action::Post(Request::NetEpollWait { epoll, deadline, flags }, Then::ReadyWait { timeout_arg, blocking: timeout != Timeout::Never, timespec })
}

/// `poll`/`ppoll` of the `pollfd`s at `a[0]`, `a[1]` of them; the timeout is argument 2.
fn poll(a: [u64; 6], timeout: Timeout, timespec: bool, last_now: u64) -> Action {
    let (deadline, flags) = timeout.deadline_and_flags(last_now);
    Action::Post(Request::NetPoll { fds: Addr(a[0]), count: a[1], deadline, flags }, Then::ReadyWait { timeout_arg: 2, blocking: timeout != Timeout::Never, timespec })
}

/// `futex`: waits and wakes as the preload posts them; other commands are refused.
fn futex(a: [u64; 6], pid: i32, last_now: u64, epoch_ns: u64) -> Action {
    let op = a[1] as i32;
    let cmd = op & !(libc::FUTEX_PRIVATE_FLAG | libc::FUTEX_CLOCK_REALTIME);
    let addr = Addr(a[0]);
    match cmd {
        libc::FUTEX_WAIT | libc::FUTEX_WAIT_BITSET => {
            let timeout = match timespec_arg(pid, a[3]) {
                Ok(t) => t,
                Err(e) => return Action::Answer(e),
            };
            let deadline = match (cmd, timeout) {
                (_, None) => NO_DEADLINE,
                (libc::FUTEX_WAIT, Some(d)) => last_now.saturating_add(d),
                (_, Some(t)) => {
                    let base = if op & libc::FUTEX_CLOCK_REALTIME != 0 { ClockBase::Realtime } else { ClockBase::Monotonic };
                    base.virtual_time_of(t, epoch_ns)
                }
            };
            let matching = FutexMatch::of_call(op, cmd == libc::FUTEX_WAIT, a[5]);
            if matching.bitset == 0 {
                return Action::Answer(errno(libc::EINVAL));
            }
            Action::Post(Request::FutexWait { addr, expected: a[2] as u32, deadline: Deadline::from_ns(deadline), matching }, Then::Return)
        }
        libc::FUTEX_WAKE | libc::FUTEX_WAKE_BITSET => {
            let matching = FutexMatch::of_call(op, cmd == libc::FUTEX_WAKE, a[5]);
            Action::Post(Request::FutexWake { addr, count: a[2] as u32, matching }, Then::Return)
        }
        _ => Action::Post(Request::Unsupported(Unsupported::Syscall { nr: libc::SYS_futex as u64, args: [a[0], a[1], a[2]] }), Then::Return),
    }
}

/// A `timespec` argument as nanoseconds (`None` for null); `Err(-errno)` for a bad one.
pub(super) fn timespec_arg(pid: i32, addr: u64) -> Result<Option<u64>, i64> {
    match remote::read_timespec(pid, addr) {
        Ok(None) => Ok(None),
        Ok(Some((sec, nsec))) => clock::timespec_ns(sec, nsec).map(Some).ok_or(errno(libc::EINVAL)),
        Err(_) => Err(errno(libc::EFAULT)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(nr: i64, args: [u64; 6]) -> Syscall {
        Syscall { nr, args }
    }

    #[test]
    fn thread_and_process_creation_are_told_apart_by_the_clone_flags() {
        let pid = std::process::id() as i32;
        let thread = (libc::CLONE_VM | libc::CLONE_THREAD | libc::CLONE_SIGHAND) as u64;
        assert_eq!(decode(call(libc::SYS_clone, [thread, 0, 0, 0, 0, 0]), pid, 0, 0), Action::Post(Request::ThreadCreate, Then::CreateThread));
        assert_eq!(decode(call(libc::SYS_clone, [libc::SIGCHLD as u64, 0, 0, 0, 0, 0]), pid, 0, 0), Action::Post(Request::ProcessFork, Then::CreateProcess { vfork: Vfork::No }));
        let go_exec = (libc::CLONE_VM | libc::CLONE_VFORK) as u64 | libc::SIGCHLD as u64;
        assert_eq!(decode(call(libc::SYS_clone, [go_exec, 0, 0, 0, 0, 0]), pid, 0, 0), Action::Post(Request::ProcessFork, Then::CreateProcess { vfork: Vfork::CloneFlags }));
    }

    #[test]
    fn a_relative_futex_timeout_counts_from_the_last_grant() {
        let pid = std::process::id() as i32;
        let timeout = libc::timespec { tv_sec: 2, tv_nsec: 5 };
        let word = 0u32;
        let args = [&word as *const u32 as u64, (libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG) as u64, 7, &timeout as *const libc::timespec as u64, 0, 0];
        let Action::Post(Request::FutexWait { expected, deadline, matching, .. }, Then::Return) = decode(call(libc::SYS_futex, args), pid, 1_000, 0) else { panic!("not a futex wait") };
        assert_eq!((expected, deadline.to_ns(), matching.shared), (7, 1_000 + 2_000_000_005, false));
    }

    #[test]
    fn calls_dara_cannot_model_yet_are_named_not_run() {
        let pid = std::process::id() as i32;
        let Action::Post(Request::Unsupported(Unsupported::Syscall { nr, .. }), _) = decode(call(libc::SYS_futex_waitv, [0; 6]), pid, 0, 0) else { panic!("not refused") };
        assert_eq!(nr, libc::SYS_futex_waitv as u64);
    }
}
