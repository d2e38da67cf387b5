//! The contract between the in-target agent (`preload/`) and the scheduler: the layout of the
//! shared-memory region, the operation codes a thread posts at a scheduling point with their typed
//! arguments ([`request`]), and the handoff protocol on each slot's state word.
//!
//! Everything here is `#[repr(C)]`, fixed-size and free of pointers, because the same bytes are
//! mapped into the scheduler (inside `dara-trace`) and into every traced process. `no_std` and
//! dependency-free so the preload can use it without pulling anything heavy into someone else's
//! process. Layout changes bump [`VERSION`]; both sides check it.
//!
//! # Handoff protocol (one slot per thread)
//!
//! ```text
//!  thread (preload)                          scheduler
//!  ----------------                          ---------
//!  write op, args                            |
//!  state := POSTED (Release)                 |
//!  sched_wake += 1; futex_wake(sched_wake)   |
//!  futex_wait(state, POSTED) ...             sees POSTED (Acquire), updates the model,
//!                                            decides; writes result, now_ns
//!                                            state := GRANTED (Release); futex_wake(state)
//!  sees GRANTED (Acquire), reads result
//!  state := RUNNING; runs user code until the next scheduling point
//! ```
//!
//! A new thread's slot is claimed by its creator (state `STARTING`) before the thread exists; the
//! scheduler takes no decision while any slot is `STARTING`, so a thread that is being born can
//! never miss a decision it should have been part of (the *start barrier*).
//!
//! Both sides make these transitions only through the functions of [`handoff`], which also lists
//! the protocol's invariants; `tests/loom_handoff.rs` checks them with loom (docs/handoff.md).
#![no_std]

use core::sync::atomic::{AtomicU32, AtomicU64, AtomicU8};

pub mod access;
pub mod agent;
pub mod atomic_sites;
pub mod clock;
pub mod counter;
pub mod cpuid;
pub mod fork_server;
pub mod name_lookup;
pub mod handoff;
pub mod peer_address;
pub mod receive_timeout;
pub mod request;
pub mod select_sets;
pub mod system_info;
pub mod transfer;
pub mod wait_call;

pub use request::{Addr, CloseHow, Deadline, DecodeError, FileLockKind, HeldKind, MutexKind, NetFlags, ProcessTarget, Request, StartKind, TimerClock, TimerExpiry, Unsupported, WaitOptions};

/// `b"DARASHM1"` read as a little-endian integer.
pub const MAGIC: u64 = u64::from_le_bytes(*b"DARASHM1");
/// Bumped whenever the layout or the meaning of an op changes.
pub const VERSION: u32 = 38;
/// Threads (over all processes of one execution) that can ever exist at once and over time:
/// slots are never reused within an execution, so this bounds threads created per execution.
pub const MAX_SLOTS: usize = 4096;
/// Processes per execution the region has room for: the compiled maximum of `--max-processes`
/// (the scheduler's own limit, lower by default). Each process has a [`ProcessEntry`] and a
/// [`Coverage`] area; the areas are address space only until an instrumented process writes.
pub const MAX_PROCESSES: usize = 1024;

/// Environment variable holding the path the preload opens to map the region. dara passes the
/// region's memfd to the target as descriptor [`SHM_FD`] and sets this to [`SHM_PATH`]: a
/// constant, so the target's environment (and with it its memory layout) is the same on every
/// run, whatever dara's pid.
pub const ENV_SHM_PATH: &str = "DARA_SHM";
/// Descriptor number under which the target inherits the region's memfd. The preload closes it
/// once the region is mapped, so the program never sees it.
pub const SHM_FD: i32 = 1000;
/// Value of [`ENV_SHM_PATH`] that names [`SHM_FD`].
pub const SHM_PATH: &str = "/proc/self/fd/1000";
/// Descriptor under which the target inherits a directory descriptor of dara's own `/proc` (the
/// host's, whatever /proc the program sees): the preload reads `thread-self` through it to learn
/// its kernel pid and tid as dara sees them, which it writes into its slot. In a PID namespace
/// the program's own getpid/gettid differ from those. Kept open like [`SHM_FD`].
pub const HOST_PROC_FD: i32 = 1001;
/// Descriptor under which the target inherits the writing end of the pipe dara reads the SDK's
/// property lines from (`sdk/`, docs/properties.md); [`ENV_SDK_FD`] names it. Kept open like
/// [`SHM_FD`], so a launcher that closes what it inherited does not silence its children.
pub const SDK_FD: i32 = 1002;
/// Environment variable naming [`SDK_FD`] for the SDKs and the line protocol.
pub const ENV_SDK_FD: &str = "DARA_SDK_FD";
// The preload's `closefrom` keeps dara's descriptors as one range.
const _: () = assert!(HOST_PROC_FD == SHM_FD + 1 && SDK_FD == HOST_PROC_FD + 1);
/// The pipes dara drains: the target's stdout, its stderr, and the SDK's property lines.
pub const OUTPUT_PIPES: usize = 3;
/// `si_value` of the signals dara sends itself (as `SI_QUEUE`, through a pidfd or to one
/// thread): a traced thread that takes a signal tells dara's (passed on from the terminal, or
/// replayed) from one sent from outside, whose sender pid may read 0 like dara's does when the
/// execution runs in a PID namespace.
pub const DARA_SIGNAL_VALUE: u64 = 0xDA7A_5167;
/// Set by the tracer on the launched command so that a preload loaded outside dara stays inert.
pub const ENV_ACTIVE: &str = "DARA_ACTIVE";

/// Offsets of the virtual clocks: the target sees `CLOCK_REALTIME = Header::realtime_epoch_ns + v`
/// and `CLOCK_MONOTONIC = MONOTONIC_BASE_NS + v` where `v` is the execution's virtual time. The
/// realtime epoch is a setting of the run (dara-trace takes the real time its search or recording
/// starts, and a replay the recorded one); this is the one used when nothing set it, and by
/// traces written before it was a setting: 2024-01-01T00:00:00Z.
pub const REALTIME_EPOCH_NS: u64 = 1_704_067_200 * 1_000_000_000;
/// Monotonic clocks start at one hour of uptime, so `v = 0` never looks like an unset clock.
pub const MONOTONIC_BASE_NS: u64 = 3_600 * 1_000_000_000;

/// Slot states (the slot's `state` word). Transitions are listed in the module doc.
pub mod state {
    /// Never used in this execution.
    pub const FREE: u32 = 0;
    /// Claimed for a thread that is being created and has not posted its `ThreadStart` yet.
    pub const STARTING: u32 = 1;
    /// Holds the run token and is executing user code.
    pub const RUNNING: u32 = 2;
    /// Stopped at a scheduling point, `op`/`args` describe what it wants to do.
    pub const POSTED: u32 = 3;
    /// The scheduler granted the posted op; `result`/`now_ns` are valid.
    pub const GRANTED: u32 = 4;
    /// Finished: posted `ThreadExit` (or its creation failed) and was released.
    pub const EXITED: u32 = 5;
}

/// What a thread asks for at a scheduling point: the op word of a slot. What its four argument
/// words mean is the matching [`Request`] variant's fields (packed and unpacked only by
/// [`Request::encode`] and [`Request::decode`]); here, what each op does.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    /// First post of a process's main thread, from the preload constructor (or, in a forked
    /// child, from the fork hook) before any user code of that image runs.
    ProcessStart = 1,
    /// First post of a new thread, before its start routine runs; it names its creator.
    ThreadStart = 2,
    /// About to create a thread. The creator claims the child's slot only after the grant (a
    /// claimed slot that has not posted yet stalls every decision, this one included); the child
    /// names its creator in `ThreadStart`.
    ThreadCreate = 3,
    /// The thread is done (start routine returned or `pthread_exit`). Never returns to user code.
    ThreadExit = 4,
    /// `pthread_join`.
    ThreadJoin = 5,
    /// `pthread_detach`.
    ThreadDetach = 6,
    /// `exit`/`_exit`/`exit_group` called by user code.
    ProcessExit = 7,

    MutexLock = 10,
    MutexTryLock = 11,
    MutexUnlock = 12,

    RwReadLock = 20,
    RwWriteLock = 21,
    RwTryReadLock = 22,
    RwTryWriteLock = 23,
    RwUnlock = 24,
    /// A lock the thread took without a post ([`HeldKind`] says how; see the preload's `solo`
    /// module): the model records it as the thread's, as if each acquisition had been granted.
    /// Granted at once, without a decision and without a step.
    Held = 25,

    /// The preload has already released the real mutex. Completes (result 0 or ETIMEDOUT) once
    /// signalled or timed out *and* the mutex is re-acquired in the model.
    CondWait = 30,
    CondSignal = 31,
    CondBroadcast = 32,

    BarrierInit = 40,
    /// result: PTHREAD_BARRIER_SERIAL_THREAD for one waiter, else 0.
    BarrierWait = 41,

    /// `pthread_once` entry. result: 1 = caller must run the init routine and then post
    /// `OnceDone`; 0 = already done.
    OnceBegin = 50,
    OnceDone = 51,

    SemInit = 60,
    SemWait = 61,
    SemTryWait = 62,
    SemPost = 63,

    /// Raw futex wait. The scheduler reads the word when it picks this thread: result -EAGAIN if
    /// it differs, else the thread blocks until a matching `FutexWake` (result 0) or its deadline
    /// (result -ETIMEDOUT).
    FutexWait = 70,
    /// Raw futex wake. result: number woken.
    FutexWake = 71,

    /// `sched_yield` and friends.
    Yield = 80,
    /// `nanosleep`, `clock_nanosleep`, `usleep`, `sleep`.
    Sleep = 81,
    /// A clock read. The grant's `now_ns` is the answer; its result is the reading process's
    /// wall-clock skew in ns (0 unless a `ClockSkew` fault set one), added to realtime clocks.
    ClockRead = 82,

    /// Memory-level scheduling points (`--preempt-on memory`, sancov `trace-loads`/`trace-stores`
    /// builds): the thread is about to read / write a watched address. Always enabled; two
    /// accesses conflict when they overlap and one of them writes.
    MemoryRead = 83,
    MemoryWrite = 84,
    /// Voluntary preemption point every N coverage edges (`--preempt-on edges:N`), so spinning
    /// instrumented code yields the token. Behaves as `Yield`.
    EdgeQuantum = 85,
    /// A preemption probe of the ptrace agent: the thread reached the first instruction of one
    /// of the program's synchronisation functions (docs/ptrace.md). Always enabled, no effect;
    /// unlike `Yield` not a voluntary yield (PCT does not demote it: Go reaches probes all the
    /// time, and demoting at each made PCT a round robin).
    Probe = 91,
    /// `getaddrinfo`: the scheduler answers the name lookup itself (`name_lookup`), since
    /// glibc's resolver would talk to name servers outside dara behind the hooks' back: in a
    /// recording from the machine's resolver, recorded as an input; in a replay from the trace;
    /// in a closed world from the hosts file only. Always enabled; the answer is written into
    /// the thread's memory before the grant.
    NameLookup = 92,
    /// The thread took a fatal fault (SIGSEGV, SIGBUS, SIGFPE, SIGILL) and is about to die of
    /// it; posted from the preload's fault handler so the scheduler can name the faulting
    /// function while the process still exists. Granted at once, without a decision.
    Fault = 86,
    /// A caught signal was pending for the thread when it came back from a grant (blocked while
    /// it was parked), sent by someone other than the kernel. Posted before the thread lets the
    /// signal through, so the scheduler can tell dara's and traced senders from outside ones
    /// (recorded in a recording, to be sent to the same thread with the same grant in its
    /// replay). Granted at once, without a decision.
    SignalArrived = 87,
    /// `sigsuspend`/`pause`: the thread waits until a signal its wait mask lets through runs a
    /// handler. Never `Run`: only an `Interrupt` choice ends it, offered once such a caught
    /// signal is pending for the thread (see [`Slot::program_mask`]); result `-EINTR`, after
    /// which the thread makes the real call, which runs the handler and returns at once.
    SigSuspend = 88,
    /// `sigwaitinfo`/`sigtimedwait`/`sigwait`: the thread waits until a signal of its set is
    /// pending, to take it without a handler. Never `Run`: an `Interrupt` choice (result
    /// `-EINTR`) is offered once a signal of the set is pending, or a caught signal the thread's
    /// mask lets through (which ends the wait with EINTR); the thread then takes the signal for
    /// real. `Timeout` at the deadline: `-EAGAIN`.
    SigWait = 89,

    /// About to `fork` (also `vfork`, run as a fork). Granted at once; after the grant the
    /// parent claims the child's slot (STARTING) and process entry, forks, and the child posts
    /// `ProcessStart` with [`StartKind::Fork`].
    ProcessFork = 110,
    /// About to `execve`. Granted at once; after the grant the thread claims the slot the new
    /// image's main thread will use (STARTING, recorded in its [`ProcessEntry::exec_slot`]);
    /// the new image posts `ProcessStart` with [`StartKind::Exec`] on it. If the exec fails the
    /// slot is released (EXITED) and the thread goes on.
    ProcessExec = 111,
    /// `wait4`/`waitpid`/`wait`/`waitid` for exited children. result: 1 + the logical process
    /// of the exited child the thread may now collect for real (which one, when several have
    /// exited, is a choice), 0 for `WNOHANG` with none exited, `-ECHILD` when no child matches.
    /// Pids never appear: they differ from run to run.
    ProcessWait = 112,
    /// `kill`. Granted at once; the thread then sends the signal for real, and the scheduler
    /// does not decide again until every traced process the signal terminates is gone.
    ProcessKill = 113,
    /// A blocking file lock (`flock` with `LOCK_SH`/`LOCK_EX`, `fcntl` with `F_SETLKW` or
    /// `F_OFD_SETLKW`, `lockf(F_LOCK)`) the kernel would make wait: the preload tried it without
    /// blocking and another holder has it. Enabled again once another thread has taken a step
    /// since the post (a file lock is released by an unlock, a close or a process's end, which
    /// dara does not all see as such); the grant (result 0) makes the preload try again, and post
    /// again while it is still taken. With nobody else able to move, the thread is deadlocked.
    FileLock = 114,

    /// A syscall dara cannot control was about to run. Ends the execution with an
    /// "uncontrolled" outcome; never granted.
    Unsupported = 90,

    // Networking (120–159): sockets, pipes, eventfds, poll/epoll/select. See docs/networking.md.
    // A non-blocking call ([`NetFlags::nonblocking`]) has its `Run` always enabled; an
    // interruptible one ([`NetFlags::interruptible`]) may be ended by a signal.
    // The grant's result is the model's prediction (bytes, ready count) for the listing; the
    // preload then performs the real, non-blocking call.
    /// recv/recvfrom/recvmsg/read/readv on a socket, pipe or eventfd.
    NetRecv = 120,
    /// send/sendto/sendmsg/write/writev.
    NetSend = 121,
    /// accept/accept4.
    NetAccept = 122,
    /// connect. A blocking one waits while the listener's backlog is full, and is interruptible;
    /// the scheduler settles the handshake.
    NetConnect = 123,
    /// poll/ppoll/select/pselect. result: 0 = the timer fired (report nothing), 1 = report every
    /// ready entry, 2 + i = report only ready entry `i` (a choice of which ready peer is seen
    /// first).
    NetPoll = 124,
    /// epoll_wait/epoll_pwait. result: 0 = timer fired.
    NetEpollWait = 125,
    /// close/shutdown of a socket or pipe end.
    NetClose = 126,
    /// A TCP socket started listening, or a UDP socket was bound, while dara keeps outside peers
    /// apart ([`Header::outside`]): the program's descriptor listens on (is bound to) its own
    /// (public) address, and the preload made a private twin listening on (bound to) the same
    /// address with a port of the kernel's choice. Granted at once: the scheduler keeps a
    /// duplicate of the public socket (it accepts outside clients itself and hands each one over
    /// as a connection to the twin), then the preload puts the twin in place of the program's
    /// descriptor. See docs/outside.md.
    NetListen = 127,
    /// A blocking `open` of a FIFO for reading or for writing only, which Linux makes wait for the
    /// other side (a reader's descriptor is already open non-blocking, so the waiting reader
    /// counts as a reader, as in the kernel). Enabled once a traced process holds the FIFO open
    /// for the other direction; the preload then completes the open without blocking. See
    /// docs/processes.md.
    FifoOpen = 128,

    // Injected faults (130–139): never posted by the preload. They are the scheduler's own
    // choices in a cluster run (`Choice::kind` is `Fault`), recorded and replayed like any
    // other decision. See docs/cluster.md.
    /// SIGKILL every process of a node. obj: node index.
    NodeCrash = 130,
    /// Start a crashed node again with its restart command. obj: node index.
    NodeRestart = 131,
    /// Cut two nodes apart: their connections are reset, new ones are reset once established,
    /// datagrams between them are dropped. obj: `a << 32 | b`.
    Partition = 132,
    /// End a partition. obj: `a << 32 | b`.
    Heal = 133,
    /// Drop the datagram a thread's receive would get next (the thread's own choice). obj: the
    /// receive's described endpoint.
    DropDatagram = 134,
    /// Reset every TCP connection between two nodes (both ends see ECONNRESET). obj: `a << 32 | b`.
    ConnReset = 135,
    /// Set a node's wall clock off by the configured skew. obj: node index.
    ClockSkew = 136,
    /// Pause a thread (`--faults pause`): it is not scheduled while virtual time passes the
    /// other threads' next deadline, and goes on once nobody else can move. Offered in any run
    /// with a pause budget. obj: the virtual time the clock jumps to.
    Pause = 137,
    /// Pause a node (`--faults pause-node`): every thread of its processes stands still while
    /// virtual time passes the other nodes' next deadline (a GC pause, SIGSTOP, a starved VM);
    /// the node goes on once nobody else can move. obj: node index.
    NodePause = 138,

    // Timers (160–169): a `timerfd` is an eventfd the preload made in its place; the scheduler
    // keeps the timer on the virtual clock and writes its expirations into the eventfd (see
    // docs/time.md). Granted at once, without a decision and without a step: what they change
    // follows from the clock and from the thread that holds the token.
    /// `timerfd_create`: the descriptor is an eventfd standing for a timer on a clock. result 0,
    /// or `-errno` (the preload then closes the eventfd and fails the call).
    TimerCreate = 160,
    /// `timerfd_settime`: arm (or disarm) the timer; the previous setting is written into the
    /// program's `struct itimerspec` when asked for. result 0 or `-errno` (EINVAL: not a timer).
    TimerSet = 161,
    /// `timerfd_gettime`: the current setting, written into the program's `struct itimerspec`.
    TimerGet = 162,
}

/// Bits of the networking ops' flags ([`NetFlags`]).
pub mod net_flags {
    /// The call must not block: non-blocking descriptor or `MSG_DONTWAIT`.
    pub const NONBLOCK: u64 = 1;
    /// A blocking `NetRecv`, `NetAccept`, `NetSend` or `NetConnect` a pending signal may end
    /// (`ChoiceKind::Interrupt`, result `-EINTR`): the preload then runs the handler and waits
    /// again (`SA_RESTART`) or fails with EINTR (a send that sent part returns that part). Not
    /// set where it cannot run the handler (inside its syscall trap).
    pub const INTERRUPTIBLE: u64 = 4;
    /// A `FifoOpen` that opens for reading (else for writing).
    pub const FIFO_READER: u64 = 8;
    /// A TCP `NetRecv` into one buffer that takes its whole grant, waiting in its own call for
    /// the bytes its read lets through (the preload's `hooks/whole_grant.rs`): it may be granted
    /// bytes that wait behind a window only its own read opens. A receive without it (an iovec,
    /// a peek, the ptrace agent's) takes what one call finds, so its grant must be queued.
    pub const WHOLE_GRANT: u64 = 16;
    /// Shift of the flags in `NetSend`'s second argument (below it: the length).
    pub const SEND_SHIFT: u32 = 48;
}

impl Op {
    /// Decodes a raw op word; `None` for anything this version does not know.
    pub fn from_u32(v: u32) -> Option<Op> {
        use Op::*;
        Some(match v {
            1 => ProcessStart,
            2 => ThreadStart,
            3 => ThreadCreate,
            4 => ThreadExit,
            5 => ThreadJoin,
            6 => ThreadDetach,
            7 => ProcessExit,
            10 => MutexLock,
            11 => MutexTryLock,
            12 => MutexUnlock,
            20 => RwReadLock,
            21 => RwWriteLock,
            22 => RwTryReadLock,
            23 => RwTryWriteLock,
            24 => RwUnlock,
            25 => Held,
            30 => CondWait,
            31 => CondSignal,
            32 => CondBroadcast,
            40 => BarrierInit,
            41 => BarrierWait,
            50 => OnceBegin,
            51 => OnceDone,
            60 => SemInit,
            61 => SemWait,
            62 => SemTryWait,
            63 => SemPost,
            70 => FutexWait,
            71 => FutexWake,
            80 => Yield,
            81 => Sleep,
            82 => ClockRead,
            83 => MemoryRead,
            84 => MemoryWrite,
            85 => EdgeQuantum,
            86 => Fault,
            87 => SignalArrived,
            88 => SigSuspend,
            89 => SigWait,
            110 => ProcessFork,
            111 => ProcessExec,
            112 => ProcessWait,
            113 => ProcessKill,
            114 => FileLock,
            90 => Unsupported,
            91 => Probe,
            120 => NetRecv,
            121 => NetSend,
            122 => NetAccept,
            123 => NetConnect,
            124 => NetPoll,
            125 => NetEpollWait,
            126 => NetClose,
            127 => NetListen,
            128 => FifoOpen,
            92 => NameLookup,
            130 => NodeCrash,
            131 => NodeRestart,
            132 => Partition,
            133 => Heal,
            134 => DropDatagram,
            135 => ConnReset,
            136 => ClockSkew,
            137 => Pause,
            138 => NodePause,
            160 => TimerCreate,
            161 => TimerSet,
            162 => TimerGet,
            _ => return None,
        })
    }

    /// The op whose [`Op::name`] is `name` (a schedule written by a person names ops so).
    pub fn from_name(name: &str) -> Option<Op> {
        (0..=u8::MAX as u32).filter_map(Op::from_u32).find(|op| op.name() == name)
    }

    /// Short lower-case name used in logs and interleaving listings.
    pub fn name(self) -> &'static str {
        use Op::*;
        match self {
            ProcessStart => "process-start",
            ThreadStart => "thread-start",
            ThreadCreate => "thread-create",
            ThreadExit => "thread-exit",
            ThreadJoin => "join",
            ThreadDetach => "detach",
            ProcessExit => "exit",
            MutexLock => "mutex-lock",
            MutexTryLock => "mutex-trylock",
            MutexUnlock => "mutex-unlock",
            RwReadLock => "rw-rdlock",
            RwWriteLock => "rw-wrlock",
            RwTryReadLock => "rw-tryrdlock",
            RwTryWriteLock => "rw-trywrlock",
            RwUnlock => "rw-unlock",
            CondWait => "cond-wait",
            CondSignal => "cond-signal",
            CondBroadcast => "cond-broadcast",
            BarrierInit => "barrier-init",
            BarrierWait => "barrier-wait",
            OnceBegin => "once",
            OnceDone => "once-done",
            SemInit => "sem-init",
            SemWait => "sem-wait",
            SemTryWait => "sem-trywait",
            SemPost => "sem-post",
            FutexWait => "futex-wait",
            FutexWake => "futex-wake",
            Yield => "yield",
            Sleep => "sleep",
            ClockRead => "clock-read",
            Held => "held",
            MemoryRead => "read",
            MemoryWrite => "write",
            EdgeQuantum => "edge-quantum",
            Probe => "probe",
            Fault => "fault",
            SignalArrived => "signal-arrived",
            SigSuspend => "sigsuspend",
            SigWait => "sigwait",
            ProcessFork => "fork",
            ProcessExec => "exec",
            ProcessWait => "wait",
            ProcessKill => "kill",
            FileLock => "file-lock",
            Unsupported => "unsupported-syscall",
            NetRecv => "recv",
            NetSend => "send",
            NetAccept => "accept",
            NetConnect => "connect",
            NetPoll => "poll",
            NetEpollWait => "epoll-wait",
            NetClose => "close",
            NetListen => "listen",
            FifoOpen => "fifo-open",
            NameLookup => "name-lookup",
            NodeCrash => "crash",
            NodeRestart => "restart",
            Partition => "partition",
            Heal => "heal",
            DropDatagram => "drop",
            ConnReset => "reset",
            ClockSkew => "skew",
            Pause => "pause",
            NodePause => "pause-node",
            TimerCreate => "timerfd-create",
            TimerSet => "timerfd-settime",
            TimerGet => "timerfd-gettime",
        }
    }

    /// Whether this is an injected fault (130–139), a choice of the scheduler's own.
    pub fn is_fault(self) -> bool {
        (130..140).contains(&(self as u32))
    }

    /// Whether this is one of the networking ops (120–159).
    pub fn is_net(self) -> bool {
        (120..160).contains(&(self as u32))
    }
}

/// The third word of an `Unsupported` post of an `execve` of a statically linked program
/// ([`Unsupported::StaticExec`]).
pub const UNSUPPORTED_STATIC_EXEC: u64 = 1;
/// The third word of an `Unsupported` post of a receive whose grant stalled
/// ([`Unsupported::GrantStalled`]).
pub const UNSUPPORTED_GRANT_STALLED: u64 = 2;

/// `ProcessWait` target meaning "any child".
pub const ANY_PROCESS: u64 = u64::MAX;

/// How a process's main thread came to post `ProcessStart`: the words of [`StartKind`].
pub mod start_kind {
    /// The first program dara launched, or an orphan nobody announced.
    pub const LAUNCHED: u64 = 0;
    /// A child created by a traced `fork`.
    pub const FORK: u64 = 1;
    /// A new program image of an existing process (after `execve`): same logical process.
    pub const EXEC: u64 = 2;
}

/// Deadline argument meaning "wait forever".
pub const NO_DEADLINE: u64 = u64::MAX;

/// Which waiters a raw futex operation matches: its bitset (all ones for plain `FUTEX_WAIT` /
/// `FUTEX_WAKE`), and whether the futex is process-shared (the call had no `FUTEX_PRIVATE_FLAG`:
/// the kernel keys it by the memory behind the address, so waiters in other processes that map
/// that memory match too).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FutexMatch {
    pub bitset: u32,
    pub shared: bool,
}

impl FutexMatch {
    /// Where `shared` sits in the op argument, above the 32 bits of the bitset.
    const SHARED_BIT: u64 = 1 << 32;

    /// The word this match is encoded as in a `FutexWait` or `FutexWake` post.
    pub const fn to_arg(self) -> u64 {
        self.bitset as u64 | if self.shared { Self::SHARED_BIT } else { 0 }
    }

    pub const fn from_arg(arg: u64) -> FutexMatch {
        FutexMatch { bitset: arg as u32, shared: arg & Self::SHARED_BIT != 0 }
    }

    /// Which waiters a `futex` call with operation word `op` matches: every one for the plain
    /// `FUTEX_WAIT`/`FUTEX_WAKE` (`plain`), else those of its bitset argument; process-shared
    /// without `FUTEX_PRIVATE_FLAG` (128).
    pub const fn of_call(op: i32, plain: bool, bitset_arg: u64) -> FutexMatch {
        const FUTEX_PRIVATE_FLAG: i32 = 128;
        FutexMatch { bitset: if plain { u32::MAX } else { bitset_arg as u32 }, shared: op & FUTEX_PRIVATE_FLAG == 0 }
    }
}

/// The words of [`MutexKind`] (glibc `__kind & 3`, adaptive folded into normal).
pub mod mutex_kind {
    pub const NORMAL: u64 = 0;
    pub const RECURSIVE: u64 = 1;
    pub const ERRORCHECK: u64 = 2;
}

/// One thread's mailbox. Written by the thread while it holds the run token (op, args) and by the
/// scheduler while the thread is parked (result, now_ns); `state` orders the two.
#[repr(C, align(64))]
pub struct Slot {
    /// One of [`state`]; the futex word the thread parks on.
    pub state: AtomicU32,
    /// An [`Op`] as u32.
    pub op: AtomicU32,
    /// Kernel pid (thread-group id) and tid, for `/proc` diagnostics and liveness checks only;
    /// never part of a decision.
    pub pid: AtomicU32,
    pub tid: AtomicU32,
    /// Logical process id (index into the process table), by creation order.
    pub process: AtomicU32,
    /// Identifier the program uses for this thread (`pthread_t`), so `pthread_join` can name a
    /// slot.
    pub handle: AtomicU64,
    /// The posted request's argument words ([`Request::encode`]; read with [`Request::decode`]).
    pub args: [AtomicU64; 4],
    /// Return value for the hook (0, a positive count, or a negative errno).
    pub result: AtomicU64,
    /// Virtual time (ns) at the moment of the grant.
    pub now_ns: AtomicU64,
    /// Number of posts this slot has made; lets the scheduler tell a new post from an old one.
    pub posts: AtomicU32,
    /// Coarse steps: how many TCP sockets the thread sent on without a post since its previous
    /// post (at most [`SENT_MAX`], listed in `sent`); written with every post (0: none). The
    /// scheduler settles those sends, as it does a granted one, before its next decision.
    pub sent_count: AtomicU32,
    /// Coarse steps: receives on TCP sockets the thread made without a post since its previous
    /// post (written with every post). Not zero: the readiness the scheduler saw is stale.
    pub received_unposted: AtomicU32,
    /// 1 when a signal from outside reached the thread while it ran since its previous post and
    /// was held back to this one (written with every post): it is pending now, and the
    /// scheduler looks at pending signals before its next decision (it may end this wait).
    pub held_signals: AtomicU32,
    pub sent: [SentOn; SENT_MAX],
    /// The thread's own signal mask (kernel signal-set word) while it is parked, written with
    /// every post: parked, it blocks every signal the program catches, so the kernel's view
    /// (`SigBlk`) hides which ones the program would let through. A pending caught signal outside
    /// this mask interrupts a blocking wait (`ChoiceKind::Interrupt`).
    pub program_mask: AtomicU64,
    /// The program's call site of the posted request: the return address of the first frame
    /// outside dara's preload (0: unknown), written with every post while
    /// [`Header::call_sites`] asks for it. Only the listing reads it (the file and line of each
    /// step); never part of a decision.
    pub call_site: AtomicU64,
    /// The virtual time (ns) of the thread's last grant when it last read its own CPU time
    /// (`times`, `getrusage`, `clock`, a CPU-time clock), plus one; 0: never. CPU time is virtual
    /// and does not move while a thread computes: the watchdog names it when a thread that read
    /// it shortly before computes past `--busy-limit` (a loop that waits for its CPU time to grow
    /// never ends under dara).
    pub cpu_time_read_ns: AtomicU64,
}

/// A TCP socket a thread sent on without a post ([`Slot::sent`]).
#[repr(C)]
pub struct SentOn {
    pub fd: AtomicU32,
    /// The socket's local port (high 16 bits) and its peer's port (low 16 bits); 0 if unknown.
    pub ports: AtomicU32,
    /// Bytes the socket has sent in all (`tcpi_bytes_sent` less `tcpi_bytes_retrans`) when the
    /// post was made; `u64::MAX` if unknown. A peer that has received that many has them all.
    pub bytes_sent: AtomicU64,
}

/// Most descriptors a thread sends on without a post between two posts ([`Slot::sent`]); a send
/// on one more takes the posted path.
pub const SENT_MAX: usize = 16;

/// Process table entry.
#[repr(C)]
pub struct ProcessEntry {
    /// Kernel pid, 0 while unused.
    pub pid: AtomicU32,
    /// Seed of this process's application-randomness stream (getrandom, rand, /dev/urandom);
    /// written by the scheduler before the process may run user code.
    pub random_seed: AtomicU64,
    /// Slot + 1 claimed for the main thread of the image this process is `execve`-ing into (0:
    /// none). The new image's constructor finds its process by pid and adopts this slot.
    pub exec_slot: AtomicU32,
}

/// The start of the region.
#[repr(C, align(64))]
pub struct Header {
    pub magic: u64,
    pub version: u32,
    /// Number of [`Slot`]s that follow the process table.
    pub nslots: u32,
    /// Bumped (then futex-woken) by every post and by the scheduler's own helper threads; the
    /// scheduler sleeps on it.
    pub sched_wake: AtomicU32,
    /// Bump allocator for slots; slots are never reused within one execution.
    pub next_slot: AtomicU32,
    /// Bump allocator for process entries.
    pub next_process: AtomicU32,
    /// CPU count the target observes (sysconf, sched_getaffinity, get_nprocs).
    pub cpus: u32,
    /// Base seed of this execution's application randomness.
    pub random_seed: u64,
    /// What `CLOCK_REALTIME` reads at virtual time 0, in nanoseconds since 1970 (written before
    /// the launch; see [`REALTIME_EPOCH_NS`]).
    pub realtime_epoch_ns: AtomicU64,
    /// Non-zero once the execution is over: parked threads must not expect a grant.
    pub shutdown: AtomicU32,
    /// Scheduler's pid, so a preload can notice that dara died.
    pub scheduler_pid: u32,
    /// The replay of a recording made with the host's pids: what `getppid` shows a process
    /// whose real parent is outside the replay's PID namespace (0) or is its init (1), namely the
    /// pid its parent, dara, had in the recording. 0: the real answer. Written before the launch.
    pub parent_shown: AtomicU32,
    /// The same replay: what `getsid` shows for a process whose session leader is outside the
    /// replay's PID namespace (the kernel says 0), namely the session id dara had in the
    /// recording. 0: the real answer. Written before the launch.
    pub session_shown: AtomicU32,
    /// The memory totals `sysinfo` shows ([`system_info`]): a snapshot of the host's taken when
    /// dara-trace started, or the recorded one in a replay. Written before the launch.
    pub memory: system_info::MemoryWords,
    /// Index of the decision whose grant is being handed out (written by the scheduler before
    /// each grant). Coverage receivers stamp an edge's first hit with it, which attributes new
    /// coverage to the step (and so the thread and action) that reached it.
    pub step: AtomicU32,
    /// [`preempt`] flags: which optional scheduling points the preload posts.
    pub preempt_flags: u32,
    /// `--preempt-on edges:N`: post [`Op::EdgeQuantum`] every this many coverage edges (0 = off).
    pub preempt_edges: u32,
    /// [`instrumented`] bits: which kinds of instrumented access the preload received in a
    /// profiling run (set by the preload, read by the scheduler when the run ends). Tells whether
    /// a search could see atomics as well as plain loads and stores.
    pub instrumented: AtomicU32,
    /// Non-zero when peers outside dara may talk to the program (a recording run, or the replay
    /// of one): a TCP `listen` or a UDP `bind` then posts [`Op::NetListen`] and swaps in a private
    /// twin, so only dara can make a connection reach the program's accept, or a datagram its
    /// socket.
    pub outside: u32,
    /// Non-zero when the scheduler reads each post's [`Slot::call_site`] (a replay that lists its
    /// steps); otherwise the preload does not look for call sites. Written before any grant.
    pub call_sites: AtomicU32,
    /// Inodes of the pipes dara reads the target's stdout, its stderr and the SDK's lines from
    /// (written right after the launch, before any grant). Writes to them never block (dara
    /// drains them), so they are not network descriptors; every other pipe is.
    pub output_pipes: [AtomicU64; OUTPUT_PIPES],
    /// Connections and datagram senders dara relays to the program (a recording or its replay),
    /// by dara's end: the program is shown the client's address as the peer of such a connection
    /// (`accept`, `getpeername`) or the sender of such datagrams (`recvfrom`, `recvmsg`), and its
    /// datagrams to that address go to dara's end. Written by the scheduler before the program
    /// can see the connection or datagram; reused round-robin.
    pub relayed: [RelayedPeer; MAX_RELAYED],
    /// Files the program opened for writing, each noted once by the preload's open hooks: a
    /// recording stores their names, so a replay that diverges can say which on-disk state the
    /// recorded run changed. Entries claimed so far; more than [`MAX_WRITTEN_FILES`] means some
    /// were not noted.
    pub written_count: AtomicU32,
    pub written: [WrittenFile; MAX_WRITTEN_FILES],
    /// The words a process uses to ask dara's ptrace agent to trace it (see [`AgentWords`]).
    pub agent: agent::AgentWords,
    /// `--preempt-on atomics`: the directory of the programs' atomic-site plans
    /// ([`atomic_sites`]), NUL-terminated; empty otherwise. Written before the launch.
    pub atomic_plans: [AtomicU8; atomic_sites::PLANS_DIR_MAX],
    pub processes: [ProcessEntry; MAX_PROCESSES],
}


/// Entries of [`Header::written`].
pub const MAX_WRITTEN_FILES: usize = 32;
/// Longest path a [`WrittenFile`] holds, in bytes; a longer one is not noted.
pub const WRITTEN_PATH_MAX: usize = 252;

/// One file opened for writing, by its absolute path (as `/proc/self/fd/N` names it).
#[repr(C)]
pub struct WrittenFile {
    /// Bytes of `path` in use; 0 while the entry is being written or unused. Stored last
    /// (Release), so a reader that sees it non-zero sees the path.
    pub len: AtomicU32,
    pub path: [AtomicU8; WRITTEN_PATH_MAX],
}

/// [`RelayedPeer::flags`].
pub mod relayed_flags {
    /// dara's end is a UDP socket (else TCP).
    pub const DATAGRAMS: u32 = 1;
    /// dara's end is on IPv6 loopback (`::1`), else on 127.0.0.1.
    pub const RELAY_V6: u32 = 2;
    /// The peer is a TCP server outside dara that the program connects to, and dara's end is the
    /// socket that stands for it (a recording dialled the server; its replay plays it): the
    /// program's next connect to that server goes to dara's end. Only the newest entry for a
    /// server has it (older ones still show their connection's peer).
    pub const DIALED: u32 = 4;
}

/// Entries of [`Header::relayed`].
pub const MAX_RELAYED: usize = 256;

/// One relayed connection or datagram sender: dara's end is `relay_port` on loopback, the
/// client is at `port` and `ip` (IPv4 in the first 4 bytes when `family` is `AF_INET`;
/// `AF_INET6`: all 16).
#[repr(C)]
pub struct RelayedPeer {
    /// 0: unused. Written last (Release), cleared first when the entry is reused.
    pub relay_port: AtomicU32,
    /// [`relayed_flags`].
    pub flags: AtomicU32,
    pub family: AtomicU32,
    pub port: AtomicU32,
    pub ip: [AtomicU32; 4],
}

/// Flags of [`Header::preempt_flags`] (written by the scheduler before the target starts).
pub mod preempt {
    /// sancov load/store callbacks on a watched address post [`Op::MemoryRead`](super::Op) / `MemoryWrite`.
    pub const MEMORY: u32 = 1;
    /// Profiling run: load/store callbacks record which threads touch which granules in the
    /// [`AccessTable`](super::AccessTable) and never post.
    pub const PROFILE: u32 = 2;
    /// Coarse steps (a recording): every thread takes process-private locks without a post, as a
    /// single-threaded process always does, and answers most clock reads from its last grant's
    /// virtual time, and sends and receives on TCP sockets that do not have to wait without a
    /// post (told in the next post: [`Slot::sent`](crate::Slot::sent)). Only decisions that could
    /// matter remain scheduling points.
    pub const COARSE: u32 = 4;
    /// The program's own atomic instructions are trapped ([`atomic_sites`](crate::atomic_sites)):
    /// their accesses are recorded (`PROFILE`) or posted when watched (`MEMORY`).
    pub const ATOMICS: u32 = 8;
    /// Instrumented accesses (sancov load/store callbacks, ThreadSanitizer-ABI callbacks) are
    /// recorded (`PROFILE`) or posted when watched (`MEMORY`): `--preempt-on memory`.
    pub const INSTRUMENTED: u32 = 16;
}

/// Bits of [`Header::instrumented`]: where a profiling run's recorded accesses came from.
pub mod instrumented {
    /// sancov `trace-loads`/`trace-stores` callbacks (which do not cover atomic instructions).
    pub const SANCOV: u32 = 1;
    /// Plain loads and stores of a ThreadSanitizer-ABI build (`libdara_tsan.so`).
    pub const TSAN: u32 = 2;
    /// Atomic operations of a ThreadSanitizer-ABI build.
    pub const TSAN_ATOMIC: u32 = 4;
    /// Atomic instructions of a prebuilt program, trapped (`--preempt-on atomics`).
    pub const TRAPPED_ATOMIC: u32 = 8;
}

/// The words of [`HeldKind`]: what an [`Op::Held`] lock is.
pub mod held {
    pub const MUTEX: u64 = 0;
    pub const READ: u64 = 1;
    pub const WRITE: u64 = 2;
}

/// Edges per process in the coverage area (a power of two). An edge's index is its
/// `trace-pc-guard` guard number, or for gcc's `trace-pc` a hash of its address; two edges that
/// share an index are counted as one.
pub const COV_MAP_SIZE: usize = 1 << 16;

/// One process's coverage, written by the preload's sancov receivers without a scheduling point
/// (only one thread runs at a time, so relaxed accesses suffice) and read by the scheduler when
/// the execution ends.
#[repr(C, align(64))]
pub struct Coverage {
    /// Guards handed out by `__sanitizer_cov_trace_pc_guard_init` in this process (all
    /// instrumented edges of its `trace-pc-guard` modules); 0 for `trace-pc` builds.
    pub guards: AtomicU32,
    /// Nonzero once any edge of this process was hit: set with the first hit of each edge,
    /// before its count, so a reader that finds 0 here may skip the counters (an uninstrumented
    /// process then costs the scheduler one load, not a scan that faults in the area's pages).
    pub reached: AtomicU32,
    /// Hits of edge `i`, saturating at 255.
    pub counts: [AtomicU8; COV_MAP_SIZE],
    /// [`Header::step`] when edge `i` was first hit in this execution.
    pub first_step: [AtomicU32; COV_MAP_SIZE],
    /// Address of the instrumented call site of edge `i` (its return address), recorded on the
    /// first hit; ASLR is off, so it is the same in every execution.
    pub pcs: [AtomicU64; COV_MAP_SIZE],
}

/// Slots of the [`AccessTable`] (a power of two).
pub const ACCESS_TABLE_SLOTS: usize = 1 << 16;

/// Memory-level preemption's address set, an open-addressed hash set of 8-byte granules shared by
/// all processes. In a profiling run the preload fills it; for later runs the scheduler writes
/// the granules worth preempting on, and the preload only posts [`Op::MemoryRead`] / [`Op::MemoryWrite`] for those.
/// Entry layout and probing: see the [`access`] module (bits 0..=47 granule, 48..=60 first
/// thread's slot + 1, bit 61 watched, bit 62 touched by two threads, bit 63 written).
#[repr(C, align(64))]
pub struct AccessTable {
    pub entries: [AtomicU64; ACCESS_TABLE_SLOTS],
}

/// Byte offset of the access table from the start of the region.
pub const ACCESS_TABLE_OFFSET: usize = core::mem::size_of::<Header>() + MAX_SLOTS * core::mem::size_of::<Slot>();

/// Byte offset of process `p`'s [`Coverage`] from the start of the region.
pub const fn cov_offset(p: usize) -> usize {
    ACCESS_TABLE_OFFSET + core::mem::size_of::<AccessTable>() + p * core::mem::size_of::<Coverage>()
}

/// Total size of the mapped region: header, slots, access table, one [`Coverage`] per process.
/// Pages nobody touches are never allocated, so an uninstrumented program costs nothing for the
/// coverage areas.
pub const REGION_SIZE: usize = cov_offset(MAX_PROCESSES);

/// Byte offset of slot `i` from the start of the region.
pub const fn slot_offset(i: usize) -> usize {
    core::mem::size_of::<Header>() + i * core::mem::size_of::<Slot>()
}

const _: () = assert!(core::mem::size_of::<Slot>() == 384);
const _: () = assert!(core::mem::size_of::<WrittenFile>() == 256);
const _: () = assert!(core::mem::align_of::<Slot>() == 64);
const _: () = assert!(core::mem::size_of::<Header>() % 64 == 0);
const _: () = assert!(REGION_SIZE % 64 == 0);
const _: () = assert!(core::mem::size_of::<Coverage>() % 64 == 0);
const _: () = assert!(core::mem::offset_of!(Coverage, counts) == 8, "guards and reached share the area's first eight bytes");
const _: () = assert!(ACCESS_TABLE_OFFSET % 64 == 0);

/// Splitmix64: the one mixing function both sides use to derive per-process and per-draw seeds,
/// so the application's random stream never depends on the scheduler's own generator.
pub const fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ops_round_trip() {
        for v in 0..200u32 {
            if let Some(op) = Op::from_u32(v) {
                assert_eq!(op as u32, v);
            }
        }
        assert_eq!(Op::from_u32(41), Some(Op::BarrierWait));
        assert_eq!(Op::from_u32(9999), None);
    }
}
