//! Round trips of every [`Request`] variant through its slot words, and the hand-packed layouts
//! the preload and scheduler used before requests were typed.

use super::*;
use crate::{ANY_PROCESS, NO_DEADLINE};

fn every_variant() -> [Request; 64] {
    use Request as R;
    let (a, b) = (Addr(0x7f00_1000), Addr(0x7f00_2040));
    let at = Deadline::At(5_000_000_000);
    let futex = FutexMatch { bitset: 0x0f0f, shared: true };
    let nb = NetFlags(net_flags::NONBLOCK);
    let intr = NetFlags(net_flags::INTERRUPTIBLE);
    [
        R::ProcessStart { parent: None, kind: StartKind::Launched },
        R::ProcessStart { parent: Some(3), kind: StartKind::Fork },
        R::ThreadStart { creator: 7 },
        R::ThreadCreate,
        R::ThreadExit,
        R::ThreadJoin { target: 2 },
        R::ThreadDetach { target: 4 },
        R::ProcessExit { status: -1 },
        R::MutexLock { mutex: a, kind: MutexKind::ErrorCheck, deadline: at },
        R::MutexTryLock { mutex: a, kind: MutexKind::Recursive },
        R::MutexUnlock { mutex: a, kind: MutexKind::Normal },
        R::RwReadLock { lock: a, deadline: Deadline::Never },
        R::RwWriteLock { lock: a, deadline: at },
        R::RwTryReadLock { lock: a },
        R::RwTryWriteLock { lock: a },
        R::RwUnlock { lock: a },
        R::Held { lock: a, what: HeldKind::Read, depth: 3, mutex_kind: MutexKind::Normal },
        R::CondWait { cond: a, mutex: b, deadline: at, mutex_kind: MutexKind::Recursive },
        R::CondSignal { cond: a },
        R::CondBroadcast { cond: a },
        R::BarrierInit { barrier: a, count: 3 },
        R::BarrierWait { barrier: a },
        R::OnceBegin { once: a },
        R::OnceDone { once: a },
        R::SemInit { sem: a, value: 2 },
        R::SemWait { sem: a, deadline: at },
        R::SemTryWait { sem: a },
        R::SemPost { sem: a },
        R::FutexWait { addr: a, expected: u32::MAX, deadline: Deadline::Never, matching: futex },
        R::FutexWake { addr: a, count: i32::MAX as u32, matching: FutexMatch { bitset: u32::MAX, shared: false } },
        R::Yield,
        R::FileLock { fd: 7, kind: FileLockKind::Flock },
        R::FileLock { fd: 3, kind: FileLockKind::OpenFile },
        R::Sleep { deadline: at },
        R::ClockRead,
        R::MemoryRead { addr: a, size: 4 },
        R::MemoryWrite { addr: b, size: 8 },
        R::EdgeQuantum,
        R::Probe { at: a },
        R::Fault { signal: 11, pc: a, addr: Addr(0), sp: b },
        R::SignalArrived { signal: 10, sender: 4242, code: -1, value: crate::DARA_SIGNAL_VALUE },
        R::SigSuspend { mask: 1 << 9 },
        R::SigWait { set: 1 << 9 | 1 << 11, deadline: at },
        R::ProcessFork,
        R::ProcessExec { via_agent: false },
        R::ProcessExec { via_agent: true },
        R::ProcessWait { target: ProcessTarget::Process(1), options: WaitOptions { nohang: true, nowait: true } },
        R::ProcessKill { target: ProcessTarget::Untraced, signal: 15, pid: -7 },
        R::Unsupported(Unsupported::Syscall { nr: 56, args: [1, 2, 3] }),
        R::NetRecv { fd: 5, flags: intr, deadline: at, len: 4096 },
        R::NetSend { fd: 6, len: SEND_LEN_MASK, flags: NetFlags(net_flags::NONBLOCK | net_flags::INTERRUPTIBLE), head: *b"GET / HT", dest_port: 8080 },
        R::NetAccept { fd: 3, flags: nb, deadline: Deadline::Never },
        R::NetConnect { fd: 3, flags: nb, addr: Addr(0x7fff_0000), len: 16 },
        R::NetPoll { fds: a, count: 2, deadline: at, flags: nb },
        R::NetEpollWait { epoll: 9, deadline: at, flags: NetFlags(0) },
        R::NetClose { fd: 3, how: CloseHow::Shutdown(1) },
        R::NetListen { fd: 3, twin: 4, datagrams: true },
        R::FifoOpen { reader: Some(5), flags: NetFlags(net_flags::FIFO_READER), device: 0x803, inode: 1234 },
        R::NameLookup { query: a, answer: b },
        R::TimerCreate { fd: 7, clock: TimerClock::Monotonic },
        R::TimerSet { fd: 7, expiry: TimerExpiry::After(10_000_000), interval: 10_000_000, old: a },
        R::TimerSet { fd: 1023, expiry: TimerExpiry::At(u64::MAX - 1), interval: 0, old: Addr(0) },
        R::TimerSet { fd: 7, expiry: TimerExpiry::Disarmed, interval: 0, old: b },
        R::TimerGet { fd: 7, current: b },
    ]
}

#[test]
fn every_variant_round_trips() {
    let extra = [
        Request::ProcessStart { parent: None, kind: StartKind::Exec },
        Request::Unsupported(Unsupported::Clone3 { flags: 0x10000, size: 88 }),
        Request::Unsupported(Unsupported::StaticExec { path: Addr(0x4000) }),
        Request::Unsupported(Unsupported::GrantStalled { fd: 7, granted: 32768, received: 1294 }),
        Request::ProcessWait { target: ProcessTarget::Any, options: WaitOptions::default() },
        Request::NetClose { fd: 3, how: CloseHow::Close },
        Request::FifoOpen { reader: None, flags: NetFlags(net_flags::INTERRUPTIBLE), device: 0x803, inode: 1234 },
    ];
    for request in every_variant().into_iter().chain(extra) {
        let (op, args) = request.encode();
        assert_eq!(op, request.op());
        assert_eq!(Request::decode(op, args), Ok(request), "{op:?} {args:x?}");
    }
}

#[test]
fn every_posted_op_has_a_variant() {
    let ops = every_variant().map(|r| r.op());
    for v in 0..200u32 {
        let Some(op) = Op::from_u32(v) else { continue };
        assert!(ops.contains(&op) || op.is_fault(), "no variant in the test list for {op:?}");
        if op.is_fault() {
            assert_eq!(Request::decode(op, [0; 4]), Err(DecodeError { op, field: "op" }));
        }
    }
}

#[test]
fn hand_packed_layouts_decode() {
    // NetSend: `len | flags << 48`, the first bytes as a little-endian word, the sendto port.
    let flags = net_flags::NONBLOCK | net_flags::INTERRUPTIBLE;
    let args = [7, 1500 | flags << net_flags::SEND_SHIFT, u64::from_le_bytes(*b"PING\0\0\0\0"), 9000];
    let sent = Request::NetSend { fd: 7, len: 1500, flags: NetFlags(flags), head: *b"PING\0\0\0\0", dest_port: 9000 };
    assert_eq!(Request::decode(Op::NetSend, args), Ok(sent));
    assert_eq!(sent.encode(), (Op::NetSend, args));
    // A length past 48 bits is cut, as the preload always did.
    let long = Request::NetSend { fd: 7, len: 1 << 50 | 5, flags: NetFlags(0), head: [0; 8], dest_port: 0 };
    assert_eq!(long.encode().1[1], 5);
    // FutexWait: the match's shared bit above its 32-bit bitset.
    let wait = Request::FutexWait { addr: Addr(0x10), expected: 1, deadline: Deadline::Never, matching: FutexMatch { bitset: 4, shared: true } };
    assert_eq!(wait.encode().1, [0x10, 1, NO_DEADLINE, 4 | 1 << 32]);
    // FutexWake: the match in the third word.
    let wake = Request::FutexWake { addr: Addr(0x10), count: 1, matching: FutexMatch { bitset: u32::MAX, shared: false } };
    assert_eq!(wake.encode().1, [0x10, 1, u32::MAX as u64, 0]);
    // NetClose: 1 + SHUT_* for a shutdown.
    assert_eq!(Request::NetClose { fd: 4, how: CloseHow::Shutdown(2) }.encode().1, [4, 3, 0, 0]);
    // ProcessKill: the raw pid as i64; ProcessWait: WNOHANG and WNOWAIT as Linux numbers them.
    assert_eq!(Request::ProcessKill { target: ProcessTarget::Any, signal: 9, pid: -1 }.encode().1, [ANY_PROCESS, 9, u64::MAX, 0]);
    assert_eq!(Request::ProcessWait { target: ProcessTarget::Untraced, options: WaitOptions { nohang: true, nowait: false } }.encode().1, [ANY_PROCESS - 1, 1, 0, 0]);
    // A FIFO writer's descriptor is -1 as a word; a static exec carries its marker.
    assert_eq!(Request::FifoOpen { reader: None, flags: NetFlags(0), device: 1, inode: 2 }.encode().1, [u64::MAX, 0, 1, 2]);
    assert_eq!(Request::Unsupported(Unsupported::StaticExec { path: Addr(0x4000) }).encode().1, [59, 0x4000, UNSUPPORTED_STATIC_EXEC, 0]);
    // ProcessStart of the launched program: no parent.
    assert_eq!(Request::ProcessStart { parent: None, kind: StartKind::Launched }.encode().1, [u64::MAX, 0, 0, 0]);
    // Descriptors are sign-extended, as `fd as u64` on a c_int always was.
    assert_eq!(Request::decode(Op::NetRecv, [-1i32 as u64, 0, NO_DEADLINE, 1]).map(|r| r.fd()), Ok(Some(-1)));
}

#[test]
fn bad_words_name_op_and_field() {
    let err = Request::decode(Op::MutexLock, [0x10, 7, NO_DEADLINE, 0]).unwrap_err();
    assert_eq!(err, DecodeError { op: Op::MutexLock, field: "mutex kind" });
    let mut line = Line { buf: [0; 160], len: 0 };
    core::fmt::write(&mut line, format_args!("{err}")).unwrap();
    assert!(line.text().contains("mutex-lock") && line.text().contains("mutex kind"), "{}", line.text());
    assert_eq!(Request::decode(Op::ProcessStart, [0, 9, 0, 0]).unwrap_err().field, "start kind");
    assert_eq!(Request::decode(Op::ThreadJoin, [1 << 40, 0, 0, 0]).unwrap_err().field, "target slot");
    assert_eq!(Request::decode(Op::NetSend, [1, 0, 0, 70_000]).unwrap_err().field, "destination port");
}

#[test]
fn deadlines_and_objects() {
    let lock = Request::MutexLock { mutex: Addr(0x20), kind: MutexKind::Normal, deadline: Deadline::At(9) };
    assert_eq!((lock.deadline(), lock.object(), lock.subject()), (Some(9), Some(Addr(0x20)), 0x20));
    let sleep = Request::Sleep { deadline: Deadline::Never };
    assert_eq!((sleep.deadline(), sleep.object(), sleep.subject()), (None, None, NO_DEADLINE));
    assert_eq!(Deadline::from_ns(NO_DEADLINE), Deadline::Never);
}

/// A fixed buffer to format into (the crate is no_std).
struct Line {
    buf: [u8; 160],
    len: usize,
}

impl Line {
    fn text(&self) -> &str {
        core::str::from_utf8(&self.buf[..self.len]).unwrap()
    }
}

impl core::fmt::Write for Line {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let end = self.len + s.len();
        self.buf.get_mut(self.len..end).ok_or(core::fmt::Error)?.copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}
