//! The relay's TCP side: one [`Stream`] per connection relayed to the program (dara's socket to
//! the program's twin, and the client's socket unless a replay stands in for an outside client),
//! accepting clients at the public listening sockets, moving bytes both ways at quiet points,
//! and settling every delivery (acknowledged, so in the program's receive queue) before anything
//! is probed.
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Instant;

use super::{set_nonblocking, token, Relay, RelayError, Relayed, Side, CHUNK, DELIVERY_MOST, INBOUND_BUFFER, TAG_INNER, TAG_OUTER};
use crate::netprobe::{self, NetProbe};
use crate::outside::{OutsideEvent, OutsideWhat};
use crate::sockdiag::SockDiag;

impl<S: Side> Relay<S> {
    /// Takes every client waiting on listener `index`'s public socket: traced clients are relayed
    /// (recording and replay), outside ones recorded (recording) or turned away (replay).
    pub(super) fn accept_clients(&mut self, step: u64, index: usize, net: &mut NetProbe) -> Result<(), RelayError> {
        loop {
            let Some(public) = self.listeners[index].public.as_ref() else { return Ok(()) };
            // A client waits in dara's queue while the program's backlog is full: dara's connect
            // to the twin would wait in the kernel (a traced client's connect waits in the model
            // until there is room, see netprobe's `backlog`).
            if self.listeners[index].twin_socket.as_ref().is_some_and(|t| netprobe::backlog_full(t)) {
                return Ok(());
            }
            let Some(client) = accept(public) else { return Ok(()) };
            let port = self.listeners[index].public_port;
            let traced = peer_port(&client).is_some_and(|p| net.is_traced_endpoint(p, port));
            if traced {
                if let Some(server) = netprobe::socket_address(&client, false) {
                    net.connection_taken(server);
                }
            } else if !S::LIVE {
                continue; // nobody outside takes part in a replay: turned away
            }
            let peer = netprobe::socket_address(&client, true);
            self.open_stream(step, index, Some(client), !traced, peer)?;
        }
    }

    /// A new stream through listener `index`: dara connects to the twin and waits until the
    /// connection is in its accept queue, so it shows before anything that comes after it.
    /// `peer`: the client's address, shown to the program as its peer's (see [`Relay::take_relayed`]).
    pub(super) fn open_stream(&mut self, step: u64, index: usize, outer: Option<OwnedFd>, recorded: bool, peer: Option<SocketAddr>) -> Result<(), RelayError> {
        let twin = self.listeners[index].twin;
        let Some(twin_socket) = &self.listeners[index].twin_socket else {
            return Err(RelayError::Broken(format!("listening socket {index} is closed")));
        };
        netprobe::accept_without_data(twin_socket);
        let queued = netprobe::accept_queue(twin_socket);
        let inner = TcpStream::connect(twin).map_err(|e| RelayError::Broken(format!("cannot connect to the program's listening socket ({twin}): {e}")))?;
        inner.set_nodelay(true).ok();
        let inner = OwnedFd::from(inner);
        set_nonblocking(&inner)?;
        let inner_addrs = netprobe::addresses(&inner);
        netprobe::wait_queued(twin_socket, queued + 1).map_err(|e| RelayError::Broken(e.0))?;
        let stream = self.streams.len() as u64;
        if let Some((local, remote)) = inner_addrs {
            self.by_inner_ports.insert((local.port(), remote.port()), stream as usize);
            if let Some(peer) = peer {
                self.relayed.push(Relayed { relay: local, peer, datagrams: false, dialled: false });
            }
        }
        self.watch(&inner, token(TAG_INNER, stream), libc::EPOLLIN as u32)?;
        if let Some(outer) = &outer {
            set_nonblocking(outer)?;
            self.watch(outer, token(TAG_OUTER, stream), libc::EPOLLIN as u32)?;
        }
        if recorded {
            self.events.push(OutsideEvent { step, stream: stream as u32, what: OutsideWhat::Connect { listener: index as u32, peer } });
        }
        self.changed = true;
        self.streams.push(Stream::new(Some(inner), inner_addrs, outer, recorded));
        Ok(())
    }

    /// Reads what the client sent into the stream's buffer (up to its bound); notes its EOF.
    pub(super) fn from_client(&mut self, index: usize) -> Result<(), RelayError> {
        let s = &mut self.streams[index];
        let Some(outer) = &s.outer else { return Ok(()) };
        while !s.outer_eof && s.to_inner.len() < INBOUND_BUFFER {
            let max = CHUNK.min(INBOUND_BUFFER - s.to_inner.len());
            match read_some(outer, &mut s.to_inner, max) {
                Read::End => s.outer_eof = true,
                Read::Reset => (s.outer_eof, s.outer_reset) = (true, true),
                Read::Bytes(n) if n < max => break, // drained for now: the next pump hears of more
                Read::Bytes(_) => {}
                Read::Nothing => break,
            }
        }
        if s.outer_eof && s.to_outer.is_empty() && s.inner_eof {
            s.outer = None;
        }
        Ok(())
    }

    /// Writes what the stream holds for the program (at most what [`delivery_bound`] allows),
    /// settles it, and records it; then, once the client's EOF is all that is left, tells the
    /// program.
    pub(super) fn to_program(&mut self, step: u64, index: usize) -> Result<(), RelayError> {
        let s = &mut self.streams[index];
        let Some(inner) = &s.inner else { return Ok(()) };
        if !s.to_inner.is_empty() && !s.inner_eof {
            let most = delivery_bound(inner, s.inner_addrs, s.to_inner.len(), self.diag.as_ref());
            // A recorded delivery may be less (the window's room as dara's socket last heard of
            // it: the replay hands over what was recorded); a traced client's is not recorded, so
            // it is all of `most` in every run.
            let room = if s.recorded { Some(&mut s.room) } else { None };
            let n = if most == 0 { 0 } else { deliver(inner, s.inner_addrs, &s.to_inner[..most], room, self.diag.as_ref())? };
            if n > 0 {
                self.changed = true;
                let data: Vec<u8> = s.to_inner.drain(..n).collect();
                if s.recorded {
                    self.events.push(OutsideEvent { step, stream: index as u32, what: OutsideWhat::Data(data) });
                }
            }
        }
        let s = &mut self.streams[index];
        if s.outer_eof && s.to_inner.is_empty() && !s.closed_inner {
            s.closed_inner = true;
            let reset = s.outer_reset;
            let what = if reset { OutsideWhat::Reset } else { OutsideWhat::Close };
            self.end_inner(index, reset)?;
            self.changed = true;
            if self.streams[index].recorded {
                self.events.push(OutsideEvent { step, stream: index as u32, what });
            }
        }
        Ok(())
    }

    /// Tells the program that the client is gone: a FIN after everything it sent, or (`reset`) a
    /// reset, after which dara's end of the connection is closed. Settled either way: the
    /// program's socket shows it before anything is probed.
    pub(super) fn end_inner(&mut self, index: usize, reset: bool) -> Result<(), RelayError> {
        let s = &mut self.streams[index];
        let Some(inner) = &s.inner else { return Ok(()) };
        if !reset {
            return close_sending_side(inner, s.inner_addrs, self.diag.as_ref());
        }
        let program_end = s.inner_addrs.map(|(local, remote)| (remote, local));
        netprobe::reset(inner);
        (s.inner, s.inner_eof) = (None, true);
        let (Some((local, remote)), Some(diag)) = (program_end, self.diag.as_ref()) else { return Ok(()) };
        let started = Instant::now();
        // Gone, closed, or (when the connection is gone) the listener the lookup falls back to.
        while diag.receiving(local, remote).is_some_and(|r| r.state != netprobe::TCP_CLOSE && r.state != netprobe::TCP_LISTEN) {
            if started.elapsed() > netprobe::SETTLE_LIMIT {
                return Err(RelayError::Broken(format!("the program's end of a connection dara reset ({local}) did not see the reset within {} ms; the run was stopped", netprobe::SETTLE_LIMIT.as_millis())));
            }
            std::thread::yield_now();
        }
        Ok(())
    }

    /// Reads what the program sent on stream `index`: recorded (recording), checked against the
    /// recording (replay), and queued for the client.
    pub(super) fn from_program(&mut self, step: u64, index: usize) -> Result<(), RelayError> {
        let s = &mut self.streams[index];
        let Some(inner) = &s.inner else { return Ok(()) };
        // Read into the reused buffer (a fresh 64 KiB per read costs page faults, and kept in
        // the recording would hold that much per answer), kept in an exactly sized copy.
        let scratch = &mut self.scratch;
        scratch.clear();
        let mut eof = false;
        loop {
            match read_some(inner, scratch, CHUNK) {
                Read::End | Read::Reset => {
                    eof = !s.inner_eof;
                    s.inner_eof = true;
                    break;
                }
                // The program's sends are settled: a short read took all there is, and an end
                // of file behind the bytes shows at the next pump.
                Read::Bytes(n) if n < CHUNK => break,
                Read::Bytes(_) => {}
                Read::Nothing => break,
            }
        }
        let sent = scratch.to_vec();
        if s.outer.is_some() {
            s.to_outer.extend_from_slice(&sent);
            self.held_bytes += sent.len();
        }
        let recorded = s.recorded;
        // Both sides over, or the client gone: dara's end closes (the program reads end of file).
        // A replayed connection keeps its end until the recorded close: the client that closed
        // after the program's half-close (a lingering close: shutdown(SHUT_WR), then poll for the
        // client's FIN) was still there in the recording. Before, the replay closed at once and
        // the program's poll found the FIN steps early ("expected poll ?, offered poll e2").
        if s.inner_eof && (s.outer_eof || (s.outer.is_none() && !s.replayed)) {
            s.inner = None;
        }
        if !recorded {
            return Ok(());
        }
        if !sent.is_empty() {
            self.observed(OutsideEvent { step, stream: index as u32, what: OutsideWhat::Output(sent) })?;
        }
        if eof {
            self.observed(OutsideEvent { step, stream: index as u32, what: OutsideWhat::OutputClosed })?;
        }
        Ok(())
    }

    /// Writes what the program sent to the client, as much as it takes now (recording, or a traced
    /// client); a client that went away gets nothing more. A traced client is the program too:
    /// it gets what its receive window takes, settled into its receive queue before anything is
    /// probed (as a delivery from an outside client is), and its side is marked changed; an
    /// outside client gets whatever its socket buffer takes. Returns whether a traced client was
    /// given bytes or the end of the stream.
    pub(super) fn flush_to_client(&mut self, index: usize) -> Result<bool, RelayError> {
        let diag = self.diag.as_ref();
        let s = &mut self.streams[index];
        let Some(outer) = &s.outer else { return Ok(false) };
        let traced = !s.recorded;
        let mut changed = false;
        while !s.to_outer.is_empty() {
            let take = if traced { netprobe::send_window(outer).min(s.to_outer.len()) } else { s.to_outer.len() };
            if take == 0 {
                break; // the traced client's queue is full: more once it reads
            }
            // SAFETY: writes from a live buffer of at least `take` bytes.
            let n = unsafe { libc::send(outer.as_raw_fd(), s.to_outer.as_ptr().cast(), take, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) };
            if n > 0 {
                s.to_outer.drain(..n as usize);
                if traced {
                    netprobe::wait_acknowledged(outer, None, diag, Instant::now()).map_err(|e| RelayError::Broken(e.0))?;
                    changed = true;
                }
                continue;
            }
            if n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EAGAIN) {
                return Ok(changed);
            }
            s.to_outer.clear(); // the client is gone
            s.outer = None;
            return Ok(changed);
        }
        if s.inner_eof && s.to_outer.is_empty() {
            if !s.told_outer_eof {
                s.told_outer_eof = true;
                if traced {
                    close_sending_side(outer, None, diag)?;
                    changed = true;
                } else {
                    // SAFETY: shutdown of a socket we own.
                    unsafe { libc::shutdown(outer.as_raw_fd(), libc::SHUT_WR) };
                }
            }
            if s.outer_eof {
                s.outer = None;
            }
        }
        Ok(changed)
    }
}

/// One connection relayed to the program.
pub(super) struct Stream {
    /// dara's socket connected to the program's twin (or, for an outside server, accepted from
    /// the program at its stand-in); None once both directions are over, and until then.
    pub(super) inner: Option<OwnedFd>,
    /// Its (local, remote) addresses: what sock_diag is asked about when a delivery settles.
    pub(super) inner_addrs: Option<(SocketAddr, SocketAddr)>,
    /// The client's socket (an outside client in a recording, or a traced client); None in a
    /// replay of an outside stream, and once gone.
    pub(super) outer: Option<OwnedFd>,
    /// An outside peer: its traffic is recorded (recording) or fed back and checked (replay).
    pub(super) recorded: bool,
    /// Bytes from the client not yet written to the program's side.
    pub(super) to_inner: Vec<u8>,
    /// Room the program's receive window had after the last delivery settled (a lower bound
    /// until dara sends again: the program's reads only open it); 0 when unknown. A delivery
    /// that fits goes without reading the window first (see [`deliver`]).
    pub(super) room: usize,
    /// Bytes from the program not yet written to the client.
    pub(super) to_outer: Vec<u8>,
    /// The client closed its side (`outer_reset`: with a reset); `closed_inner`: the program has
    /// been told (FIN, or a reset).
    pub(super) outer_eof: bool,
    pub(super) outer_reset: bool,
    pub(super) closed_inner: bool,
    /// The program closed its side.
    pub(super) inner_eof: bool,
    /// The client has been told (its side shut for writing, settled for a traced client).
    pub(super) told_outer_eof: bool,
    /// A recorded connection played back by a replay: no client behind it, its end comes as the
    /// recorded `Close` or `Reset` at its step.
    pub(super) replayed: bool,
}

impl Stream {
    /// A stream with nothing moved yet.
    pub(super) fn new(inner: Option<OwnedFd>, inner_addrs: Option<(SocketAddr, SocketAddr)>, outer: Option<OwnedFd>, recorded: bool) -> Stream {
        let replayed = recorded && outer.is_none();
        Stream { inner, inner_addrs, outer, recorded, to_inner: Vec::new(), room: 0, to_outer: Vec::new(), outer_eof: false, outer_reset: false, closed_inner: false, inner_eof: false, told_outer_eof: false, replayed }
    }
}

pub(super) fn accept(listener: &OwnedFd) -> Option<OwnedFd> {
    // SAFETY: accept4 without an address buffer; returns a new descriptor or -1.
    let fd = unsafe { libc::accept4(listener.as_raw_fd(), std::ptr::null_mut(), std::ptr::null_mut(), libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC) };
    // SAFETY: a descriptor accept4 just returned, owned by nobody else.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Appends up to `max` bytes read from `fd` to `out`. Some(0) at end-of-file (or a reset),
/// Some(n) bytes read, None when nothing is there now.
/// What one read of a relay socket got.
pub(super) enum Read {
    /// This many bytes (more than 0).
    Bytes(usize),
    /// End of file (or an error other than a reset: the connection is over).
    End,
    /// The peer reset the connection.
    Reset,
    /// Nothing now.
    Nothing,
}

pub(super) fn read_some(fd: &OwnedFd, out: &mut Vec<u8>, max: usize) -> Read {
    out.reserve(max);
    let spare = &mut out.spare_capacity_mut()[..max];
    // SAFETY: reads at most `max` bytes into the vector's reserved, unused capacity.
    let n = unsafe { libc::recv(fd.as_raw_fd(), spare.as_mut_ptr().cast(), max, libc::MSG_DONTWAIT) };
    if n > 0 {
        // SAFETY: the kernel initialised the first `n` bytes of the spare capacity.
        unsafe { out.set_len(out.len() + n as usize) };
        return Read::Bytes(n as usize);
    }
    if n == 0 {
        return Read::End;
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::EAGAIN) | Some(libc::EINTR) => Read::Nothing,
        Some(libc::ECONNRESET) => Read::Reset,
        _ => Read::End,
    }
}

/// How many of the `waiting` bytes for the program may go in the next delivery on dara's socket
/// `fd`: none while the program's socket holds bytes it has not read, else at most
/// [`DELIVERY_MOST`] and an eighth of its receive buffer.
///
/// Why: the program receives without a step (coarse steps, `preload/src/unposted.rs`) whatever
/// its socket holds, so what a delivery hands over must be in its queue, all of it, before it
/// runs, in the recording and in the replay alike, and the replay hands over exactly the
/// recorded bytes at their step. How much a receive window takes is no function of what the
/// program did: Linux grows the buffer with the pace of its reads, in real time, and sizes the
/// window from the buffer's memory, which counts the kernel's own overhead per segment. So a
/// recording that handed over what its window took (up to
/// [`INBOUND_BUFFER`](super::INBOUND_BUFFER) at a time, megabytes unread) made deliveries the
/// replay's window had no room for: the rest waited in dara's socket, the settle took the
/// delivery as done, and the bytes reached the program while it ran, when its reads opened the
/// window (curl's 3 MB download replayed other steps in 5 of 6 recordings). Nor is a window with
/// bytes queued safe: aria2c's socket, 16 KiB unread, had room for 14 KiB more in a replay and
/// for 16 KiB in its recording. An empty socket is another matter: it took half its buffer or
/// more without a read in every case measured (a buffer of 8,192 bytes took 4,096; 32,768 took
/// 30,000; a default one 128 KiB and up, whatever segments it had seen before), and its buffer
/// never shrinks unless the program sets it (then it stays so): an eighth of it fits in every
/// run. Without sock_diag nothing is known: as much as [`DELIVERY_MOST`].
pub(super) fn delivery_bound(fd: &OwnedFd, addrs: Option<(SocketAddr, SocketAddr)>, waiting: usize, diag: Option<&SockDiag>) -> usize {
    let most = match netprobe::peer_receiving(fd, addrs, diag) {
        Some(peer) if peer.queued > 0 => return 0,
        Some(peer) => peer.buffer.map_or(DELIVERY_MOST, |b| (b as usize / 8).clamp(1, DELIVERY_MOST)),
        None => DELIVERY_MOST,
    };
    waiting.min(most)
}

/// Writes `bytes` (all of them when `room` is None, else what the peer's receive window takes
/// now) to dara's socket toward the program, and waits until the program's side acknowledged
/// them: they are in its receive queue before anything is probed. Returns how many were written.
/// `room`: what the window had left when the last delivery settled (updated here); when the
/// bytes fit in it the window is not read again (one `TCP_INFO` read less a request).
pub(super) fn deliver(fd: &OwnedFd, addrs: Option<(SocketAddr, SocketAddr)>, bytes: &[u8], mut room: Option<&mut usize>, diag: Option<&SockDiag>) -> Result<usize, RelayError> {
    let started = Instant::now();
    let mut done = 0;
    while done < bytes.len() {
        let left = bytes.len() - done;
        let take = match room.as_deref() {
            None => left,
            Some(&known) if known >= left => left,
            Some(_) => netprobe::send_window(fd).min(left),
        };
        if take == 0 {
            break;
        }
        // SAFETY: writes from a live buffer of the given length.
        let n = unsafe { libc::send(fd.as_raw_fd(), bytes[done..].as_ptr().cast(), take, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) };
        if n > 0 {
            done += n as usize;
        } else if n < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EAGAIN) {
            return Ok(done); // the program closed: what was written is what it could get
        }
        let left_after = netprobe::wait_acknowledged(fd, addrs, diag, started).map_err(|e| RelayError::Broken(e.0))?;
        if let Some(known) = room.as_deref_mut() {
            *known = left_after;
            break;
        }
    }
    Ok(done)
}

/// Shuts dara's sending side toward the program and waits until the program's side has the FIN.
pub(super) fn close_sending_side(fd: &OwnedFd, addrs: Option<(SocketAddr, SocketAddr)>, diag: Option<&SockDiag>) -> Result<(), RelayError> {
    // SAFETY: shutdown of a socket we own.
    unsafe { libc::shutdown(fd.as_raw_fd(), libc::SHUT_WR) };
    netprobe::wait_acknowledged(fd, addrs, diag, Instant::now()).map(|_room| ()).map_err(|e| RelayError::Broken(e.0))
}

pub(super) fn local_port(fd: &OwnedFd) -> Option<u16> {
    netprobe::socket_address(fd, false).map(|a| a.port())
}

pub(super) fn peer_port(fd: &OwnedFd) -> Option<u16> {
    netprobe::socket_address(fd, true).map(|a| a.port())
}
