//! The driver's window on the target's sockets, pipes and eventfds: it looks at them while every
//! thread is parked, settles loopback delivery after a network operation, and gives the model
//! deterministic [`NetView`]s.
//!
//! # Probing from outside
//! The scheduler duplicates the target's descriptor into its own process with `pidfd_getfd`
//! (Linux 5.6; the same permission as `process_vm_readv`, which dara already needs), looks at it
//! (`poll` with a zero timeout, `FIONREAD`, a 4-byte `MSG_PEEK`, `getsockname`/`getpeername`) and
//! closes the duplicate at once, so it never keeps a socket alive after the program closed it.
//! Only epoll sets are kept from one probe to the next (`epoll_dups`: they keep no watched file
//! alive), and used again while `kcmp` says the program's descriptor still names the same set
//! (checked once a wait); the sets of all parked `epoll_wait`s are polled with one `poll`.
//! Nothing here consumes data, and nothing runs while a target thread runs.
//!
//! # Identities
//! An endpoint's logical id is given on first sight, in the order the scheduler meets it: kernel
//! socket and pipe inode numbers are global (not per process), so two processes talking over
//! loopback need nothing new. Both ends of a pipe share an inode and so one id ("the pipe").
//! Anonymous inodes (eventfd, epoll) all share one inode, so they are named by (process, fd).
//! The peer of a TCP or connected UDP endpoint is found through its address pair: the endpoint
//! whose (local, remote) ports are this one's (remote, local). Kernel ports never reach a
//! decision or the trace: only the logical ids do. What cannot change while an endpoint lives (a
//! connected TCP socket's addresses; a pipe or Unix socket) is kept by inode, so looking at it
//! again costs one `fstat`; and a granted request is settled with the endpoint its probe saw.
//!
//! # Settling delivery (why a probe is never racy)
//! Unix-domain sockets, pipes and eventfds deliver inside the sender's system call: once the
//! sender is parked again, the data is there. Loopback TCP and UDP pass through the network
//! softirq, which normally runs before the sender's call returns but may be deferred to
//! `ksoftirqd`. So the driver, at the first quiet point after a granted operation:
//! * after a TCP send waits until every transmitted byte is acknowledged (`tcpi_bytes_acked`),
//!   or counted received by the peer itself (sock_diag: the peer may delay its ACK by 40 ms):
//!   the bytes are in the peer's receive queue; or until the connection is closed (`TCP_CLOSE`):
//!   the peer had already closed, answered the bytes with a reset, and they will never be
//!   acknowledged;
//! * after a connect waits until the socket is writable or failed (handshake done), then counts
//!   one connection *owed* to the listener's address (once per socket: a non-blocking connect
//!   that the program completes by calling `connect` again owes one, and a refused one none);
//! * after a UDP send counts one datagram owed to the destination port, if a socket was bound
//!   to that port when the send was granted (the kernel drops a datagram nobody can receive, as
//!   when a node writes to a peer that is not up yet or has stopped). Looked at before the sender
//!   runs, so the sender's own later `bind` of that port cannot pass for a receiver; only a
//!   delivery deferred to `ksoftirqd` while the sender binds or closes the destination port
//!   itself could still disagree.
//!
//! Between two traced TCP sockets the kernel's autotuned buffers would still decide how many bytes
//! a reader finds, in real time (bytes behind its window arrive a little after its read). So
//! every settled send notes its socket's total written bytes, and a receive is granted what its
//! peer wrote and it has not read (at most its length and 32 KiB), waited for until the queue
//! holds it or the rest waits for the reader's own read to open the window, which a receive into
//! one buffer then waits for itself (`unread`; docs/networking.md). Likewise a blocking send to
//! a traced peer has room for what its peer's reads left under a fixed mark (`room`), not for
//! what the kernel's send buffer holds.
//!
//! A probe of an endpoint that is owed something and does not show it yet is retried (yielding
//! the CPU, up to [`SETTLE_LIMIT`]) until the kernel shows it; an accept or datagram receive pays
//! one back, and so does a datagram the receiving socket dropped because its buffer was full
//! (its drop count, read while the probe waits). A delivery that never shows ends the run as
//! uncontrolled rather than deciding from a racy answer.
//!
//! # Files
//! This file holds [`NetProbe`] and its views of parked requests (readiness, epoll sets,
//! pollfds); `backlog` whether a blocking connect's listener has room; `groups` ports several
//! sockets share; `identity` names endpoints and finds peers and connections; `room` how much a
//! blocking TCP send to a traced peer may move; `unread` how many bytes a TCP receive from a
//! traced peer takes; `settle` is NetProbe's
//! settling and paying back; `ledger` the types and waits settling uses (`Settle`,
//! `TcpSnapshot`, arrival of sent bytes); `sockets` the stateless socket helpers; `signalfd` when a signalfd is readable for the
//! thread that waits on it (never from a duplicate: the kernel answers for the caller).

use std::collections::{BTreeMap, BTreeSet};
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use dara_abi::request::STREAM_SEND_MOST;
use dara_abi::{CloseHow, NetFlags, Op, Request as R};

use crate::choice::{ProcessId, ThreadId};
use crate::epoll_dups::EpollDups;
use crate::fifo::FifoWait;
use crate::sockdiag::{tcpi, SockDiag};
use crate::model::net::{describe, kind, NetView, NO_ENDPOINT};
use crate::model::Request;

/// How long a delivery dara knows is on its way may take to show before the run is stopped.
pub const SETTLE_LIMIT: Duration = Duration::from_secs(2);
/// Most `pollfd` entries read from a target's poll/select.
const MAX_POLL_ENTRIES: usize = 4096;
/// `tcpi_state` of a connection that is over (reset, or both sides closed).
pub(crate) const TCP_CLOSE: u8 = 7;
/// `tcpi_state`s of a connection whose peer's FIN has arrived, which the kernel counts as one
/// byte received (`tcpi_bytes_received`).
pub(crate) const TCP_TIME_WAIT: u8 = 6;
pub(crate) const TCP_CLOSE_WAIT: u8 = 8;
pub(crate) const TCP_LAST_ACK: u8 = 9;
pub(crate) const TCP_CLOSING: u8 = 11;
/// `tcpi_state` of a listening socket.
pub(crate) const TCP_LISTEN: u8 = 10;
/// `SO_MEMINFO` from `<asm-generic/socket.h>`: a socket's memory counters, drops included.
const SO_MEMINFO: libc::c_int = 55;
const ANON_INODE_KEY: u64 = 1 << 63;

mod backlog;
mod groups;
mod identity;
mod ledger;
mod room;
mod settle;
mod signalfd;
mod sockets;
mod unread;

use identity::*;
use ledger::*;
use sockets::*;
pub use ledger::OwnReceived;
pub(crate) use identity::AddressPair;
pub(crate) use ledger::{peer_receiving, wait_acknowledged, wait_queued};
pub(crate) use sockets::{accept_queue, accept_without_data, addresses, backlog_full, bytes_received, reset, same_file, send_window, socket_address};


/// A delivery the kernel never showed, or a probe that failed: ends the run.
#[derive(Debug)]
pub struct ProbeError(pub String);

#[derive(Default)]
pub struct NetProbe {
    pidfds: BTreeMap<u32, OwnedFd>,
    /// Duplicates of epoll sets, kept across probes (see `epoll_dups`).
    epolls: EpollDups,
    /// Readiness of the epoll sets [`NetProbe::poll_epoll_sets`] polled together, by (pid, fd):
    /// what the next view of each says (cleared by the next batch).
    polled_epolls: BTreeMap<(u32, i32), bool>,
    ids: BTreeMap<u64, u64>,
    by_key: BTreeMap<PortKey, u64>,
    owed: BTreeMap<PortKey, u32>,
    settles: Vec<Settle>,
    /// Per UDP endpoint id: the receive-buffer drops already paid back against `owed`.
    paid_drops: BTreeMap<u64, u32>,
    /// TCP endpoints whose connection is already owed to a listener: a non-blocking connect
    /// that is completed by calling `connect` again (hiredis, and most event loops) owes one.
    connected: BTreeSet<u64>,
    /// Asks a send's peer how much it received (opened on first use).
    diag: Option<SockDiag>,
    /// Endpoints whose identity cannot change while they live ([`Endpoint::is_stable`]), by
    /// inode: recognising one again costs a single `fstat`.
    stable: BTreeMap<u64, Endpoint>,
    /// The endpoint behind (pid, fd) when a thread's request on it was last probed: a grant of
    /// that request is settled without identifying it again (the descriptor cannot change while
    /// the thread is parked on it).
    probed: BTreeMap<(u32, i32), Endpoint>,
    /// The duplicates a send's probe took, kept as long as the view: a granted send is settled on
    /// the same duplicate (the others are dropped when the views are taken again).
    send_dups: BTreeMap<(u32, i32), OwnedFd>,
    /// Bytes a traced TCP socket has written in all, by its (local, remote) ports, as of its
    /// last settled send: what its peer's receives may count on (see `unread`).
    written: BTreeMap<(u16, u16), u64>,
    /// Connections traced processes made since the last [`NetProbe::take_connections`]: the
    /// connecting process's pid and the server's address.
    connections: Vec<(u32, std::net::SocketAddr)>,
    /// Kernel pids of every process of the execution (alive or not).
    traced: BTreeSet<u32>,
    /// Ports of dara's own UDP sockets that relay datagrams to the program (known senders).
    relay_ports: BTreeSet<u16>,
    /// A peer outside dara found while identifying an endpoint: what the next view reports.
    outside_peer: Option<String>,
    /// In a recording, the program's TCP listeners dara split (docs/outside.md): public port →
    /// the twin's address, where the program accepts what dara relays.
    split: BTreeMap<u16, std::net::SocketAddr>,
    /// A recording or its replay: a TCP connect to a listener dara did not split goes to a
    /// server outside dara (which dara dials when it grants the connect), and names no listener.
    outside_servers: bool,
    /// Non-blocking connects whose SYN a full listener dropped (see `backlog`).
    parked: Vec<backlog::ParkedConnect>,
    /// dara's own duplicates of the eventfds that stand for `timerfd`s (owned by the execution's
    /// timer table, which takes a descriptor out before it closes it): an eventfd that is the
    /// same file as one of them is listed as a timerfd.
    timer_files: BTreeSet<i32>,
}

impl NetProbe {

    /// The model dropped its views (kernel state may have changed): the duplicates their send
    /// probes kept go too, so dara never keeps a socket alive the program closed.
    pub fn forget_views(&mut self) {
        self.send_dups.clear();
    }

    /// Looks at `request` (pending in thread `tid` of process `pid`) and says whether it can go on now. A peer
    /// outside dara behind the descriptor (a Unix socket connected by an untraced process, a
    /// datagram no traced thread sent) is an error: what it sends would be input dara neither
    /// controls nor records.
    pub fn view(&mut self, thread: ThreadId, process: ProcessId, (pid, tid): (u32, u32), request: &Request) -> Result<NetView, ProbeError> {
        let view = self.look(thread, process, (pid, tid), request);
        self.no_outside_peer(|| format!("process {process} (descriptor {})", request.fd().unwrap_or(-1)))?;
        view
    }

    /// Whether a pending `poll`/`epoll_wait` of process `pid` (`request`) watches a socket only a
    /// peer dara does not relay could wake: a UDP socket, or a Unix-domain listening socket.
    pub fn watches_unrelayed(&mut self, pid: u32, request: &Request) -> bool {
        watched(pid, request).into_iter().any(|(fd, _)| {
            let Ok(Some(dup)) = self.dup(pid, fd) else { return false };
            match socket_kind(&dup) {
                kind::UDP => true,
                kind::UNIX_STREAM => sockopt(&dup, libc::SO_ACCEPTCONN) == Some(1),
                _ => false,
            }
        })
    }

    /// Whether a pending `poll`/`epoll_wait` of process `pid` (`request`) watches a signalfd: a
    /// recording then waits for a signal from outside as it does for a `sigwait`.
    pub fn watches_signalfd(&self, pid: u32, request: &Request) -> bool {
        watched(pid, request).into_iter().any(|(fd, _)| signalfd::mask(pid, fd).is_some())
    }

    /// An error if identifying an endpoint found a peer outside dara (see [`NetProbe::view`]).
    /// `whom` names the receiver (made only for the error: views are taken by the thousand).
    /// The sock_diag socket, opened on first use.
    fn sock_diag(&mut self) -> Option<&SockDiag> {
        if self.diag.is_none() {
            self.diag = SockDiag::open();
        }
        self.diag.as_ref()
    }

    fn no_outside_peer(&mut self, whom: impl FnOnce() -> String) -> Result<(), ProbeError> {
        match self.outside_peer.take() {
            Some(peer) => Err(ProbeError(format!("{peer} reached {}: what it sends would be input dara neither controls nor records; only TCP clients of a recorded server are relayed and recorded (docs/outside.md)", whom()))),
            None => Ok(()),
        }
    }

    fn look(&mut self, thread: ThreadId, process: ProcessId, (pid, tid): (u32, u32), request: &Request) -> Result<NetView, ProbeError> {
        let fd = request.fd().unwrap_or(-1);
        match *request {
            R::NetRecv { .. } | R::NetAccept { .. } => {
                let Some(dup) = self.dup(pid, fd)? else { return Ok(closed_view()) };
                if request.op() == Op::NetAccept {
                    accept_without_data(&dup);
                }
                let ep = self.endpoint(process, fd, &dup);
                self.probed.insert((pid, fd), ep);
                let mut revents = match ep.kind {
                    kind::SIGNALFD => signalfd::revents(pid, tid, fd, libc::POLLIN),
                    _ => self.settled_poll(&dup, ep, libc::POLLIN)?,
                };
                // What a traced peer wrote and this socket has not read: its arrival is waited
                // for, and a receive takes a count that depends on nothing else.
                let unread = match *request {
                    R::NetRecv { len, flags, .. } if ep.kind == kind::TCP => self.unread_arrived(&dup, ep, len, flags.whole_grant())?,
                    _ => None,
                };
                if unread.is_some_and(|n| n > 0) && revents == 0 {
                    revents = poll_now(&dup, libc::POLLIN);
                }
                let ready = revents != 0;
                let mut preview = [0u8; 4];
                // A peek would consume a pending error (a reset) the program must read itself.
                let peekable = ready && request.op() == Op::NetRecv && revents & libc::POLLERR == 0;
                let peeked = match (peekable, ep.kind) {
                    (false, _) => 0,
                    (true, kind::UDP) => {
                        let (n, from) = peek_from(&dup, &mut preview);
                        // Every traced sender's socket was looked at when its send was posted.
                        if let Some(from) = from.filter(|f| !self.is_traced_datagram_source(f.port())) {
                            self.outside_peer = Some(format!("a datagram from {from}, which no traced thread sent (a peer outside dara, or a send dara does not see),"));
                        }
                        n
                    }
                    (true, _) => peek(&dup, &mut preview),
                };
                let avail = match (ready, ep.kind) {
                    (false, _) => -(libc::EAGAIN as i64),
                    // A timerfd's read returns its 8-byte count of expirations.
                    (true, kind::TIMERFD) => 8,
                    (true, _) => inq(&dup).max(peeked as i64),
                };
                let size = match (*request, unread) {
                    (R::NetRecv { .. }, Some(n)) if n > 0 && avail > 0 => n as i64,
                    (R::NetRecv { len, .. }, _) if avail >= 0 => avail.min(len as i64),
                    _ => i64::from(ready),
                };
                Ok(NetView { ready, ready_entries: u32::from(ready), size, obj: describe(ep.id, self.peer(ep), ep.kind, &preview[..peeked]) })
            }
            R::NetSend { len, head: first, dest_port, flags, .. } => {
                let Some(dup) = self.dup(pid, fd)? else { return Ok(closed_view()) };
                let ep = self.endpoint(process, fd, &dup);
                self.probed.insert((pid, fd), ep);
                let peer = match (dest_port, ep.key) {
                    (0, _) | (_, None) => self.peer(ep),
                    (port, Some((k, local, _))) => self.lookup(&[(k, port, local), (k, port, 0)]),
                };
                // The grant's result is the most the send may move: all it offers, but on a TCP
                // connection to no traced socket (dara's relay, or a peer outside dara) a fixed
                // worth the kernel always takes at once (`STREAM_SEND_MOST`); a blocking send to
                // a traced one has the room its peer's reads left (`room`).
                let counted = match ep.kind == kind::TCP && peer != NO_ENDPOINT && !flags.nonblocking() {
                    true => self.stream_room(&dup, ep),
                    false => None,
                };
                let (ready, most) = match counted {
                    Some(room) => (room > 0, len.min(room)),
                    None if ep.kind == kind::TCP && peer == NO_ENDPOINT => (poll_now(&dup, libc::POLLOUT) != 0, len.min(STREAM_SEND_MOST)),
                    None => (poll_now(&dup, libc::POLLOUT) != 0, len),
                };
                self.send_dups.insert((pid, fd), dup);
                Ok(NetView { ready, ready_entries: u32::from(ready), size: most as i64, obj: describe(ep.id, peer, ep.kind, &first[..(len as usize).min(4)]) })
            }
            R::FifoOpen { flags, device, inode, .. } => {
                let wait = FifoWait { device, inode, reader: flags.fifo_reader() };
                // A reader is woken by a writer's open even when that writer has closed again
                // since (the kernel counts opens): its own end then shows POLLHUP (no writer now,
                // one came since the reader opened) or POLLIN (data left behind).
                let came = match wait.reader.then(|| self.dup(pid, fd)).transpose()?.flatten() {
                    Some(end) => poll_now(&end, libc::POLLIN) & (libc::POLLIN | libc::POLLHUP) != 0,
                    None => false,
                };
                let ready = came || wait.partner_present(self.traced.iter().copied());
                // Keyed by inode like the FIFO's descriptors once open, so it is one endpoint.
                let id = self.id_of(wait.inode);
                Ok(NetView { ready, ready_entries: u32::from(ready), size: 0, obj: describe(id, NO_ENDPOINT, kind::PIPE, &[]) })
            }
            R::NetConnect { fd, flags, addr, len } => self.connect_view(process, pid, fd, flags, addr.0, len),
            R::NetClose { .. } | R::NetListen { .. } => {
                let Some(dup) = self.dup(pid, fd)? else { return Ok(NetView { ready: true, ..closed_view() }) };
                let ep = self.endpoint(process, fd, &dup);
                Ok(NetView { ready: true, ready_entries: 1, size: 0, obj: describe(ep.id, self.peer(ep), ep.kind, &[]) })
            }
            R::NetEpollWait { .. } => {
                // An epoll set: named by (process, fd) like every anonymous inode.
                let id = self.id_of(ANON_INODE_KEY | (u64::from(process) << 32) | fd as u32 as u64);
                if let Some(&ready) = self.polled_epolls.get(&(pid, fd)) {
                    return Ok(NetView { ready, ready_entries: u32::from(ready), size: i64::from(ready), obj: describe(id, NO_ENDPOINT, kind::EPOLL, &[]) });
                }
                let dup = match self.epolls.take(thread, pid, fd) {
                    Some(dup) => dup,
                    None => match self.dup(pid, fd)? {
                        Some(dup) => dup,
                        None => return Ok(closed_view()),
                    },
                };
                // Wait for what the interest list is owed before asking the epoll set.
                let owed = self.owed.values().any(|&n| n > 0);
                for target in if owed { epoll_targets(pid, fd) } else { Vec::new() } {
                    if let Some(t) = self.dup(pid, target)? {
                        let tep = self.endpoint_unnamed(&t);
                        self.settled_poll(&t, tep, libc::POLLIN)?;
                    }
                }
                // A signalfd member ready for this thread is not asked of the set (see `signalfd`).
                let ready = signalfd::ready_in_epoll(pid, tid, fd, &dup) || poll_now(&dup, libc::POLLIN) != 0;
                self.epolls.keep(thread, pid, fd, dup);
                Ok(NetView { ready, ready_entries: u32::from(ready), size: i64::from(ready), obj: describe(id, NO_ENDPOINT, kind::EPOLL, &[]) })
            }
            R::NetPoll { fds, count, .. } => self.poll_view(process, (pid, tid), fds.0, count),
            _ => Ok(NetView::default()),
        }
    }

    /// Looks at the epoll sets `waits` ((thread, pid, tid, descriptor) of threads parked in
    /// `epoll_wait`, about to be viewed) with one `poll` for all, instead of one each: their
    /// views, taken next, use what it said. Only when nothing is owed to any socket (else each
    /// view first waits for what its interest list is owed, see [`NetProbe::view`]); a set that
    /// cannot be duplicated now, or that may hold a ready signalfd (a signal is pending for its
    /// thread: see `signalfd`), is left to its own view. Called at a quiet point, right before the
    /// views: nothing runs in between that could change what the sets show.
    pub fn poll_epoll_sets(&mut self, waits: &[(ThreadId, u32, u32, i32)]) -> Result<(), ProbeError> {
        self.polled_epolls.clear();
        if waits.len() < 2 || self.owed.values().any(|&n| n > 0) {
            return Ok(());
        }
        let mut sets: Vec<(ThreadId, u32, i32, OwnedFd)> = Vec::with_capacity(waits.len());
        for &(thread, pid, tid, fd) in waits {
            if sets.iter().any(|s| (s.1, s.2) == (pid, fd)) || crate::procfs::signals(pid, tid).is_some_and(|s| s.pending != 0) {
                continue;
            }
            let dup = match self.epolls.take(thread, pid, fd) {
                Some(dup) => dup,
                None => match self.dup(pid, fd)? {
                    Some(dup) => dup,
                    None => continue,
                },
            };
            sets.push((thread, pid, fd, dup));
        }
        let mut polls: Vec<libc::pollfd> = sets.iter().map(|s| libc::pollfd { fd: s.3.as_raw_fd(), events: libc::POLLIN, revents: 0 }).collect();
        // SAFETY: a live array of pollfds of the given length, zero timeout.
        let n = unsafe { libc::poll(polls.as_mut_ptr(), polls.len() as libc::nfds_t, 0) };
        if n < 0 {
            // Each view polls its set alone.
            for (thread, pid, fd, dup) in sets {
                self.epolls.keep(thread, pid, fd, dup);
            }
            return Ok(());
        }
        for ((thread, pid, fd, dup), p) in sets.into_iter().zip(&polls) {
            self.polled_epolls.insert((pid, fd), p.revents != 0);
            self.epolls.keep(thread, pid, fd, dup);
        }
        Ok(())
    }

    /// A poll/select: reads the `pollfd` array from the target and probes every entry.
    fn poll_view(&mut self, process: ProcessId, (pid, tid): (u32, u32), fds: u64, count: u64) -> Result<NetView, ProbeError> {
        let n = (count as usize).min(MAX_POLL_ENTRIES);
        let entries = read_pollfds(pid, fds, n).ok_or_else(|| ProbeError("cannot read the pollfd array of a poll call from the target".into()))?;
        let mut ready = 0u32;
        let mut first = NO_ENDPOINT;
        for e in entries.iter().filter(|e| e.fd >= 0) {
            let Some(dup) = self.dup(pid, e.fd)? else {
                ready += 1; // POLLNVAL
                continue;
            };
            let ep = self.endpoint(process, e.fd, &dup);
            let revents = match ep.kind {
                kind::SIGNALFD => signalfd::revents(pid, tid, e.fd, e.events),
                _ if e.events & libc::POLLIN != 0 => self.settled_poll(&dup, ep, e.events)?,
                _ => poll_now(&dup, e.events),
            };
            if revents != 0 {
                ready += 1;
                if first == NO_ENDPOINT {
                    first = ep.id;
                }
            }
        }
        Ok(NetView { ready: ready > 0, ready_entries: ready, size: i64::from(ready), obj: describe(first, NO_ENDPOINT, kind::POLL, &[]) })
    }
}


/// The descriptors a pending `poll`/`select` or `epoll_wait` of process `pid` watches, with the
/// events it asks for (an epoll set's members: every event); none for another request.
fn watched(pid: u32, request: &Request) -> Vec<(i32, i16)> {
    match *request {
        R::NetEpollWait { epoll, .. } => epoll_targets(pid, epoll).into_iter().map(|fd| (fd, !0)).collect(),
        R::NetPoll { fds, count, .. } => read_pollfds(pid, fds.0, (count as usize).min(MAX_POLL_ENTRIES)).unwrap_or_default().iter().filter(|p| p.fd >= 0).map(|p| (p.fd, p.events)).collect(),
        _ => Vec::new(),
    }
}

/// Whether a pending `poll`/`select` or `epoll_wait` of process `pid` (`request`) may ask one of
/// the pipes whose inodes are `pipes` for room to write (`dara_tracer::output_drain`).
pub fn watches_for_room(pid: u32, request: &Request, pipes: &[u64]) -> bool {
    watched(pid, request).into_iter().any(|(fd, events)| events & libc::POLLOUT != 0 && crate::procfs::fd_inode(pid, fd as u64).is_some_and(|inode| pipes.contains(&inode)))
}

fn closed_view() -> NetView {
    // A descriptor the target does not have: the real call fails at once (EBADF).
    NetView { ready: true, ready_entries: 1, size: -(libc::EBADF as i64), obj: describe(NO_ENDPOINT, NO_ENDPOINT, kind::UNKNOWN, &[]) }
}
