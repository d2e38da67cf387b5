//! What a thread asks for at a scheduling point, as a typed value: one [`Request`] variant per
//! [`Op`] the preload posts, with named fields of meaningful types.
//!
//! A slot still carries an op word and four `u64` argument words (the layout of [`crate::Slot`]
//! is unchanged); [`Request::encode`] is the only place that packs them and [`Request::decode`]
//! the only place that unpacks them. The preload posts through `encode`; the scheduler decodes
//! once where it reads a posted slot and carries the `Request` from there. A word that does not
//! decode (an unknown start kind, a mutex kind glibc never has, a slot or count past 32 bits) is a
//! [`DecodeError`] naming the op and the field, which ends the execution fail-closed.
//!
//! Words a variant does not use are written as 0 and ignored when read. Addresses are the
//! target's virtual addresses; times are virtual nanoseconds (`v`, not wall-clock).

use crate::{net_flags, FutexMatch, Op, UNSUPPORTED_GRANT_STALLED, UNSUPPORTED_STATIC_EXEC};

mod args;
pub use args::{Addr, CloseHow, Deadline, FileLockKind, HeldKind, MutexKind, NetFlags, ProcessTarget, StartKind, TimerClock, TimerExpiry, Unsupported, WaitOptions};

/// A posted operation with its arguments. Fields are listed in their encoding's word order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Request {
    /// First post of a process's main thread (see [`Op::ProcessStart`]).
    ProcessStart {
        /// The forking parent's logical process (a [`StartKind::Fork`]); encoded as `u64::MAX`
        /// when `None`.
        parent: Option<u32>,
        kind: StartKind,
    },
    /// First post of a new thread, before its start routine runs.
    ThreadStart { creator: u32 },
    ThreadCreate,
    ThreadExit,
    /// `pthread_join` of the thread in slot `target`.
    ThreadJoin { target: u32 },
    /// `pthread_detach` of the thread in slot `target`.
    ThreadDetach { target: u32 },
    /// `exit`/`_exit`/`exit_group` with `status`.
    ProcessExit { status: i32 },

    MutexLock { mutex: Addr, kind: MutexKind, deadline: Deadline },
    MutexTryLock { mutex: Addr, kind: MutexKind },
    MutexUnlock { mutex: Addr, kind: MutexKind },

    RwReadLock { lock: Addr, deadline: Deadline },
    RwWriteLock { lock: Addr, deadline: Deadline },
    RwTryReadLock { lock: Addr },
    RwTryWriteLock { lock: Addr },
    RwUnlock { lock: Addr },
    /// A lock the thread took without a post (see [`Op::Held`]), `depth` times (a recursive
    /// mutex or a read lock); `mutex_kind` is `Normal` for a rwlock.
    Held { lock: Addr, what: HeldKind, depth: u64, mutex_kind: MutexKind },

    /// The preload has already released the real mutex (see [`Op::CondWait`]).
    CondWait { cond: Addr, mutex: Addr, deadline: Deadline, mutex_kind: MutexKind },
    CondSignal { cond: Addr },
    CondBroadcast { cond: Addr },

    BarrierInit { barrier: Addr, count: u32 },
    BarrierWait { barrier: Addr },

    /// `pthread_once` entry; result 1: the caller runs the init routine, then posts `OnceDone`.
    OnceBegin { once: Addr },
    OnceDone { once: Addr },

    SemInit { sem: Addr, value: u32 },
    SemWait { sem: Addr, deadline: Deadline },
    SemTryWait { sem: Addr },
    SemPost { sem: Addr },

    /// Raw futex wait on the 32-bit word at `addr` while it holds `expected`.
    FutexWait { addr: Addr, expected: u32, deadline: Deadline, matching: FutexMatch },
    /// Raw futex wake of at most `count` waiters.
    FutexWake { addr: Addr, count: u32, matching: FutexMatch },

    Yield,
    Sleep { deadline: Deadline },
    ClockRead,

    /// The thread is about to read `size` bytes at a watched address.
    MemoryRead { addr: Addr, size: u64 },
    /// The thread is about to write `size` bytes at a watched address.
    MemoryWrite { addr: Addr, size: u64 },
    EdgeQuantum,
    /// The thread reached the preemption probe at `at` (the probed function's first instruction).
    Probe { at: Addr },
    /// The thread took fatal `signal` at instruction `pc`, touching `addr`, with its stack
    /// pointer at `sp` (where the program's own frame is looked for under a library's fault).
    Fault { signal: i32, pc: Addr, addr: Addr, sp: Addr },
    /// A caught signal sent by a process reached the thread: its sender's pid (as the thread
    /// sees it), `si_code`, and the `si_value` of a sigqueue (else 0; [`crate::DARA_SIGNAL_VALUE`]
    /// marks dara's own).
    SignalArrived { signal: i32, sender: u32, code: i32, value: u64 },
    /// `sigsuspend`/`pause` under `mask` (a kernel signal-set word).
    SigSuspend { mask: u64 },
    /// `sigwaitinfo`/`sigtimedwait`/`sigwait` for a signal of `set` (a kernel signal-set word).
    SigWait { set: u64, deadline: Deadline },

    ProcessFork,
    /// An `execve` about to run; `via_agent`: of a program the preload cannot enter, which
    /// dara's ptrace agent is to run (the scheduler makes sure it exists before the grant).
    ProcessExec { via_agent: bool },
    /// `wait4`/`waitpid`/`wait`/`waitid` for exited children.
    ProcessWait { target: ProcessTarget, options: WaitOptions },
    /// `kill` of `signal`; `pid` is the raw pid argument, for /proc checks only (never part of a
    /// decision). Encoded as `[target, signal, pid as i64, 0]`.
    ProcessKill { target: ProcessTarget, signal: i32, pid: i32 },

    /// A blocking file lock on `fd` that another holder has: the preload's non-blocking try
    /// failed. Enabled again once another thread has taken a step; the preload then tries again.
    FileLock { fd: i32, kind: FileLockKind },

    /// A system call dara cannot control was about to run; ends the execution.
    Unsupported(Unsupported),

    /// recv/recvfrom/recvmsg/read/readv of up to `len` bytes; `deadline` from SO_RCVTIMEO.
    NetRecv { fd: i32, flags: NetFlags, deadline: Deadline, len: u64 },
    /// send/sendto/sendmsg/write/writev of `len` bytes (below 2^48) whose first bytes are `head`
    /// (zero-padded); `dest_port` of a sendto (0: the connected peer). Encoded as `[fd, len |
    /// flags << 48, head as a little-endian word, dest_port]`.
    NetSend { fd: i32, len: u64, flags: NetFlags, head: [u8; 8], dest_port: u16 },
    /// accept/accept4; `deadline` from SO_RCVTIMEO.
    NetAccept { fd: i32, flags: NetFlags, deadline: Deadline },
    /// connect to the `len`-byte socket address at `addr`. A non-blocking one is always enabled;
    /// a blocking one while the listener it goes to has room in its backlog (or there is none:
    /// the connect fails at once). The scheduler settles the handshake.
    NetConnect { fd: i32, flags: NetFlags, addr: Addr, len: u32 },
    /// poll/ppoll/select/pselect over `count` `struct pollfd`s at `fds`.
    NetPoll { fds: Addr, count: u64, deadline: Deadline, flags: NetFlags },
    /// epoll_wait/epoll_pwait on `epoll`. Encoded as `[epoll, 0, deadline, flags]`.
    NetEpollWait { epoll: i32, deadline: Deadline, flags: NetFlags },
    /// close/shutdown of a socket or pipe end.
    NetClose { fd: i32, how: CloseHow },
    /// A TCP socket started listening (or a UDP socket was bound, `datagrams`) on `fd`, and the
    /// preload made a private `twin` (see [`Op::NetListen`]).
    NetListen { fd: i32, twin: i32, datagrams: bool },
    /// A blocking open of a FIFO: the reader's descriptor (`None` for a writer, encoded as
    /// `u64::MAX`), flags, and the FIFO's device and inode.
    FifoOpen { reader: Option<i32>, flags: NetFlags, device: u64, inode: u64 },
    /// `getaddrinfo`: the question at `query` (a [`crate::name_lookup::LookupQuery`]); the
    /// scheduler writes its [`crate::name_lookup::LookupAnswer`] at `answer` before the grant.
    NameLookup { query: Addr, answer: Addr },

    /// `timerfd_create`: `fd` is the eventfd the preload made for a timer on `clock`.
    TimerCreate { fd: i32, clock: TimerClock },
    /// `timerfd_settime` on `fd`: first expiry and period (0: one shot); the previous setting is
    /// written at `old` unless it is null. Encoded as `[fd | expiry kind << 32, expiry ns,
    /// interval, old]`.
    TimerSet { fd: i32, expiry: TimerExpiry, interval: u64, old: Addr },
    /// `timerfd_gettime` on `fd`: the setting is written at `current`.
    TimerGet { fd: i32, current: Addr },
}

/// A posted slot whose words do not make a request: which op, and which field is wrong (`"op"`
/// itself for an op only the scheduler chooses, an injected fault).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodeError {
    pub op: Op,
    pub field: &'static str,
}

impl core::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        if self.field == "op" {
            write!(f, "the preload posted {} ({}), which only the scheduler may choose (version mismatch?)", self.op.name(), self.op as u32)
        } else {
            write!(f, "the preload posted {} with an invalid {} (version mismatch?)", self.op.name(), self.field)
        }
    }
}

/// Largest `NetSend` length: the bits below [`net_flags::SEND_SHIFT`].
pub const SEND_LEN_MASK: u64 = (1 << net_flags::SEND_SHIFT) - 1;

/// Most bytes one granted send moves on a TCP connection whose other end is not a traced
/// program's (dara's relay to an outside client, or a peer outside dara): the grant's result
/// says so, and a blocking caller's rest goes by further grants (a non-blocking caller sees a
/// short write, as Linux allows). How much a loopback socket takes in one call otherwise follows
/// its autotuned buffers, which grow with the pace of the reads, in real time: busybox httpd's
/// `sendfile` of 4 MiB moved 3,932,160 bytes in one call and 256,000 under load, and the replay
/// diverged. dara's relay drains its end at every step, and this many always fit at once: under
/// half the smallest window Linux opens a loopback connection with (one 65,483-byte segment), so
/// no byte waits in the sender for a window update.
pub const STREAM_SEND_MOST: u64 = 32 << 10;

/// The most bytes a granted receive or send may move, from the grant's result: a positive result
/// is that count (what the scheduler saw queued, or what it lets a send move); zero or an error
/// sets no limit.
pub fn grant_limit(result: i64) -> Option<u64> {
    u64::try_from(result).ok().filter(|&n| n > 0)
}

/// A descriptor word: the preload writes a `c_int` sign-extended (`fd as u64`).
fn descriptor(word: u64) -> i32 {
    word as i32
}

impl Request {
    /// The op word this request is posted with.
    pub const fn op(&self) -> Op {
        use Request as R;
        match self {
            R::ProcessStart { .. } => Op::ProcessStart,
            R::ThreadStart { .. } => Op::ThreadStart,
            R::ThreadCreate => Op::ThreadCreate,
            R::ThreadExit => Op::ThreadExit,
            R::ThreadJoin { .. } => Op::ThreadJoin,
            R::ThreadDetach { .. } => Op::ThreadDetach,
            R::ProcessExit { .. } => Op::ProcessExit,
            R::MutexLock { .. } => Op::MutexLock,
            R::MutexTryLock { .. } => Op::MutexTryLock,
            R::MutexUnlock { .. } => Op::MutexUnlock,
            R::RwReadLock { .. } => Op::RwReadLock,
            R::RwWriteLock { .. } => Op::RwWriteLock,
            R::RwTryReadLock { .. } => Op::RwTryReadLock,
            R::RwTryWriteLock { .. } => Op::RwTryWriteLock,
            R::RwUnlock { .. } => Op::RwUnlock,
            R::Held { .. } => Op::Held,
            R::CondWait { .. } => Op::CondWait,
            R::CondSignal { .. } => Op::CondSignal,
            R::CondBroadcast { .. } => Op::CondBroadcast,
            R::BarrierInit { .. } => Op::BarrierInit,
            R::BarrierWait { .. } => Op::BarrierWait,
            R::OnceBegin { .. } => Op::OnceBegin,
            R::OnceDone { .. } => Op::OnceDone,
            R::SemInit { .. } => Op::SemInit,
            R::SemWait { .. } => Op::SemWait,
            R::SemTryWait { .. } => Op::SemTryWait,
            R::SemPost { .. } => Op::SemPost,
            R::FutexWait { .. } => Op::FutexWait,
            R::FutexWake { .. } => Op::FutexWake,
            R::Yield => Op::Yield,
            R::Sleep { .. } => Op::Sleep,
            R::ClockRead => Op::ClockRead,
            R::MemoryRead { .. } => Op::MemoryRead,
            R::MemoryWrite { .. } => Op::MemoryWrite,
            R::EdgeQuantum => Op::EdgeQuantum,
            R::Probe { .. } => Op::Probe,
            R::Fault { .. } => Op::Fault,
            R::SignalArrived { .. } => Op::SignalArrived,
            R::SigSuspend { .. } => Op::SigSuspend,
            R::SigWait { .. } => Op::SigWait,
            R::ProcessFork => Op::ProcessFork,
            R::ProcessExec { .. } => Op::ProcessExec,
            R::ProcessWait { .. } => Op::ProcessWait,
            R::ProcessKill { .. } => Op::ProcessKill,
            R::FileLock { .. } => Op::FileLock,
            R::Unsupported(_) => Op::Unsupported,
            R::NetRecv { .. } => Op::NetRecv,
            R::NetSend { .. } => Op::NetSend,
            R::NetAccept { .. } => Op::NetAccept,
            R::NetConnect { .. } => Op::NetConnect,
            R::NetPoll { .. } => Op::NetPoll,
            R::NetEpollWait { .. } => Op::NetEpollWait,
            R::NetClose { .. } => Op::NetClose,
            R::NetListen { .. } => Op::NetListen,
            R::FifoOpen { .. } => Op::FifoOpen,
            R::NameLookup { .. } => Op::NameLookup,
            R::TimerCreate { .. } => Op::TimerCreate,
            R::TimerSet { .. } => Op::TimerSet,
            R::TimerGet { .. } => Op::TimerGet,
        }
    }

    /// The op and argument words a slot carries for this request.
    pub const fn encode(&self) -> (Op, [u64; 4]) {
        use Request as R;
        let args = match *self {
            R::ProcessStart { parent, kind } => {
                let parent = match parent {
                    Some(p) => p as u64,
                    None => u64::MAX,
                };
                [parent, kind.to_arg(), 0, 0]
            }
            R::ThreadStart { creator: slot } | R::ThreadJoin { target: slot } | R::ThreadDetach { target: slot } => [slot as u64, 0, 0, 0],
            R::ThreadCreate | R::ThreadExit | R::Yield | R::ClockRead | R::EdgeQuantum | R::ProcessFork => [0; 4],
            R::ProcessExec { via_agent } => [via_agent as u64, 0, 0, 0],
            R::ProcessExit { status } => [status as u32 as u64, 0, 0, 0],
            R::MutexLock { mutex, kind, deadline } => [mutex.0, kind.to_arg(), deadline.to_ns(), 0],
            R::MutexTryLock { mutex, kind } | R::MutexUnlock { mutex, kind } => [mutex.0, kind.to_arg(), 0, 0],
            R::RwReadLock { lock, deadline } | R::RwWriteLock { lock, deadline } => [lock.0, deadline.to_ns(), 0, 0],
            R::RwTryReadLock { lock: addr }
            | R::RwTryWriteLock { lock: addr }
            | R::RwUnlock { lock: addr }
            | R::CondSignal { cond: addr }
            | R::CondBroadcast { cond: addr }
            | R::BarrierWait { barrier: addr }
            | R::OnceBegin { once: addr }
            | R::OnceDone { once: addr }
            | R::SemTryWait { sem: addr }
            | R::SemPost { sem: addr } => [addr.0, 0, 0, 0],
            R::Held { lock, what, depth, mutex_kind } => [lock.0, what.to_arg(), depth, mutex_kind.to_arg()],
            R::CondWait { cond, mutex, deadline, mutex_kind } => [cond.0, mutex.0, deadline.to_ns(), mutex_kind.to_arg()],
            R::BarrierInit { barrier, count } => [barrier.0, count as u64, 0, 0],
            R::SemInit { sem, value } => [sem.0, value as u64, 0, 0],
            R::SemWait { sem, deadline } => [sem.0, deadline.to_ns(), 0, 0],
            R::FutexWait { addr, expected, deadline, matching } => [addr.0, expected as u64, deadline.to_ns(), matching.to_arg()],
            R::FutexWake { addr, count, matching } => [addr.0, count as u64, matching.to_arg(), 0],
            R::Sleep { deadline } => [deadline.to_ns(), 0, 0, 0],
            R::MemoryRead { addr, size } | R::MemoryWrite { addr, size } => [addr.0, size, 0, 0],
            R::Probe { at } => [at.0, 0, 0, 0],
            R::Fault { signal, pc, addr, sp } => [signal as u64, pc.0, addr.0, sp.0],
            R::SignalArrived { signal, sender, code, value } => [signal as u64, sender as u64, code as u32 as u64, value],
            R::SigSuspend { mask } => [mask, 0, 0, 0],
            R::SigWait { set, deadline } => [set, deadline.to_ns(), 0, 0],
            R::ProcessWait { target, options } => [target.to_arg(), options.to_arg(), 0, 0],
            R::ProcessKill { target, signal, pid } => [target.to_arg(), signal as u64, pid as i64 as u64, 0],
            R::FileLock { fd, kind } => [fd as u64, kind.to_arg(), 0, 0],
            R::Unsupported(call) => match call {
                Unsupported::Clone3 { flags, size } => [Unsupported::SYS_CLONE3, flags, size, 0],
                Unsupported::StaticExec { path } => [Unsupported::SYS_EXECVE, path.0, UNSUPPORTED_STATIC_EXEC, 0],
                Unsupported::GrantStalled { fd, granted, received } => [Unsupported::SYS_RECVFROM, fd as u64, UNSUPPORTED_GRANT_STALLED, (granted as u64) << 32 | received as u64],
                Unsupported::Syscall { nr, args } => [nr, args[0], args[1], args[2]],
            },
            R::NetRecv { fd, flags, deadline, len } => [fd as u64, flags.0, deadline.to_ns(), len],
            R::NetSend { fd, len, flags, head, dest_port } => {
                [fd as u64, (len & SEND_LEN_MASK) | flags.0 << net_flags::SEND_SHIFT, u64::from_le_bytes(head), dest_port as u64]
            }
            R::NetAccept { fd, flags, deadline } => [fd as u64, flags.0, deadline.to_ns(), 0],
            R::NetConnect { fd, flags, addr, len } => [fd as u64, flags.0, addr.0, len as u64],
            R::NetPoll { fds, count, deadline, flags } => [fds.0, count, deadline.to_ns(), flags.0],
            R::NetEpollWait { epoll, deadline, flags } => [epoll as u64, 0, deadline.to_ns(), flags.0],
            R::NetClose { fd, how } => {
                let how = match how {
                    CloseHow::Close => 0,
                    CloseHow::Shutdown(how) => 1 + how as u64,
                };
                [fd as u64, how, 0, 0]
            }
            R::NetListen { fd, twin, datagrams } => [fd as u64, twin as u64, datagrams as u64, 0],
            R::FifoOpen { reader, flags, device, inode } => {
                let reader = match reader {
                    Some(fd) => fd as u64,
                    None => u64::MAX,
                };
                [reader, flags.0, device, inode]
            }
            R::NameLookup { query, answer } => [query.0, answer.0, 0, 0],
            R::TimerCreate { fd, clock } => [fd as u32 as u64, clock.to_arg(), 0, 0],
            R::TimerSet { fd, expiry, interval, old } => {
                let (kind, ns) = expiry.to_args();
                [fd as u32 as u64 | kind << 32, ns, interval, old.0]
            }
            R::TimerGet { fd, current } => [fd as u32 as u64, current.0, 0, 0],
        };
        (self.op(), args)
    }

    /// The request a slot's op and argument words carry.
    pub fn decode(op: Op, a: [u64; 4]) -> Result<Request, DecodeError> {
        use Request as R;
        let bad = |field| DecodeError { op, field };
        let word32 = |word: u64, field| u32::try_from(word).map_err(|_| bad(field));
        let kind = |word, field| MutexKind::from_arg(word).ok_or(bad(field));
        let addr = Addr(a[0]);
        Ok(match op {
            Op::ProcessStart => R::ProcessStart {
                parent: if a[0] == u64::MAX { None } else { Some(word32(a[0], "parent")?) },
                kind: StartKind::from_arg(a[1]).ok_or(bad("start kind"))?,
            },
            Op::ThreadStart => R::ThreadStart { creator: word32(a[0], "creator slot")? },
            Op::ThreadCreate => R::ThreadCreate,
            Op::ThreadExit => R::ThreadExit,
            Op::ThreadJoin => R::ThreadJoin { target: word32(a[0], "target slot")? },
            Op::ThreadDetach => R::ThreadDetach { target: word32(a[0], "target slot")? },
            Op::ProcessExit => R::ProcessExit { status: a[0] as u32 as i32 },
            Op::MutexLock => R::MutexLock { mutex: addr, kind: kind(a[1], "mutex kind")?, deadline: Deadline::from_ns(a[2]) },
            Op::MutexTryLock => R::MutexTryLock { mutex: addr, kind: kind(a[1], "mutex kind")? },
            Op::MutexUnlock => R::MutexUnlock { mutex: addr, kind: kind(a[1], "mutex kind")? },
            Op::RwReadLock => R::RwReadLock { lock: addr, deadline: Deadline::from_ns(a[1]) },
            Op::RwWriteLock => R::RwWriteLock { lock: addr, deadline: Deadline::from_ns(a[1]) },
            Op::RwTryReadLock => R::RwTryReadLock { lock: addr },
            Op::RwTryWriteLock => R::RwTryWriteLock { lock: addr },
            Op::RwUnlock => R::RwUnlock { lock: addr },
            Op::Held => R::Held {
                lock: addr,
                what: HeldKind::from_arg(a[1]).ok_or(bad("held kind"))?,
                depth: a[2],
                mutex_kind: kind(a[3], "mutex kind")?,
            },
            Op::CondWait => R::CondWait { cond: addr, mutex: Addr(a[1]), deadline: Deadline::from_ns(a[2]), mutex_kind: kind(a[3], "mutex kind")? },
            Op::CondSignal => R::CondSignal { cond: addr },
            Op::CondBroadcast => R::CondBroadcast { cond: addr },
            Op::BarrierInit => R::BarrierInit { barrier: addr, count: word32(a[1], "count")? },
            Op::BarrierWait => R::BarrierWait { barrier: addr },
            Op::OnceBegin => R::OnceBegin { once: addr },
            Op::OnceDone => R::OnceDone { once: addr },
            Op::SemInit => R::SemInit { sem: addr, value: word32(a[1], "initial value")? },
            Op::SemWait => R::SemWait { sem: addr, deadline: Deadline::from_ns(a[1]) },
            Op::SemTryWait => R::SemTryWait { sem: addr },
            Op::SemPost => R::SemPost { sem: addr },
            Op::FutexWait => R::FutexWait { addr, expected: word32(a[1], "expected value")?, deadline: Deadline::from_ns(a[2]), matching: FutexMatch::from_arg(a[3]) },
            Op::FutexWake => R::FutexWake { addr, count: word32(a[1], "waiter count")?, matching: FutexMatch::from_arg(a[2]) },
            Op::Yield => R::Yield,
            Op::Sleep => R::Sleep { deadline: Deadline::from_ns(a[0]) },
            Op::ClockRead => R::ClockRead,
            Op::MemoryRead => R::MemoryRead { addr, size: a[1] },
            Op::MemoryWrite => R::MemoryWrite { addr, size: a[1] },
            Op::EdgeQuantum => R::EdgeQuantum,
            Op::Probe => R::Probe { at: addr },
            Op::Fault => R::Fault { signal: a[0] as i32, pc: Addr(a[1]), addr: Addr(a[2]), sp: Addr(a[3]) },
            Op::SignalArrived => R::SignalArrived { signal: a[0] as i32, sender: word32(a[1], "sender pid")?, code: a[2] as u32 as i32, value: a[3] },
            Op::SigSuspend => R::SigSuspend { mask: a[0] },
            Op::SigWait => R::SigWait { set: a[0], deadline: Deadline::from_ns(a[1]) },
            Op::ProcessFork => R::ProcessFork,
            Op::ProcessExec => R::ProcessExec {
                via_agent: match a[0] {
                    0 => false,
                    1 => true,
                    _ => return Err(bad("via_agent")),
                },
            },
            Op::ProcessWait => R::ProcessWait { target: ProcessTarget::from_arg(a[0]).ok_or(bad("target process"))?, options: WaitOptions::from_bits(a[1]) },
            Op::ProcessKill => R::ProcessKill {
                target: ProcessTarget::from_arg(a[0]).ok_or(bad("target process"))?,
                signal: a[1] as i32,
                pid: i32::try_from(a[2] as i64).map_err(|_| bad("pid"))?,
            },
            Op::FileLock => R::FileLock { fd: descriptor(a[0]), kind: FileLockKind::from_arg(a[1]).ok_or(bad("lock kind"))? },
            Op::Unsupported => R::Unsupported(match a[0] {
                Unsupported::SYS_CLONE3 => Unsupported::Clone3 { flags: a[1], size: a[2] },
                Unsupported::SYS_EXECVE if a[2] == UNSUPPORTED_STATIC_EXEC => Unsupported::StaticExec { path: Addr(a[1]) },
                Unsupported::SYS_RECVFROM if a[2] == UNSUPPORTED_GRANT_STALLED => Unsupported::GrantStalled { fd: descriptor(a[1]), granted: (a[3] >> 32) as u32, received: a[3] as u32 },
                nr => Unsupported::Syscall { nr, args: [a[1], a[2], a[3]] },
            }),
            Op::NetRecv => R::NetRecv { fd: descriptor(a[0]), flags: NetFlags(a[1]), deadline: Deadline::from_ns(a[2]), len: a[3] },
            Op::NetSend => R::NetSend {
                fd: descriptor(a[0]),
                len: a[1] & SEND_LEN_MASK,
                flags: NetFlags(a[1] >> net_flags::SEND_SHIFT),
                head: a[2].to_le_bytes(),
                dest_port: u16::try_from(a[3]).map_err(|_| bad("destination port"))?,
            },
            Op::NetAccept => R::NetAccept { fd: descriptor(a[0]), flags: NetFlags(a[1]), deadline: Deadline::from_ns(a[2]) },
            Op::NetConnect => R::NetConnect { fd: descriptor(a[0]), flags: NetFlags(a[1]), addr: Addr(a[2]), len: word32(a[3], "address length")? },
            Op::NetPoll => R::NetPoll { fds: addr, count: a[1], deadline: Deadline::from_ns(a[2]), flags: NetFlags(a[3]) },
            Op::NetEpollWait => R::NetEpollWait { epoll: descriptor(a[0]), deadline: Deadline::from_ns(a[2]), flags: NetFlags(a[3]) },
            Op::NetClose => R::NetClose {
                fd: descriptor(a[0]),
                how: match a[1] {
                    0 => CloseHow::Close,
                    how => CloseHow::Shutdown(word32(how - 1, "shutdown how")?),
                },
            },
            Op::NetListen => R::NetListen { fd: descriptor(a[0]), twin: descriptor(a[1]), datagrams: a[2] == 1 },
            Op::NameLookup => R::NameLookup { query: addr, answer: Addr(a[1]) },
            Op::FifoOpen => R::FifoOpen { reader: if a[0] == u64::MAX { None } else { Some(descriptor(a[0])) }, flags: NetFlags(a[1]), device: a[2], inode: a[3] },
            Op::TimerCreate => R::TimerCreate { fd: descriptor(a[0]), clock: TimerClock::from_arg(a[1]).ok_or(bad("timer clock"))? },
            Op::TimerSet => R::TimerSet {
                fd: descriptor(a[0]),
                expiry: TimerExpiry::from_args(a[0] >> 32, a[1]).ok_or(bad("timer expiry"))?,
                interval: a[2],
                old: Addr(a[3]),
            },
            Op::TimerGet => R::TimerGet { fd: descriptor(a[0]), current: Addr(a[1]) },
            Op::NodeCrash | Op::NodeRestart | Op::Partition | Op::Heal | Op::DropDatagram | Op::ConnReset | Op::ClockSkew | Op::Pause | Op::NodePause => {
                return Err(bad("op"))
            }
        })
    }

    /// The virtual time at which this request times out, if it can time out at all.
    pub const fn deadline(&self) -> Option<u64> {
        use Request as R;
        match *self {
            R::Sleep { deadline }
            | R::RwReadLock { deadline, .. }
            | R::RwWriteLock { deadline, .. }
            | R::SemWait { deadline, .. }
            | R::SigWait { deadline, .. }
            | R::MutexLock { deadline, .. }
            | R::CondWait { deadline, .. }
            | R::FutexWait { deadline, .. }
            | R::NetRecv { deadline, .. }
            | R::NetAccept { deadline, .. }
            | R::NetPoll { deadline, .. }
            | R::NetEpollWait { deadline, .. } => deadline.at(),
            _ => None,
        }
    }

    /// The synchronization object (or watched memory) the request is about; `None` for a
    /// request that names none (a thread slot, a deadline, a descriptor, a syscall).
    pub const fn object(&self) -> Option<Addr> {
        use Request as R;
        match *self {
            R::MutexLock { mutex: a, .. }
            | R::MutexTryLock { mutex: a, .. }
            | R::MutexUnlock { mutex: a, .. }
            | R::RwReadLock { lock: a, .. }
            | R::RwWriteLock { lock: a, .. }
            | R::RwTryReadLock { lock: a }
            | R::RwTryWriteLock { lock: a }
            | R::RwUnlock { lock: a }
            | R::Held { lock: a, .. }
            | R::CondWait { cond: a, .. }
            | R::CondSignal { cond: a }
            | R::CondBroadcast { cond: a }
            | R::BarrierInit { barrier: a, .. }
            | R::BarrierWait { barrier: a }
            | R::OnceBegin { once: a }
            | R::OnceDone { once: a }
            | R::SemInit { sem: a, .. }
            | R::SemWait { sem: a, .. }
            | R::SemTryWait { sem: a }
            | R::SemPost { sem: a }
            | R::FutexWait { addr: a, .. }
            | R::FutexWake { addr: a, .. }
            | R::MemoryRead { addr: a, .. }
            | R::MemoryWrite { addr: a, .. } => Some(a),
            _ => None,
        }
    }

    /// The request's first argument word: what a trace records as the object of a choice on a
    /// request that is neither on the network nor on a named shared object (an object's
    /// address, a sleep's deadline, a join's target slot, ...).
    pub const fn subject(&self) -> u64 {
        self.encode().1[0]
    }

    /// The flags of a networking request (and of a `FifoOpen`); empty for any other.
    pub const fn net_flags(&self) -> NetFlags {
        use Request as R;
        match *self {
            R::NetRecv { flags, .. }
            | R::NetSend { flags, .. }
            | R::NetAccept { flags, .. }
            | R::NetConnect { flags, .. }
            | R::NetPoll { flags, .. }
            | R::NetEpollWait { flags, .. }
            | R::FifoOpen { flags, .. } => flags,
            _ => NetFlags(0),
        }
    }

    /// The descriptor a networking request is on (the epoll descriptor of an `epoll_wait`, the
    /// reader's descriptor of a `FifoOpen`); `None` for a poll and any other request.
    pub const fn fd(&self) -> Option<i32> {
        use Request as R;
        match *self {
            R::NetRecv { fd, .. }
            | R::NetSend { fd, .. }
            | R::NetAccept { fd, .. }
            | R::NetConnect { fd, .. }
            | R::NetClose { fd, .. }
            | R::NetListen { fd, .. }
            | R::NetEpollWait { epoll: fd, .. } => Some(fd),
            R::FifoOpen { reader, .. } => reader,
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests;
