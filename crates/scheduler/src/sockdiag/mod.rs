//! Asking the kernel about a TCP socket nobody handed dara a descriptor for, by its address pair:
//! one `SOCK_DIAG_BY_FAMILY` request on a netlink socket (`sock_diag(7)`), answered with the
//! socket's `tcp_info`.
//!
//! Why: a loopback send is settled once its bytes are in the peer's receive queue. Waiting for
//! the peer's acknowledgement says so too, but a peer in interactive ("ping-pong") mode delays
//! its ACK by up to 40 ms, and a request-response server is always in that mode: each exchange
//! would cost a delayed ACK. The peer's own count of bytes received says it at once.
//!
//! The same query gives the writer of a connection dara only holds the reading end of: whether it
//! waits for the reader's next read to open the window (`netprobe/unread.rs`).
//!
//! `listeners` dumps the listening sockets (TCP and Unix-domain) with their accept queues: a
//! blocking connect waits while its listener's backlog is full.
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

mod listeners;
pub use listeners::{is_full, InetListener, UnixListener};

const NETLINK_SOCK_DIAG: libc::c_int = 4;
const SOCK_DIAG_BY_FAMILY: u16 = 20;
/// `INET_DIAG_INFO`: the attribute carrying `struct tcp_info`, and its request bit.
const INET_DIAG_INFO: u16 = 2;
/// `INET_DIAG_SKMEMINFO`: the attribute carrying the socket's memory counters (`SK_MEMINFO_*`, u32
/// each), of which dara reads the receive buffer's size.
const INET_DIAG_SKMEMINFO: u16 = 7;
const SK_MEMINFO_RCVBUF: usize = 1;
const NLMSG_ERROR: u16 = 2;
/// Offsets of the fields dara reads in `struct tcp_info` (from `getsockopt(TCP_INFO)` or a
/// sock_diag answer; checked against the C headers of Linux 6).
pub(crate) mod tcpi {
    /// The sender's maximum segment size.
    pub const SND_MSS: usize = 16;
    /// For a listening socket: the length of its accept queue.
    pub const UNACKED: usize = 24;
    /// For a listening socket: its backlog.
    pub const SACKED: usize = 28;
    pub const BYTES_ACKED: usize = 120;
    pub const BYTES_RECEIVED: usize = 128;
    pub const NOTSENT_BYTES: usize = 144;
    pub const BYTES_SENT: usize = 200;
    pub const BYTES_RETRANS: usize = 208;
    /// The peer's advertised receive window (Linux 5.4 and later).
    pub const SND_WND: usize = 228;
}
/// Size of `struct inet_diag_msg`, which precedes the attributes of an answer.
const DIAG_MSG_LEN: usize = 72;
/// Offset of `idiag_rqueue` in `struct inet_diag_msg`: for a connected TCP socket the bytes
/// received and not read yet (`rcv_nxt - copied_seq`, a FIN counted as one).
const DIAG_RQUEUE: usize = 56;

/// What the kernel counts of a TCP socket's receiving side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Receiving {
    /// The TCP state (`TCP_ESTABLISHED`, `TCP_LISTEN`, ...).
    pub state: u8,
    /// `tcpi_bytes_received` (a FIN counts as one).
    pub received: u64,
    /// Received and not read yet.
    pub queued: u64,
    /// The socket's receive buffer (`sk_rcvbuf`, twice what `SO_RCVBUF` set), if the kernel said.
    pub buffer: Option<u32>,
}

impl Receiving {
    /// The bytes the socket's reader has taken (a FIN it read counts as one).
    pub fn read(&self) -> u64 {
        self.received.saturating_sub(self.queued)
    }
}

#[repr(C)]
struct NlMsgHdr {
    len: u32,
    kind: u16,
    flags: u16,
    seq: u32,
    pid: u32,
}

#[repr(C)]
struct InetDiagSockId {
    sport: [u8; 2],
    dport: [u8; 2],
    src: [u8; 16],
    dst: [u8; 16],
    interface: u32,
    cookie: [u32; 2],
}

#[repr(C)]
struct InetDiagReqV2 {
    family: u8,
    protocol: u8,
    ext: u8,
    pad: u8,
    states: u32,
    id: InetDiagSockId,
}

#[repr(C)]
struct Request {
    header: NlMsgHdr,
    body: InetDiagReqV2,
}

/// A netlink socket for sock_diag queries, opened once per execution.
pub struct SockDiag {
    fd: OwnedFd,
}

impl SockDiag {
    pub fn open() -> Option<SockDiag> {
        // SAFETY: socket takes integers and returns a new descriptor or -1.
        let fd = unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, NETLINK_SOCK_DIAG) };
        // SAFETY: a descriptor socket just returned, owned by nobody else.
        (fd >= 0).then(|| SockDiag { fd: unsafe { OwnedFd::from_raw_fd(fd) } })
    }

    /// The receiving side of the socket whose local address is `local` and remote address
    /// `remote`; None when there is no such socket or the kernel does not say.
    pub fn receiving(&self, local: SocketAddr, remote: SocketAddr) -> Option<Receiving> {
        let answer = self.ask(local, remote)?;
        let info = answer.info?;
        let state = *info.first()?;
        let received = u64::from_ne_bytes(info.get(tcpi::BYTES_RECEIVED..tcpi::BYTES_RECEIVED + 8)?.try_into().ok()?);
        Some(Receiving { state, received, queued: answer.queued, buffer: answer.buffer })
    }

    /// The `struct tcp_info` of the socket whose local address is `local` and remote address
    /// `remote`, as long as this kernel's is; None when there is no such socket or the kernel does
    /// not say.
    pub fn tcp_info(&self, local: SocketAddr, remote: SocketAddr) -> Option<Vec<u8>> {
        self.ask(local, remote)?.info
    }

    /// One query about the socket with these addresses.
    fn ask(&self, local: SocketAddr, remote: SocketAddr) -> Option<Answer> {
        let mut id = InetDiagSockId { sport: local.port().to_be_bytes(), dport: remote.port().to_be_bytes(), src: [0; 16], dst: [0; 16], interface: 0, cookie: [u32::MAX; 2] };
        let family = match (local, remote) {
            (SocketAddr::V4(l), SocketAddr::V4(r)) => {
                id.src[..4].copy_from_slice(&l.ip().octets());
                id.dst[..4].copy_from_slice(&r.ip().octets());
                libc::AF_INET
            }
            (SocketAddr::V6(l), SocketAddr::V6(r)) => {
                id.src = l.ip().octets();
                id.dst = r.ip().octets();
                libc::AF_INET6
            }
            _ => return None,
        };
        let request = Request {
            header: NlMsgHdr { len: std::mem::size_of::<Request>() as u32, kind: SOCK_DIAG_BY_FAMILY, flags: libc::NLM_F_REQUEST as u16, seq: 1, pid: 0 },
            body: InetDiagReqV2 { family: family as u8, protocol: libc::IPPROTO_TCP as u8, ext: (1 << (INET_DIAG_INFO - 1)) | (1 << (INET_DIAG_SKMEMINFO - 1)), pad: 0, states: u32::MAX, id },
        };
        // SAFETY: sends the bytes of a live, fully initialised repr(C) value.
        let sent = unsafe { libc::send(self.fd.as_raw_fd(), (&request as *const Request).cast(), std::mem::size_of::<Request>(), 0) };
        if sent < 0 {
            return None;
        }
        let mut answer = [0u8; 1024];
        // SAFETY: receives into a live buffer of the given length.
        let n = unsafe { libc::recv(self.fd.as_raw_fd(), answer.as_mut_ptr().cast(), answer.len(), 0) };
        let answer = answer.get(..usize::try_from(n).ok()?)?;
        let kind = u16::from_ne_bytes(answer.get(4..6)?.try_into().ok()?);
        if kind == NLMSG_ERROR || kind != SOCK_DIAG_BY_FAMILY {
            return None;
        }
        let message = std::mem::size_of::<NlMsgHdr>();
        let queued = u64::from(u32::from_ne_bytes(answer.get(message + DIAG_RQUEUE..message + DIAG_RQUEUE + 4)?.try_into().ok()?));
        let mut at = message + DIAG_MSG_LEN;
        let (mut info, mut buffer) = (None, None);
        while at + 4 <= answer.len() {
            let len = u16::from_ne_bytes(answer[at..at + 2].try_into().ok()?) as usize;
            let kind = u16::from_ne_bytes(answer[at + 2..at + 4].try_into().ok()?);
            if len < 4 {
                return None;
            }
            let payload = answer.get(at + 4..at + len)?;
            if kind == INET_DIAG_INFO {
                info = Some(payload.to_vec());
            } else if kind == INET_DIAG_SKMEMINFO {
                let at = SK_MEMINFO_RCVBUF * 4;
                buffer = payload.get(at..at + 4).and_then(|b| b.try_into().ok()).map(u32::from_ne_bytes);
            }
            at += (len + 3) & !3;
        }
        Some(Answer { queued, info, buffer })
    }
}

/// What one sock_diag query said of a socket.
struct Answer {
    /// `idiag_rqueue` (see [`DIAG_RQUEUE`]).
    queued: u64,
    /// Its `struct tcp_info`, if the kernel sent it.
    info: Option<Vec<u8>>,
    /// `sk_rcvbuf`, if the kernel sent its memory counters.
    buffer: Option<u32>,
}
