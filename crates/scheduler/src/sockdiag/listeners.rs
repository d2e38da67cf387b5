//! The listening sockets of the machine's network namespace with their accept queues, from one
//! sock_diag dump each for IPv4 TCP, IPv6 TCP and Unix-domain sockets.
//!
//! Why: a blocking `connect` to a listener whose backlog is full waits in the kernel (TCP drops
//! the SYN and retransmits it a second or more later; a Unix socket sleeps until an `accept`).
//! The scheduler must know before it grants the connect. A listener's queue is `queued`
//! connections and full when `queued > backlog` (the kernel's `sk_acceptq_is_full`, and
//! `unix_recvq_full` for Unix sockets): `listen(fd, 0)` holds one connection.
use std::net::SocketAddr;
use std::os::fd::AsRawFd;

use super::{InetDiagReqV2, InetDiagSockId, NlMsgHdr, SockDiag, NLMSG_ERROR, SOCK_DIAG_BY_FAMILY};

const NLM_F_DUMP: u16 = 0x300;
const NLMSG_DONE: u16 = 3;
/// `1 << TCP_LISTEN`: the state filter of a dump (Unix listeners are in `TCP_LISTEN` too).
const LISTENING: u32 = 1 << 10;
/// `UDIAG_SHOW_NAME | UDIAG_SHOW_VFS | UDIAG_SHOW_RQLEN`.
const UNIX_SHOW: u32 = 1 | 2 | 16;
const UNIX_DIAG_NAME: u16 = 0;
const UNIX_DIAG_VFS: u16 = 1;
const UNIX_DIAG_RQLEN: u16 = 4;

/// A listening TCP socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InetListener {
    pub inode: u64,
    /// Its address (an unspecified IP listens on every address of its family).
    pub local: SocketAddr,
    /// Connections in its accept queue.
    pub queued: u32,
    /// Its `listen` backlog (as the kernel capped it).
    pub backlog: u32,
}

/// A listening Unix-domain socket (stream or seqpacket).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnixListener {
    pub inode: u64,
    /// The name it is bound to as the kernel keeps it: a path (as given to `bind`), or an
    /// abstract name starting with a NUL byte.
    pub name: Vec<u8>,
    /// Inode and device of the file a path-bound socket made (None when abstract).
    pub file: Option<(u32, u32)>,
    pub queued: u32,
    pub backlog: u32,
}

/// Whether a listener with `queued` connections and `backlog` takes no more now.
pub fn is_full(queued: u32, backlog: u32) -> bool {
    queued > backlog
}

#[repr(C)]
struct InetDump {
    header: NlMsgHdr,
    body: InetDiagReqV2,
}

#[repr(C)]
struct UnixDiagReq {
    family: u8,
    protocol: u8,
    pad: u16,
    states: u32,
    ino: u32,
    show: u32,
    cookie: [u32; 2],
}

#[repr(C)]
struct UnixDump {
    header: NlMsgHdr,
    body: UnixDiagReq,
}

fn word(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// The netlink attributes (kind, payload) that follow a message's fixed part of `fixed` bytes.
fn attributes(msg: &[u8], fixed: usize) -> Vec<(u16, &[u8])> {
    let mut out = Vec::new();
    let mut at = fixed;
    while at + 4 <= msg.len() {
        let len = u16::from_ne_bytes([msg[at], msg[at + 1]]) as usize;
        let kind = u16::from_ne_bytes([msg[at + 2], msg[at + 3]]);
        if len < 4 || at + len > msg.len() {
            break;
        }
        out.push((kind, &msg[at + 4..at + len]));
        at += (len + 3) & !3;
    }
    out
}

impl SockDiag {
    /// Sends a dump request (the bytes of a live repr(C) value) and hands each answer's payload
    /// to `each`. None when the kernel refused or the answer broke off.
    fn dump<T>(&self, request: &T, each: &mut dyn FnMut(&[u8])) -> Option<()> {
        // SAFETY: sends the bytes of a live, fully initialised repr(C) value.
        let sent = unsafe { libc::send(self.fd.as_raw_fd(), (request as *const T).cast(), std::mem::size_of::<T>(), 0) };
        if sent < 0 {
            return None;
        }
        let mut buf = vec![0u8; 32 * 1024];
        loop {
            // SAFETY: receives into a live buffer of the given length.
            let n = unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            let got = buf.get(..usize::try_from(n).ok()?)?;
            let mut at = 0;
            while at + std::mem::size_of::<NlMsgHdr>() <= got.len() {
                let len = word(got, at)? as usize;
                let kind = u16::from_ne_bytes([got[at + 4], got[at + 5]]);
                match kind {
                    NLMSG_DONE => return Some(()),
                    NLMSG_ERROR => return None,
                    _ => {}
                }
                each(got.get(at + std::mem::size_of::<NlMsgHdr>()..at + len)?);
                at += (len.max(std::mem::size_of::<NlMsgHdr>()) + 3) & !3;
            }
        }
    }

    /// Every listening TCP socket of `family` (`AF_INET` or `AF_INET6`).
    pub fn inet_listeners(&self, family: libc::c_int) -> Vec<InetListener> {
        let id = InetDiagSockId { sport: [0; 2], dport: [0; 2], src: [0; 16], dst: [0; 16], interface: 0, cookie: [u32::MAX; 2] };
        let request = InetDump {
            header: NlMsgHdr { len: std::mem::size_of::<InetDump>() as u32, kind: SOCK_DIAG_BY_FAMILY, flags: libc::NLM_F_REQUEST as u16 | NLM_F_DUMP, seq: 2, pid: 0 },
            body: InetDiagReqV2 { family: family as u8, protocol: libc::IPPROTO_TCP as u8, ext: 0, pad: 0, states: LISTENING, id },
        };
        let mut out = Vec::new();
        // `struct inet_diag_msg`: family at 0, the source port (big-endian) at 4, the source
        // address at 8, rqueue (queued) at 56, wqueue (backlog) at 60, inode at 68.
        let _ = self.dump(&request, &mut |msg| {
            let (Some(port), Some(ip), Some(queued), Some(backlog), Some(inode)) =
                (msg.get(4..6), msg.get(8..24), word(msg, 56), word(msg, 60), word(msg, 68))
            else {
                return;
            };
            let port = u16::from_be_bytes([port[0], port[1]]);
            let local = if family == libc::AF_INET {
                SocketAddr::from(([ip[0], ip[1], ip[2], ip[3]], port))
            } else {
                SocketAddr::from((<[u8; 16]>::try_from(ip).unwrap_or_default(), port))
            };
            out.push(InetListener { inode: u64::from(inode), local, queued, backlog });
        });
        out
    }

    /// Every listening Unix-domain socket.
    pub fn unix_listeners(&self) -> Vec<UnixListener> {
        let request = UnixDump {
            header: NlMsgHdr { len: std::mem::size_of::<UnixDump>() as u32, kind: SOCK_DIAG_BY_FAMILY, flags: libc::NLM_F_REQUEST as u16 | NLM_F_DUMP, seq: 3, pid: 0 },
            body: UnixDiagReq { family: libc::AF_UNIX as u8, protocol: 0, pad: 0, states: LISTENING, ino: 0, show: UNIX_SHOW, cookie: [u32::MAX; 2] },
        };
        let mut out = Vec::new();
        // `struct unix_diag_msg` (16 bytes): the inode at 4; then the attributes asked for.
        let _ = self.dump(&request, &mut |msg| {
            let Some(inode) = word(msg, 4) else { return };
            let mut l = UnixListener { inode: u64::from(inode), name: Vec::new(), file: None, queued: 0, backlog: 0 };
            for (kind, payload) in attributes(msg, 16) {
                match kind {
                    // A path comes with its terminating NUL (and padding): cut there.
                    UNIX_DIAG_NAME if payload.first() == Some(&0) => l.name = payload.to_vec(),
                    UNIX_DIAG_NAME => l.name = payload.split(|&b| b == 0).next().unwrap_or_default().to_vec(),
                    UNIX_DIAG_VFS => l.file = word(payload, 0).zip(word(payload, 4)),
                    UNIX_DIAG_RQLEN => (l.queued, l.backlog) = (word(payload, 0).unwrap_or(0), word(payload, 4).unwrap_or(0)),
                    _ => {}
                }
            }
            out.push(l);
        });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::{UnixListener as StdUnix, UnixStream};

    #[test]
    fn a_tcp_listener_shows_its_backlog_and_queue() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let _c = std::net::TcpStream::connect(addr).unwrap();
        let diag = SockDiag::open().unwrap();
        // Loopback may finish the handshake in a softirq a moment later.
        let found = (0..1000)
            .find_map(|_| diag.inet_listeners(libc::AF_INET).into_iter().find(|x| x.local == addr && x.queued == 1).or_else(|| {
                std::thread::yield_now();
                None
            }))
            .expect("the listener with one queued connection");
        assert!(found.backlog >= 1);
        assert!(!is_full(found.queued, found.backlog));
    }

    #[test]
    fn a_unix_listener_shows_its_file_backlog_and_queue() {
        let dir = std::env::temp_dir().join(format!("dara-diag-{}", std::process::id()));
        let _ = std::fs::remove_file(&dir);
        let l = StdUnix::bind(&dir).unwrap();
        let _c = UnixStream::connect(&dir).unwrap();
        let diag = SockDiag::open().unwrap();
        let st = std::fs::metadata(&dir).unwrap();
        use std::os::unix::fs::MetadataExt;
        let found = diag.unix_listeners().into_iter().find(|x| x.file.is_some_and(|(ino, _)| u64::from(ino) == st.ino())).expect("the listener by its file");
        assert_eq!(found.queued, 1);
        assert!(found.backlog >= 1 && !is_full(found.queued, found.backlog));
        assert_eq!(found.name, dir.as_os_str().as_encoded_bytes());
        drop(l);
        let _ = std::fs::remove_file(&dir);
    }
}
