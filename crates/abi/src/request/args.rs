//! The typed arguments of a [`Request`](super::Request): addresses, deadlines, mutex and lock
//! kinds, process targets, wait options, network flags and unsupported calls, each with the word
//! it is encoded as in a slot (`to_arg`/`from_arg`).

use crate::{held, mutex_kind, net_flags, start_kind, ANY_PROCESS, NO_DEADLINE};

/// An address in the target's address space.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Addr(pub u64);

/// When a wait times out: never, or at a virtual time. Encoded as the time, or [`NO_DEADLINE`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Deadline {
    Never,
    /// Virtual nanoseconds (below [`NO_DEADLINE`]).
    At(u64),
}

impl Deadline {
    /// The deadline a word means ([`NO_DEADLINE`]: none).
    pub const fn from_ns(ns: u64) -> Deadline {
        if ns == NO_DEADLINE {
            Deadline::Never
        } else {
            Deadline::At(ns)
        }
    }

    /// The word: the time, or [`NO_DEADLINE`].
    pub const fn to_ns(self) -> u64 {
        match self {
            Deadline::Never => NO_DEADLINE,
            Deadline::At(ns) => ns,
        }
    }

    /// The time, if there is one.
    pub const fn at(self) -> Option<u64> {
        match self {
            Deadline::Never => None,
            Deadline::At(ns) => Some(ns),
        }
    }
}

/// A mutex's kind (glibc `__kind & 3`, adaptive folded into normal); [`mutex_kind`] words.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum MutexKind {
    #[default]
    Normal,
    Recursive,
    ErrorCheck,
}

impl MutexKind {
    pub const fn to_arg(self) -> u64 {
        match self {
            MutexKind::Normal => mutex_kind::NORMAL,
            MutexKind::Recursive => mutex_kind::RECURSIVE,
            MutexKind::ErrorCheck => mutex_kind::ERRORCHECK,
        }
    }

    pub const fn from_arg(arg: u64) -> Option<MutexKind> {
        match arg {
            mutex_kind::NORMAL => Some(MutexKind::Normal),
            mutex_kind::RECURSIVE => Some(MutexKind::Recursive),
            mutex_kind::ERRORCHECK => Some(MutexKind::ErrorCheck),
            _ => None,
        }
    }
}

/// What an [`Request::Held`](super::Request::Held) lock is; [`held`] words.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HeldKind {
    Mutex,
    Read,
    Write,
}

impl HeldKind {
    pub const fn to_arg(self) -> u64 {
        match self {
            HeldKind::Mutex => held::MUTEX,
            HeldKind::Read => held::READ,
            HeldKind::Write => held::WRITE,
        }
    }

    pub const fn from_arg(arg: u64) -> Option<HeldKind> {
        match arg {
            held::MUTEX => Some(HeldKind::Mutex),
            held::READ => Some(HeldKind::Read),
            held::WRITE => Some(HeldKind::Write),
            _ => None,
        }
    }
}

/// How a process's main thread came to post `ProcessStart`; [`start_kind`] words.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StartKind {
    /// The first program dara launched, or an orphan nobody announced.
    Launched,
    /// A child created by a traced `fork`.
    Fork,
    /// A new program image of an existing process (after `execve`): same logical process.
    Exec,
}

impl StartKind {
    pub const fn to_arg(self) -> u64 {
        match self {
            StartKind::Launched => start_kind::LAUNCHED,
            StartKind::Fork => start_kind::FORK,
            StartKind::Exec => start_kind::EXEC,
        }
    }

    pub const fn from_arg(arg: u64) -> Option<StartKind> {
        match arg {
            start_kind::LAUNCHED => Some(StartKind::Launched),
            start_kind::FORK => Some(StartKind::Fork),
            start_kind::EXEC => Some(StartKind::Exec),
            _ => None,
        }
    }
}

/// The process a `wait` or `kill` names, by logical process (pids differ from run to run).
/// Encoded as the logical process, [`ANY_PROCESS`], or `ANY_PROCESS - 1`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProcessTarget {
    /// Any child (`wait`), a process group or every process (`kill`).
    Any,
    /// A pid that is no traced process.
    Untraced,
    /// One traced process.
    Process(u32),
}

impl ProcessTarget {
    pub const fn to_arg(self) -> u64 {
        match self {
            ProcessTarget::Any => ANY_PROCESS,
            ProcessTarget::Untraced => ANY_PROCESS - 1,
            ProcessTarget::Process(p) => p as u64,
        }
    }

    pub const fn from_arg(arg: u64) -> Option<ProcessTarget> {
        match arg {
            ANY_PROCESS => Some(ProcessTarget::Any),
            a if a == ANY_PROCESS - 1 => Some(ProcessTarget::Untraced),
            a if a <= u32::MAX as u64 => Some(ProcessTarget::Process(a as u32)),
            _ => None,
        }
    }

    /// Whether logical process `p` is (one of) the target(s) of a `wait`.
    pub const fn matches(self, p: u32) -> bool {
        match self {
            ProcessTarget::Any => true,
            ProcessTarget::Untraced => false,
            ProcessTarget::Process(q) => p == q,
        }
    }
}

/// The options of a `wait` dara models (the rest are the kernel's business).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct WaitOptions {
    /// `WNOHANG`: return at once when no child has exited.
    pub nohang: bool,
    /// `WNOWAIT` (waitid): leave the child waitable.
    pub nowait: bool,
}

impl WaitOptions {
    /// `WNOHANG` and `WNOWAIT` as Linux numbers them (this crate has no libc).
    pub const WNOHANG: u64 = 1;
    pub const WNOWAIT: u64 = 0x0100_0000;

    pub const fn to_arg(self) -> u64 {
        (if self.nohang { Self::WNOHANG } else { 0 }) | if self.nowait { Self::WNOWAIT } else { 0 }
    }

    /// The options in a `wait`'s option bits (others ignored).
    pub const fn from_bits(bits: u64) -> WaitOptions {
        WaitOptions { nohang: bits & Self::WNOHANG != 0, nowait: bits & Self::WNOWAIT != 0 }
    }
}

/// Bits of the networking ops' flags ([`net_flags`]). At most 16 bits: `NetSend` packs them
/// above its length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct NetFlags(pub u64);

impl NetFlags {
    /// [`net_flags::NONBLOCK`]: the call must not block, so its `Run` is always enabled.
    pub const fn nonblocking(self) -> bool {
        self.0 & net_flags::NONBLOCK != 0
    }

    /// [`net_flags::INTERRUPTIBLE`]: a pending signal may end the blocking call.
    pub const fn interruptible(self) -> bool {
        self.0 & net_flags::INTERRUPTIBLE != 0
    }

    /// [`net_flags::FIFO_READER`]: a `FifoOpen` for reading (else for writing).
    pub const fn fifo_reader(self) -> bool {
        self.0 & net_flags::FIFO_READER != 0
    }

    /// [`net_flags::WHOLE_GRANT`]: a receive that takes its whole grant.
    pub const fn whole_grant(self) -> bool {
        self.0 & net_flags::WHOLE_GRANT != 0
    }
}

/// Which kind of file lock a [`Request::FileLock`](super::Request::FileLock) waits for: `flock`,
/// a POSIX record lock (`fcntl(F_SETLKW)`, `lockf(F_LOCK)`) or an open-file-description lock
/// (`fcntl(F_OFD_SETLKW)`). Encoded as 0, 1, 2.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FileLockKind {
    Flock,
    Posix,
    OpenFile,
}

impl FileLockKind {
    pub const fn to_arg(self) -> u64 {
        match self {
            FileLockKind::Flock => 0,
            FileLockKind::Posix => 1,
            FileLockKind::OpenFile => 2,
        }
    }

    pub const fn from_arg(arg: u64) -> Option<FileLockKind> {
        match arg {
            0 => Some(FileLockKind::Flock),
            1 => Some(FileLockKind::Posix),
            2 => Some(FileLockKind::OpenFile),
            _ => None,
        }
    }

    /// The call's name, for listings and reports.
    pub const fn name(self) -> &'static str {
        match self {
            FileLockKind::Flock => "flock",
            FileLockKind::Posix => "fcntl(F_SETLKW)",
            FileLockKind::OpenFile => "fcntl(F_OFD_SETLKW)",
        }
    }
}

/// What a `NetClose` does: close the descriptor, or `shutdown` with a `SHUT_*` value. Encoded as
/// 0, or 1 + `how`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CloseHow {
    Close,
    Shutdown(u32),
}

/// A system call dara cannot control (the payload of [`Request::Unsupported`](super::Request::Unsupported)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Unsupported {
    /// A raw `clone3` (through `syscall()`): its flags (0 if unreadable) and its `clone_args`
    /// size. Encoded as `[SYS_clone3, flags, size, 0]`.
    Clone3 { flags: u64, size: u64 },
    /// An `execve` of a statically linked program at `path`. Encoded as `[SYS_execve, path,`
    /// [`crate::UNSUPPORTED_STATIC_EXEC`]`, 0]`.
    StaticExec { path: Addr },
    /// A TCP receive granted `granted` bytes a traced peer wrote took `received` of them, and the
    /// rest did not arrive within dara's settle limit after the receive's own read reopened the
    /// window (`hooks/whole_grant.rs`). Encoded as `[SYS_recvfrom, fd,`
    /// [`crate::UNSUPPORTED_GRANT_STALLED`]`, granted << 32 | received]`.
    GrantStalled { fd: i32, granted: u32, received: u32 },
    /// Any other system call: its number and first three raw arguments.
    Syscall { nr: u64, args: [u64; 3] },
}

impl Unsupported {
    pub(super) const SYS_EXECVE: u64 = 59;
    pub(super) const SYS_CLONE3: u64 = 435;
    pub(super) const SYS_RECVFROM: u64 = 45;

    /// The system call's number.
    pub const fn nr(self) -> u64 {
        match self {
            Unsupported::Clone3 { .. } => Self::SYS_CLONE3,
            Unsupported::StaticExec { .. } => Self::SYS_EXECVE,
            Unsupported::GrantStalled { .. } => Self::SYS_RECVFROM,
            Unsupported::Syscall { nr, .. } => nr,
        }
    }
}

/// Which clock a timer ([`Request::TimerCreate`](super::Request::TimerCreate)) counts on: an
/// absolute expiry (`TFD_TIMER_ABSTIME`) is a reading of it. `CLOCK_BOOTTIME` (and the `_ALARM`
/// clocks) read like their base: the virtual machine never suspends. Encoded as 0, 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TimerClock {
    /// The run's realtime epoch `+ v`.
    Realtime,
    /// [`crate::MONOTONIC_BASE_NS`] `+ v`.
    Monotonic,
}

impl TimerClock {
    pub const fn to_arg(self) -> u64 {
        match self {
            TimerClock::Realtime => 0,
            TimerClock::Monotonic => 1,
        }
    }

    pub const fn from_arg(arg: u64) -> Option<TimerClock> {
        match arg {
            0 => Some(TimerClock::Realtime),
            1 => Some(TimerClock::Monotonic),
            _ => None,
        }
    }
}

/// When a timer set by [`Request::TimerSet`](super::Request::TimerSet) first expires, as the
/// program gave it. Encoded as a kind (0, 1, 2) in the high half of the descriptor's word and the
/// nanoseconds in a word of their own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TimerExpiry {
    /// `it_value` zero: the timer is disarmed.
    Disarmed,
    /// This many nanoseconds after the call.
    After(u64),
    /// When the timer's clock reads this many nanoseconds (`TFD_TIMER_ABSTIME`).
    At(u64),
}

impl TimerExpiry {
    /// The kind and the nanoseconds.
    pub const fn to_args(self) -> (u64, u64) {
        match self {
            TimerExpiry::Disarmed => (0, 0),
            TimerExpiry::After(ns) => (1, ns),
            TimerExpiry::At(ns) => (2, ns),
        }
    }

    pub const fn from_args(kind: u64, ns: u64) -> Option<TimerExpiry> {
        match kind {
            0 => Some(TimerExpiry::Disarmed),
            1 => Some(TimerExpiry::After(ns)),
            2 => Some(TimerExpiry::At(ns)),
            _ => None,
        }
    }
}
