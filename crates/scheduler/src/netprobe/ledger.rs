//! The ledger of owed deliveries: work a granted network operation leaves ([`Settle`]), the
//! `TCP_INFO` snapshot settling reads, pushing held-back bytes, and waiting until sent bytes
//! arrive (or a listener's queue fills).

use super::*;


/// How many bytes a loopback socket of dara's own with these (local, remote) ports has received,
/// if dara has one (the relay's end of a connection it relays to the program): a send to it
/// settles by one `TCP_INFO` read of dara's own socket instead of a sock_diag round trip.
pub type OwnReceived<'a> = &'a dyn Fn(u16, u16) -> Option<u64>;

/// Work left by a granted network operation, done at the next quiet point.
#[derive(Debug)]
pub(super) struct Settle {
    pub(super) pid: u32,
    pub(super) request: Request,
    pub(super) timed_out: bool,
    /// A UDP send whose destination port had a socket bound when it was granted: that port.
    pub(super) datagram_to: Option<u16>,
    /// A send made without a post: the socket's (local port, peer port, bytes sent in all), as
    /// the sending thread saw them.
    pub(super) sent_total: Option<(u16, u16, u64)>,
    /// A granted send: the socket it was granted on, taken before the sender ran. By the settle
    /// the descriptor number may name something else (bash points descriptor 1 at a socket for
    /// one write and back at its stdout before its next scheduling point).
    pub(super) sender: Option<OwnedFd>,
    /// A granted connect: the address it goes to, read before the connecting thread ran.
    pub(super) connect_to: Option<std::net::SocketAddr>,
    /// A UDP send or connect to a port several sockets share: what they held before the thread
    /// ran (see `groups`).
    pub(super) group_mark: Option<u64>,
}

/// What a send may offer when the window is not known.
pub(super) const DEFAULT_SEND_ROOM: usize = 16 * 1024;

/// The fields of one `TCP_INFO` read that settling uses.
#[derive(Clone, Copy, Debug)]
pub(super) struct TcpSnapshot {
    pub(super) state: u8,
    /// Bytes sent once (retransmissions not counted twice), acknowledged, and not sent yet.
    pub(super) sent: u64,
    pub(super) acked: u64,
    pub(super) not_sent: u64,
    /// Bytes received (`tcpi_bytes_received`; a FIN counts as one).
    pub(super) received: u64,
    /// The peer's advertised receive window (None where the kernel does not say: `tcp_info`
    /// has `tcpi_snd_wnd` since Linux 5.4). Zero is a full window, not an unknown one.
    pub(super) window: Option<u64>,
    /// The largest segment the socket sends (`tcpi_snd_mss`).
    pub(super) segment: u64,
}

impl TcpSnapshot {
    pub(super) fn of(fd: &OwnedFd) -> Option<TcpSnapshot> {
        let long = tcp_info_field::<{ tcpi::SND_WND + 4 }>(fd, 0);
        match long {
            Some(info) => Self::from_info(&info),
            None => Self::from_info(&tcp_info_field::<{ tcpi::BYTES_RETRANS + 8 }>(fd, 0)?),
        }
    }

    /// From a `struct tcp_info` as long as the kernel made it (one from sock_diag, say); None
    /// when it is too short to say what was sent.
    pub(super) fn from_info(given: &[u8]) -> Option<TcpSnapshot> {
        if given.len() < tcpi::BYTES_RETRANS + 8 {
            return None;
        }
        let window_known = given.len() >= tcpi::SND_WND + 4;
        let mut info = [0u8; tcpi::SND_WND + 4];
        let n = given.len().min(info.len());
        info[..n].copy_from_slice(&given[..n]);
        let u64_at = |offset: usize| u64::from_ne_bytes(info[offset..offset + 8].try_into().expect("8 bytes"));
        let u32_at = |offset: usize| u64::from(u32::from_ne_bytes(info[offset..offset + 4].try_into().expect("4 bytes")));
        Some(TcpSnapshot {
            state: info[0],
            sent: u64_at(tcpi::BYTES_SENT).saturating_sub(u64_at(tcpi::BYTES_RETRANS)),
            acked: u64_at(tcpi::BYTES_ACKED),
            not_sent: u32_at(tcpi::NOTSENT_BYTES),
            received: u64_at(tcpi::BYTES_RECEIVED),
            window: window_known.then(|| u32_at(tcpi::SND_WND)),
            segment: u32_at(tcpi::SND_MSS),
        })
    }

    /// Bytes written and not acknowledged (in flight or not sent yet): `SIOCOUTQ`.
    pub(super) fn queued(&self) -> u64 {
        self.sent.saturating_sub(self.acked) + self.not_sent
    }

    /// Whether bytes written are not sent yet although the peer's window has room for them: held
    /// back by Nagle's algorithm (a small write while earlier bytes wait for an ACK the peer
    /// delays by 40 ms or more), a cork, or the congestion window. They leave without the
    /// receiver reading: a push ([`push_held`]) or the peer's next ACK sends them. Bytes beyond
    /// the peer's window wait for its read instead (docs/networking.md, "Not yet"), and so do
    /// bytes behind a window with room for less than a segment of them: Linux does not send a
    /// piece smaller than its segment size into a window that has not room for a whole one
    /// (silly-window avoidance), and the peer's delayed ACK, up to 200 ms later, opens no room
    /// until its reader reads (a writer 1 MiB ahead of its reader waited 250 ms a send for it).
    pub(super) fn holds_back(&self) -> bool {
        let in_flight = self.sent.saturating_sub(self.acked);
        let piece = self.not_sent.min(self.segment).max(1);
        self.not_sent > 0 && self.window.is_some_and(|w| w.saturating_sub(in_flight) >= piece)
    }

    /// Whether this writer sends nothing more until its peer's reader reads: the peer has
    /// `received` every byte it transmitted, and it holds the rest because the peer's window has
    /// no room for a segment of them (not held back while there is room: [`Self::holds_back`]).
    /// Only a window update brings them, and when the reader has mostly read a segment only its
    /// next read sends one (`unread`). False when the kernel does not tell the window.
    pub(super) fn waits_for_reader(&self, received: u64) -> bool {
        self.window.is_some() && self.not_sent > 0 && !self.holds_back() && received >= self.sent
    }

    /// Room the peer's window has for more bytes beyond those written and not acknowledged;
    /// None when the kernel does not say.
    pub(super) fn room(&self) -> Option<u64> {
        self.window.map(|w| w.saturating_sub(self.queued()))
    }
}

/// Sends at once what TCP socket `fd` holds back in its send queue (see
/// [`TcpSnapshot::holds_back`]): setting `TCP_NODELAY` pushes the queued segments out (Linux
/// `__tcp_sock_set_nodelay`, which overrides a cork for what is queued); the option is then put
/// back as the program had it. Without the push, when the bytes reach the peer would depend on
/// the peer's delayed-ACK timer, in real time.
pub(super) fn push_held(fd: &OwnedFd) {
    let option = |value: libc::c_int| {
        // SAFETY: sets one int option from a live local.
        unsafe { libc::setsockopt(fd.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_NODELAY, (&value as *const libc::c_int).cast(), std::mem::size_of::<libc::c_int>() as libc::socklen_t) }
    };
    let mut was: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: reads one int option into a live local.
    let known = unsafe { libc::getsockopt(fd.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_NODELAY, (&mut was as *mut libc::c_int).cast(), &mut len) } == 0;
    option(1);
    if known && was == 0 {
        option(0);
    }
}

/// Waits until listening socket `fd` holds at least `count` connections, bounded by
/// [`SETTLE_LIMIT`].
pub(crate) fn wait_queued(fd: &OwnedFd, count: u32) -> Result<(), ProbeError> {
    let started = Instant::now();
    while accept_queue(fd) < count {
        if started.elapsed() > SETTLE_LIMIT {
            return Err(ProbeError(format!("a connection dara made to the program's listening socket did not reach its accept queue within {} ms; the run was stopped", SETTLE_LIMIT.as_millis())));
        }
        std::thread::yield_now();
    }
    Ok(())
}

/// TCP states in which a FIN we sent is not acknowledged yet.
pub(super) const FIN_IN_FLIGHT: [u8; 3] = [4 /* FIN_WAIT1 */, 9 /* LAST_ACK */, 11 /* CLOSING */];
/// TCP states of a peer that has not received our FIN.
pub(super) const FIN_NOT_SEEN: [u8; 3] = [1 /* ESTABLISHED */, 4 /* FIN_WAIT1 */, 5 /* FIN_WAIT2 */];


/// Whether every byte sent on the loopback TCP socket `fd` (addresses `addrs`, looked up when
/// not given), and its FIN once one was sent if `with_fin`, is in the peer's receive queue: acknowledged, or
/// counted by the peer itself (sock_diag: no waiting for an ACK the peer may delay by 40 ms), or
/// the connection is over (a peer that had closed answers with a reset). Bytes the socket holds
/// back are pushed out first: every byte written counts, not only those the kernel transmitted.
/// One `TCP_INFO` read when everything is acknowledged.
pub(super) fn sent_bytes_arrived(fd: &OwnedFd, addrs: Option<AddressPair>, diag: Option<&SockDiag>, with_fin: bool, own: OwnReceived) -> bool {
    arrival(fd, addrs, diag, with_fin, Unsent::WaitsForTheReader, own).is_some()
}

/// What a settle makes of bytes the sender holds because the peer's window has no room for
/// them (not those it holds back while there is room: see [`TcpSnapshot::holds_back`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Unsent {
    /// They wait for the peer's reader, whose next receive opens the window: a traced sender's
    /// bytes, which the reader's receive grants wait for (docs/networking.md).
    WaitsForTheReader,
    /// Nothing is settled until they are in the peer's queue too: dara's relay delivering to the
    /// program, which takes them without a step (a coarse receive) as soon as they show, so bytes
    /// left behind the window would land while the program runs, when its reads open it.
    MustArrive,
}

/// [`sent_bytes_arrived`], and if so the room the peer's window had for more bytes as the last
/// `TCP_INFO` read saw it (0 when the kernel did not say): a lower bound while nobody but the
/// peer's reader touches the connection, since reading only opens the window.
pub(super) fn arrival(fd: &OwnedFd, addrs: Option<AddressPair>, diag: Option<&SockDiag>, with_fin: bool, unsent: Unsent, own: OwnReceived) -> Option<usize> {
    let Some(mut t) = TcpSnapshot::of(fd) else { return Some(0) };
    if t.holds_back() {
        push_held(fd);
        let Some(pushed) = TcpSnapshot::of(fd) else { return Some(0) };
        t = pushed;
    }
    let room = t.room().unwrap_or(0) as usize;
    let fin = with_fin && FIN_IN_FLIGHT.contains(&t.state);
    if t.state == TCP_CLOSE || (t.queued() == 0 && !fin) {
        return Some(room);
    }
    if t.holds_back() {
        return None; // the congestion window: the peer's next ACK sends them
    }
    if unsent == Unsent::MustArrive && t.not_sent > 0 {
        // Behind the peer's window as this socket last heard of it: the peer's ACK of what is
        // in flight (or, with nothing in flight, the kernel's window probe) brings the room its
        // free buffer has.
        return None;
    }
    let (local, remote) = addrs.or_else(|| addresses(fd))?;
    if let (false, Some(received)) = (fin, own(remote.port(), local.port())) {
        return (received >= t.sent).then_some(room);
    }
    match diag?.receiving(remote, local)? {
        // The exact lookup falls back to the listener when the connection is gone: nothing will
        // ever take the bytes, so there is nothing to wait for.
        peer if peer.state == TCP_LISTEN => Some(room),
        peer => (peer.received >= t.sent && !(fin && FIN_NOT_SEEN.contains(&peer.state))).then_some(room),
    }
}

/// A send made without a post, to a peer that is dara's own socket (`total`: the sender's local
/// port, peer port and bytes written in all, sent or still queued): whether dara's socket has
/// received them all already (the usual case: loopback delivers inside the send). Otherwise, or
/// when the peer is not dara's or the count is unknown, the caller settles the send by looking
/// at the sender, which pushes bytes Nagle holds back and waits for the rest.
pub(super) fn own_received_all((local, peer, sent): (u16, u16, u64), own: OwnReceived) -> Result<bool, ProbeError> {
    Ok(sent != u64::MAX && own(peer, local).is_some_and(|received| received >= sent))
}

/// Waits until everything written to dara's relay socket `fd` (addresses `addrs`; bytes and a
/// FIN), sent or still held behind the program's window, is in the program's receive queue, or
/// the connection is over; bounded by [`SETTLE_LIMIT`] from `started`. Returns the room the
/// program's receive window then had for more (see [`arrival`]; 0 when unknown).
pub(crate) fn wait_acknowledged(fd: &OwnedFd, addrs: Option<AddressPair>, diag: Option<&SockDiag>, started: Instant) -> Result<usize, ProbeError> {
    loop {
        if let Some(room) = arrival(fd, addrs, diag, true, Unsent::MustArrive, &|_, _| None) {
            return Ok(room);
        }
        if started.elapsed() > SETTLE_LIMIT {
            return Err(ProbeError(format!("bytes dara relayed from an outside peer did not all reach the program's receive queue within {} ms (its receive buffer has no room for them: a recording made by dara before 2026-11-30 may hand over more at once than a replay's buffer takes; record it again); the run was stopped", SETTLE_LIMIT.as_millis())));
        }
        std::thread::yield_now();
    }
}

/// The receiving side of the peer of dara's relay socket `fd` (addresses `addrs`, looked up when
/// not given), the program's end: what it holds unread and its buffer; None when the kernel does
/// not say (no sock_diag, or the connection is gone).
pub(crate) fn peer_receiving(fd: &OwnedFd, addrs: Option<AddressPair>, diag: Option<&SockDiag>) -> Option<crate::sockdiag::Receiving> {
    let (local, remote) = addrs.or_else(|| addresses(fd))?;
    diag?.receiving(remote, local).filter(|peer| peer.state != TCP_LISTEN)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::{TcpListener, TcpStream};

    const SIOCOUTQ: libc::c_ulong = 0x5411;
    const SIOCOUTQNSD: libc::c_ulong = 0x894B;

    /// A send on loopback settles by one `TCP_INFO` read (acknowledged) or by asking the peer
    /// (sock_diag) when it delays its ACK; either way the bytes are then in its receive queue.
    #[test]
    fn loopback_bytes_settle_into_the_peers_queue() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut sender = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let receiver = OwnedFd::from(listener.accept().unwrap().0);
        let fd = OwnedFd::from(sender.try_clone().unwrap());
        assert!(send_window(&fd) > 1000, "an idle connection has room");
        sender.write_all(&[7u8; 1000]).unwrap();
        let diag = SockDiag::open();
        let started = Instant::now();
        while !sent_bytes_arrived(&fd, addresses(&fd), diag.as_ref(), false, &|_, _| None) {
            assert!(started.elapsed() < SETTLE_LIMIT, "1000 bytes never reached the peer");
            std::thread::yield_now();
        }
        assert_eq!(inq(&receiver), 1000);
        assert_eq!(TcpSnapshot::of(&fd).unwrap().sent, 1000);
    }

    /// A small write behind bytes the peer has not acknowledged yet waits in the sender's queue
    /// (Nagle's algorithm) until the peer's delayed ACK, some 40 ms later. The settle pushes it
    /// out, so both writes are in the peer's queue, and leaves TCP_NODELAY as the program had it.
    #[test]
    fn bytes_held_back_by_nagle_are_pushed_into_the_peers_queue() {
        let nodelay = |fd: &OwnedFd| {
            let (mut v, mut len) = (0 as libc::c_int, std::mem::size_of::<libc::c_int>() as libc::socklen_t);
            // SAFETY: reads one int option into a live local.
            unsafe { libc::getsockopt(fd.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_NODELAY, (&mut v as *mut libc::c_int).cast(), &mut len) };
            v
        };
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut sender = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let receiver = OwnedFd::from(listener.accept().unwrap().0);
        let off: libc::c_int = 0;
        // SAFETY: sets one int option from a live local: the receiver delays its ACKs, as a
        // server does once it has answered.
        unsafe { libc::setsockopt(receiver.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_QUICKACK, (&off as *const libc::c_int).cast(), std::mem::size_of::<libc::c_int>() as libc::socklen_t) };
        let fd = OwnedFd::from(sender.try_clone().unwrap());
        let diag = SockDiag::open();
        let settle = || {
            let started = Instant::now();
            while !sent_bytes_arrived(&fd, addresses(&fd), diag.as_ref(), false, &|_, _| None) {
                assert!(started.elapsed() < SETTLE_LIMIT, "the bytes never reached the peer");
                std::thread::yield_now();
            }
        };
        sender.write_all(b"GET ").unwrap();
        settle();
        sender.write_all(b"key1").unwrap();
        settle();
        assert_eq!(inq(&receiver), 8, "the second write is in the peer's queue too");
        assert_eq!(nodelay(&fd), 0, "Nagle's algorithm is on again, as the program had it");
    }

    /// Held back (a push or the peer's next ACK sends them) or waiting for the peer's reader: the
    /// windows and queues seen while `sendfile_stream` wrote 1 MiB ahead of its reader.
    #[test]
    fn bytes_behind_a_window_with_room_for_less_than_a_segment_wait_for_the_reader() {
        let snapshot = |sent, acked, not_sent, window| TcpSnapshot { state: 1, sent, acked, not_sent, received: 0, window: Some(window), segment: 47_616 };
        assert!(!snapshot(113_152, 32_768, 935_424, 95_232).holds_back(), "14,848 bytes of room, a segment is 47,616");
        assert!(!snapshot(256_000, 256_000, 956_416, 0).holds_back(), "a full window");
        assert!(snapshot(4, 0, 4, 65_000).holds_back(), "a small write behind an unacknowledged one: Nagle");
        assert!(snapshot(0, 0, 100_000, 65_000).holds_back(), "room for a whole segment");
        assert!(!TcpSnapshot { window: None, ..snapshot(0, 0, 100, 0) }.holds_back(), "the kernel did not say");
    }

    /// A reader's probe ends its wait for the rest of a grant when the writer waits for it: the
    /// rsync daemon's writer (its window shut by 1,294 bytes the reader left of a segment) against
    /// writers whose bytes are on their way or that hold them back with room to send.
    #[test]
    fn a_writer_behind_a_shut_window_with_nothing_in_flight_waits_for_the_reader() {
        let writer = |sent, acked, not_sent, window| TcpSnapshot { state: 1, sent, acked, not_sent, received: 0, window: Some(window), segment: 65_483 };
        assert!(writer(138_193, 138_193, 677_500, 0).waits_for_reader(138_193), "a shut window, everything transmitted received");
        assert!(!writer(200_000, 150_000, 600_000, 0).waits_for_reader(150_000), "50,000 bytes on their way");
        assert!(!writer(100_000, 100_000, 4, 65_000).waits_for_reader(100_000), "held back by Nagle with room: pushed by the send's settle");
        assert!(!writer(100_000, 100_000, 0, 0).waits_for_reader(100_000), "nothing left to send");
        assert!(!TcpSnapshot { window: None, ..writer(100_000, 100_000, 500, 0) }.waits_for_reader(100_000), "the kernel did not say");
    }

    /// sock_diag's `tcp_info` of a socket dara holds no descriptor of reads as its own does: how
    /// the probe looks at a traced reader's writer.
    #[test]
    fn a_writer_s_tcp_info_by_sock_diag_reads_as_its_own() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut writer = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (reader, _) = listener.accept().unwrap();
        let Some(diag) = SockDiag::open() else { return };
        writer.write_all(&[1u8; 1000]).unwrap();
        let fd = OwnedFd::from(writer.try_clone().unwrap());
        let started = Instant::now();
        while inq(&OwnedFd::from(reader.try_clone().unwrap())) < 1000 {
            assert!(started.elapsed() < SETTLE_LIMIT, "1000 bytes never reached the peer");
            std::thread::yield_now();
        }
        let own = TcpSnapshot::of(&fd).expect("TCP_INFO");
        let info = diag.tcp_info(writer.local_addr().unwrap(), writer.peer_addr().unwrap()).expect("sock_diag knows the writer");
        let asked = TcpSnapshot::from_info(&info).expect("a whole tcp_info");
        assert_eq!((asked.state, asked.sent, asked.not_sent, asked.segment), (own.state, own.sent, own.not_sent, own.segment));
        assert_eq!(asked.window.is_some(), own.window.is_some());
    }

    /// What the relay asks of the program's end before a delivery (sock_diag): the bytes it holds
    /// unread, and its buffer, here one the program made smaller (the kernel doubles `SO_RCVBUF`).
    #[test]
    fn the_peer_s_unread_bytes_and_buffer_are_known() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let receiver = nix::sys::socket::socket(nix::sys::socket::AddressFamily::Inet, nix::sys::socket::SockType::Stream, nix::sys::socket::SockFlag::empty(), None).unwrap();
        nix::sys::socket::setsockopt(&receiver, nix::sys::socket::sockopt::RcvBuf, &16_384).unwrap();
        nix::sys::socket::connect(receiver.as_raw_fd(), &nix::sys::socket::SockaddrIn::from(match listener.local_addr().unwrap() {
            std::net::SocketAddr::V4(a) => a,
            _ => unreachable!(),
        }))
        .unwrap();
        let mut sender = listener.accept().unwrap().0;
        let fd = OwnedFd::from(sender.try_clone().unwrap());
        let Some(diag) = SockDiag::open() else { return };
        sender.write_all(&[1u8; 1000]).unwrap();
        let started = Instant::now();
        while inq(&receiver) < 1000 {
            assert!(started.elapsed() < SETTLE_LIMIT, "1000 bytes never reached the peer");
            std::thread::yield_now();
        }
        let peer = peer_receiving(&fd, addresses(&fd), Some(&diag)).expect("the peer's end is known");
        assert_eq!((peer.queued, peer.buffer), (1000, Some(32_768)));
        let mut read = [0u8; 1000];
        // SAFETY: reads at most 1000 bytes into a live buffer.
        assert_eq!(unsafe { libc::recv(receiver.as_raw_fd(), read.as_mut_ptr().cast(), read.len(), 0) }, 1000);
        assert_eq!(peer_receiving(&fd, addresses(&fd), Some(&diag)).map(|p| p.queued), Some(0));
    }

    /// Bytes sent to a peer that already closed are never acknowledged (the queues stay apart)
    /// but the reset closes the connection: that is what ends a send's settling.
    #[test]
    fn a_send_to_a_closed_peer_settles_on_the_reset() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut sender = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        drop(listener.accept().unwrap().0);
        let fd = OwnedFd::from(sender.try_clone().unwrap());
        assert_ne!(tcp_state(&fd), Some(TCP_CLOSE), "only the peer closed so far");
        sender.write_all(b"OK\n").unwrap();
        let started = Instant::now();
        while tcp_state(&fd) != Some(TCP_CLOSE) {
            assert!(started.elapsed() < SETTLE_LIMIT, "no reset from the closed peer");
            std::thread::yield_now();
        }
        assert_ne!(ioctl_int(&fd, SIOCOUTQ), ioctl_int(&fd, SIOCOUTQNSD), "the reset bytes stay unacknowledged");
    }
}

