//! `sendfile`, `splice`, `tee` and `copy_file_range`: the kernel moves bytes between two
//! descriptors without the program seeing them. When one end is a socket or pipe dara models, the
//! call is a receive on its input and a send on its output, the same `NetRecv`/`NetSend` requests
//! as `read` and `write` of the bytes it may move. This is the one decision, shared by the
//! preload (its symbol hooks and its syscall trap, crates/preload/src/hooks/transfer.rs) and the
//! ptrace agent (crates/tracer/src/ptrace/agent/transfer.rs): each asks its own way what a
//! descriptor is, both post the same requests for the same call.
//!
//! Once granted, the call runs with its stream descriptors non-blocking (`O_NONBLOCK` set around
//! it: `sendfile` and `splice` to a socket take the socket's file flags, not a message flag): it
//! moves what fits now, which Linux allows any of these calls to return (the man pages tell
//! callers to retry). A blocking caller that finds no room or no data after all posts again; it
//! never sees `EAGAIN`.
//!
//! `copy_file_range` is never a stream transfer: Linux refuses any descriptor that is not a
//! regular file (`EINVAL` at once), so it cannot block on a socket or pipe and runs as it is.

/// A call that moves bytes between two descriptors inside the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransferCall {
    /// `sendfile(out_fd, in_fd, offset, count)`.
    Sendfile,
    /// `splice(fd_in, off_in, fd_out, off_out, len, flags)`.
    Splice,
    /// `tee(fd_in, fd_out, len, flags)`: copies between two pipes, the input keeps its bytes.
    Tee,
    /// `copy_file_range(fd_in, off_in, fd_out, off_out, len, flags)`.
    CopyFileRange,
}

/// x86-64 system call numbers.
pub const SYS_SENDFILE: i64 = 40;
pub const SYS_SPLICE: i64 = 275;
pub const SYS_TEE: i64 = 276;
pub const SYS_COPY_FILE_RANGE: i64 = 326;

/// `SPLICE_F_NONBLOCK`: the pipe ends of a `splice` or `tee` do not block.
pub const SPLICE_F_NONBLOCK: u64 = 2;

impl TransferCall {
    /// The call system call `nr` is, if it is one of them.
    pub fn of_syscall(nr: i64) -> Option<TransferCall> {
        match nr {
            SYS_SENDFILE => Some(TransferCall::Sendfile),
            SYS_SPLICE => Some(TransferCall::Splice),
            SYS_TEE => Some(TransferCall::Tee),
            SYS_COPY_FILE_RANGE => Some(TransferCall::CopyFileRange),
            _ => None,
        }
    }

    /// Its system call number.
    pub fn nr(self) -> i64 {
        match self {
            TransferCall::Sendfile => SYS_SENDFILE,
            TransferCall::Splice => SYS_SPLICE,
            TransferCall::Tee => SYS_TEE,
            TransferCall::CopyFileRange => SYS_COPY_FILE_RANGE,
        }
    }

    /// Where the call's arguments `a` say its bytes come from and go to.
    pub fn operands(self, a: [u64; 6]) -> Operands {
        match self {
            TransferCall::Sendfile => Operands { input: a[1] as i32, input_offset: a[2], output: a[0] as i32, count: a[3], flags: 0 },
            TransferCall::Splice | TransferCall::CopyFileRange => Operands { input: a[0] as i32, input_offset: a[1], output: a[2] as i32, count: a[4], flags: a[5] },
            TransferCall::Tee => Operands { input: a[0] as i32, input_offset: 0, output: a[1] as i32, count: a[2], flags: a[3] },
        }
    }
}

/// A transfer call's descriptors and length, as its arguments give them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Operands {
    pub input: i32,
    /// Address of the input's `loff_t` offset (0: the file's own position).
    pub input_offset: u64,
    pub output: i32,
    /// The most bytes the call may move.
    pub count: u64,
    /// `splice`/`tee` flags (0 for the others).
    pub flags: u64,
}

/// What a descriptor is, as the caller of [`plan`] found out its own way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// A regular file, a terminal, anything dara does not model: the kernel never keeps a
    /// transfer waiting on it.
    Other,
    /// A socket dara models; `nonblocking`: its `O_NONBLOCK`.
    Socket { nonblocking: bool },
    /// A pipe, FIFO or eventfd dara models; `nonblocking`: its `O_NONBLOCK`.
    Pipe { nonblocking: bool },
    /// A regular file with `left` bytes after the call's input offset: a transfer from it moves
    /// at most that many (`busybox httpd` asks `sendfile` for 2^63 bytes and loops to the end).
    File { left: u64 },
}

/// One stream end of a transfer: what it waits for is posted on `fd`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Side {
    pub fd: i32,
    /// The caller does not wait on this end (its `O_NONBLOCK`, or `SPLICE_F_NONBLOCK` on a pipe).
    pub nonblocking: bool,
}

/// What a transfer on a stream waits for, in this order: data (or end of file) on `receive`,
/// room on `send`; then it runs, moving at most `count` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    pub receive: Option<Side>,
    pub send: Option<Side>,
    pub count: u64,
}

impl Plan {
    /// Whether the caller waits until the call moves something (no end is non-blocking): such a
    /// call that finds nothing to move posts again instead of returning `EAGAIN`.
    pub fn blocking(&self) -> bool {
        !self.receive.iter().chain(self.send.iter()).any(|s| s.nonblocking)
    }

    /// The stream descriptors, input first.
    pub fn ends(&self) -> impl Iterator<Item = i32> + '_ {
        self.receive.iter().chain(self.send.iter()).map(|s| s.fd)
    }
}

/// The plan of `call` with arguments `a`, `end` saying what a descriptor is; None when no end is
/// a stream (the call runs as it is).
pub fn plan(call: TransferCall, a: [u64; 6], end: impl Fn(i32) -> End) -> Option<Plan> {
    if call == TransferCall::CopyFileRange {
        return None;
    }
    let ops = call.operands(a);
    let side = |fd: i32| match end(fd) {
        End::Other | End::File { .. } => None,
        End::Socket { nonblocking } => Some(Side { fd, nonblocking }),
        End::Pipe { nonblocking } => Some(Side { fd, nonblocking: nonblocking || ops.flags & SPLICE_F_NONBLOCK != 0 }),
    };
    let (receive, send) = (side(ops.input), side(ops.output));
    let count = match end(ops.input) {
        End::File { left } => ops.count.min(left),
        _ => ops.count,
    };
    (receive.is_some() || send.is_some()).then_some(Plan { receive, send, count })
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: i32 = 3;
    const SOCKET: i32 = 4;
    const PIPE: i32 = 5;
    const SHORT_FILE: i32 = 6;

    fn end(fd: i32) -> End {
        match fd {
            SOCKET => End::Socket { nonblocking: false },
            PIPE => End::Pipe { nonblocking: false },
            SHORT_FILE => End::File { left: 10 },
            _ => End::Other,
        }
    }

    #[test]
    fn a_sendfile_to_a_socket_is_a_send_of_its_count() {
        let p = plan(TransferCall::Sendfile, [SOCKET as u64, FILE as u64, 0, 4096, 0, 0], end).expect("a stream");
        assert_eq!(p, Plan { receive: None, send: Some(Side { fd: SOCKET, nonblocking: false }), count: 4096 });
        assert!(p.blocking());
        assert_eq!(plan(TransferCall::Sendfile, [FILE as u64, FILE as u64, 0, 4096, 0, 0], end), None);
        let short = plan(TransferCall::Sendfile, [SOCKET as u64, SHORT_FILE as u64, 0, u64::MAX >> 1, 0, 0], end).expect("a stream");
        assert_eq!(short.count, 10, "at most what the file has left");
    }

    #[test]
    fn a_splice_from_a_pipe_to_a_socket_waits_for_data_then_room() {
        let p = plan(TransferCall::Splice, [PIPE as u64, 0, SOCKET as u64, 0, 100, 0], end).expect("a stream");
        assert_eq!((p.receive.map(|s| s.fd), p.send.map(|s| s.fd), p.count), (Some(PIPE), Some(SOCKET), 100));
        let mut ends = p.ends();
        assert_eq!((ends.next(), ends.next(), ends.next()), (Some(PIPE), Some(SOCKET), None));
        let nonblocking = plan(TransferCall::Splice, [PIPE as u64, 0, SOCKET as u64, 0, 100, SPLICE_F_NONBLOCK], end).expect("a stream");
        assert!(!nonblocking.blocking());
        let tee = plan(TransferCall::Tee, [PIPE as u64, PIPE as u64, 7, 0, 0, 0], end).expect("a stream");
        assert_eq!((tee.receive.is_some(), tee.send.is_some(), tee.count), (true, true, 7));
    }

    #[test]
    fn copy_file_range_never_waits_on_a_stream() {
        assert_eq!(plan(TransferCall::CopyFileRange, [PIPE as u64, 0, SOCKET as u64, 0, 100, 0], end), None);
        for call in [TransferCall::Sendfile, TransferCall::Splice, TransferCall::Tee, TransferCall::CopyFileRange] {
            assert_eq!(TransferCall::of_syscall(call.nr()), Some(call));
        }
    }
}
