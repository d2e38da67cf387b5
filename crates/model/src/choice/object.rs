//! What a choice is about, as a typed value: [`ChoiceObject`], read from a [`Choice`]'s `obj`
//! word by its op. The trace keeps the word (its encoding is unchanged); strategies, the listing
//! and the explorer's messages read the object through [`Choice::object`] instead of taking the
//! word apart themselves, and a choice prints itself ([`Choice`]'s `Display`).
//!
//! A network step's word is a description the driver packs ([`describe`], read back as a
//! [`NetObject`]): the logical endpoint, its peer, the endpoint's [`kind`] and up to four first
//! bytes of the data.
use std::fmt;

use dara_abi::{Op, ProcessTarget};

use super::{Choice, ChoiceKind, ThreadId};

/// What a choice is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChoiceObject {
    /// Nothing worth naming (a fork, an exec, a yield, a clock read, a thread's creation, ...).
    None,
    /// A synchronization object or watched memory: its address, or a process-shared object's
    /// name.
    Address(u64),
    /// A thread: a new thread's creator, the target of a join or detach.
    Thread(ThreadId),
    /// The process(es) a `wait` or `kill` names.
    Process(ProcessTarget),
    /// A virtual time: a sleep's deadline, the time a paused thread jumps to.
    Time(u64),
    /// A network step (and a dropped datagram): the described endpoint.
    Net(NetObject),
    /// A node of a cluster run (crash, restart, clock skew, pause).
    Node(usize),
    /// Two nodes of a cluster run (partition, heal, connection reset).
    NodePair(usize, usize),
    /// Any other word, shown as it is (an exit status, a signal set, a syscall number).
    Word(u64),
}

impl Choice {
    /// What this choice is about, read from its `obj` by its op.
    pub fn object(&self) -> ChoiceObject {
        use Op::*;
        let obj = self.obj;
        match self.op {
            ThreadStart | ThreadJoin | ThreadDetach => ThreadId::try_from(obj).map_or(ChoiceObject::Word(obj), ChoiceObject::Thread),
            ProcessWait | ProcessKill => ProcessTarget::from_arg(obj).map_or(ChoiceObject::Word(obj), ChoiceObject::Process),
            Sleep | Pause => ChoiceObject::Time(obj),
            NodeCrash | NodeRestart | ClockSkew | NodePause => ChoiceObject::Node(obj as usize),
            Partition | Heal | ConnReset => {
                let (a, b) = obj_pair(obj);
                ChoiceObject::NodePair(a, b)
            }
            DropDatagram | NetRecv | NetSend | NetAccept | NetConnect | NetPoll | NetEpollWait | NetClose | NetListen | FifoOpen => ChoiceObject::Net(NetObject::decode(obj)),
            MutexLock | MutexTryLock | MutexUnlock | RwReadLock | RwWriteLock | RwTryReadLock | RwTryWriteLock | RwUnlock | Held | CondWait | CondSignal | CondBroadcast | BarrierInit | BarrierWait | OnceBegin
            | OnceDone | SemInit | SemWait | SemTryWait | SemPost | FutexWait | FutexWake | MemoryRead | MemoryWrite => ChoiceObject::Address(obj),
            ProcessStart | ThreadCreate | ThreadExit | ProcessFork | ProcessExec | Yield | EdgeQuantum | Probe | ClockRead | NameLookup => ChoiceObject::None,
            ProcessExit | Fault | SignalArrived | SigSuspend | SigWait | FileLock | Unsupported | TimerCreate | TimerSet | TimerGet => ChoiceObject::Word(obj),
        }
    }
}

impl Choice {
    /// The node a node-level fault (crash, restart, skew, node pause) is about.
    pub fn node(&self) -> Option<usize> {
        match self.object() {
            ChoiceObject::Node(n) => Some(n),
            _ => None,
        }
    }

    /// The two nodes a partition, heal or connection reset is about.
    pub fn node_pair(&self) -> Option<(usize, usize)> {
        match self.object() {
            ChoiceObject::NodePair(a, b) => Some((a, b)),
            _ => None,
        }
    }
}

/// `<thread 2 run mutex-lock 0x4040>`, `<thread 3 run recv e2<->e1 "GET ">`: a choice as the
/// explorer's messages show it.
impl fmt::Display for Choice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            ChoiceKind::Run => "run",
            ChoiceKind::Timeout => "timeout",
            ChoiceKind::Fault => "fault",
            ChoiceKind::Interrupt => "interrupt",
        };
        let alt = if self.alt != 0 { format!(" alt {}", self.alt) } else { String::new() };
        write!(f, "<thread {} {kind} {} ", self.thread, self.op.name())?;
        match self.object() {
            // The object is a description (endpoints and first bytes): shown readably.
            ChoiceObject::Net(net) if self.op != Op::DropDatagram => {
                let ep = |e: Option<u64>| e.map_or("?".to_string(), |e| format!("e{e}"));
                let data = if net.preview().is_empty() { String::new() } else { format!(" {}", crate::outside::quoted(net.preview(), 4)) };
                write!(f, "{}<->{}{data}", ep(net.endpoint), ep(net.peer))?;
            }
            _ => write!(f, "{:#x}", self.obj)?,
        }
        write!(f, "{alt}>")
    }
}

/// Kinds of endpoint in a [`NetObject`].
pub mod kind {
    pub const UNKNOWN: u64 = 0;
    pub const TCP: u64 = 1;
    pub const UDP: u64 = 2;
    pub const UNIX_STREAM: u64 = 3;
    pub const UNIX_DGRAM: u64 = 4;
    pub const PIPE: u64 = 5;
    pub const EVENTFD: u64 = 6;
    pub const EPOLL: u64 = 7;
    pub const POLL: u64 = 8;
    /// An eventfd standing for a `timerfd` (docs/time.md, "timerfd").
    pub const TIMERFD: u64 = 9;
    /// A `signalfd` (readiness from the waiting thread's pending signals: `netprobe/signalfd.rs`).
    pub const SIGNALFD: u64 = 10;
}

/// "No endpoint" in a described `obj`.
pub const NO_ENDPOINT: u64 = 0xFFF;

/// Packs what the listing shows about a network step into the choice's 64-bit `obj`:
/// bits 0–11 the logical endpoint, 12–23 its peer ([`NO_ENDPOINT`] when unknown), 24–27 the
/// [`kind`], 28–31 how many preview bytes follow, 32–63 up to four first bytes of the data.
pub fn describe(endpoint: u64, peer: u64, kind: u64, preview: &[u8]) -> u64 {
    let n = preview.len().min(4);
    let mut bytes = [0u8; 4];
    bytes[..n].copy_from_slice(&preview[..n]);
    (endpoint.min(NO_ENDPOINT))
        | (peer.min(NO_ENDPOINT) << 12)
        | ((kind & 0xF) << 24)
        | ((n as u64) << 28)
        | (u64::from(u32::from_le_bytes(bytes)) << 32)
}

/// A network step's object: the logical endpoint the thread acts on, its peer, the endpoint's
/// [`kind`], and up to four first bytes of the data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NetObject {
    pub endpoint: Option<u64>,
    pub peer: Option<u64>,
    pub kind: u64,
    bytes: [u8; 4],
    len: usize,
}

impl NetObject {
    /// The parts of a word [`describe`] packed.
    pub fn decode(obj: u64) -> NetObject {
        let id = |v: u64| (v != NO_ENDPOINT).then_some(v);
        NetObject {
            endpoint: id(obj & 0xFFF),
            peer: id((obj >> 12) & 0xFFF),
            kind: (obj >> 24) & 0xF,
            bytes: ((obj >> 32) as u32).to_le_bytes(),
            len: ((obj >> 28) & 0xF).min(4) as usize,
        }
    }

    /// The first bytes of the data (at most four).
    pub fn preview(&self) -> &[u8] {
        &self.bytes[..self.len]
    }

    fn kind_name(&self) -> &'static str {
        match self.kind {
            kind::TCP => "tcp",
            kind::UDP => "udp",
            kind::UNIX_STREAM => "unix",
            kind::UNIX_DGRAM => "unix-dgram",
            kind::PIPE => "pipe",
            kind::EVENTFD => "eventfd",
            kind::EPOLL => "epoll",
            kind::POLL => "poll",
            kind::TIMERFD => "timerfd",
            kind::SIGNALFD => "signalfd",
            _ => "fd",
        }
    }
}

/// `tcp e2<->e1 "GET "`, `poll first ready e4`: the listing's form.
impl fmt::Display for NetObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = self.kind_name();
        match (self.endpoint, self.peer) {
            (Some(e), Some(p)) => write!(f, "{name} e{e}<->e{p}")?,
            (Some(e), None) if self.kind == kind::POLL => write!(f, "{name} first ready e{e}")?,
            (Some(e), None) => write!(f, "{name} e{e}")?,
            (None, _) => write!(f, "{name}")?,
        }
        if !self.preview().is_empty() {
            let text: String = self.preview().iter().map(|&b| if (0x20..0x7f).contains(&b) && b != b'"' { b as char } else { '.' }).collect();
            write!(f, " \"{text}\"")?;
        }
        Ok(())
    }
}

/// A node pair as a fault choice's `obj`.
pub fn pair_obj(a: usize, b: usize) -> u64 {
    (a as u64) << 32 | b as u64
}

/// The node pair of a fault choice's `obj`.
pub(crate) fn obj_pair(obj: u64) -> (usize, usize) {
    ((obj >> 32) as usize, (obj & 0xffff_ffff) as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn choice(op: Op, obj: u64) -> Choice {
        Choice { thread: 2, kind: ChoiceKind::Run, alt: 0, op, obj }
    }

    #[test]
    fn objects_are_read_by_op() {
        assert_eq!(choice(Op::MutexLock, 0x4040).object(), ChoiceObject::Address(0x4040));
        assert_eq!(choice(Op::ThreadJoin, 3).object(), ChoiceObject::Thread(3));
        assert_eq!(choice(Op::ProcessWait, u64::MAX).object(), ChoiceObject::Process(ProcessTarget::Any));
        assert_eq!(choice(Op::Partition, pair_obj(1, 2)).object(), ChoiceObject::NodePair(1, 2));
        assert_eq!(choice(Op::NodeCrash, 4).object(), ChoiceObject::Node(4));
        assert_eq!(choice(Op::Sleep, 7).object(), ChoiceObject::Time(7));
        assert_eq!(choice(Op::Yield, 0).object(), ChoiceObject::None);
        let ChoiceObject::Net(net) = choice(Op::NetRecv, describe(2, 1, kind::TCP, b"abcdef")).object() else { panic!("not a network object") };
        assert_eq!((net.endpoint, net.peer, net.kind, net.preview()), (Some(2), Some(1), kind::TCP, &b"abcd"[..]));
        assert_eq!(net.to_string(), "tcp e2<->e1 \"abcd\"");
        let ChoiceObject::Net(poll) = choice(Op::NetPoll, describe(4, NO_ENDPOINT, kind::POLL, &[])).object() else { panic!("not a network object") };
        assert_eq!(poll.to_string(), "poll first ready e4");
    }

    #[test]
    fn choices_print_their_object() {
        assert_eq!(choice(Op::MutexLock, 0x4040).to_string(), "<thread 2 run mutex-lock 0x4040>");
        let recv = Choice { alt: 1, ..choice(Op::NetRecv, describe(2, NO_ENDPOINT, kind::UDP, b"hi")) };
        assert_eq!(recv.to_string(), "<thread 2 run recv e2<->? \"hi\" alt 1>");
        let drop = Choice { kind: ChoiceKind::Fault, ..choice(Op::DropDatagram, 0x10) };
        assert_eq!(drop.to_string(), "<thread 2 fault drop 0x10>");
    }
}
