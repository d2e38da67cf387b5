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
//! A probe of an endpoint that is owed something and does not show it yet is retried (yielding
//! the CPU, up to [`SETTLE_LIMIT`]) until the kernel shows it; an accept or datagram receive pays
//! one back, and so does a datagram the receiving socket dropped because its buffer was full
//! (its drop count, read while the probe waits). A delivery that never shows ends the run as
//! uncontrolled rather than deciding from a racy answer.
use std::collections::{BTreeMap, BTreeSet};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

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
/// `tcpi_state` of a listening socket.
pub(crate) const TCP_LISTEN: u8 = 10;
/// `SO_MEMINFO` from `<asm-generic/socket.h>`: a socket's memory counters, drops included.
const SO_MEMINFO: libc::c_int = 55;
const ANON_INODE_KEY: u64 = 1 << 63;


mod identity;
mod ledger;
mod sockets;

use identity::*;
use ledger::*;
use sockets::*;
pub use ledger::OwnReceived;
pub(crate) use identity::AddressPair;
pub(crate) use ledger::{wait_acknowledged, wait_queued};
pub(crate) use sockets::{accept_queue, addresses, bytes_received, reset, send_window, socket_address};


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
    /// Connections traced processes made since the last [`NetProbe::take_connections`]: the
    /// connecting process's pid and the server's address.
    connections: Vec<(u32, std::net::SocketAddr)>,
    /// Kernel pids of every process of the execution (alive or not).
    traced: BTreeSet<u32>,
    /// Ports of dara's own UDP sockets that relay datagrams to the program (known senders).
    relay_ports: BTreeSet<u16>,
    /// A peer outside dara found while identifying an endpoint: what the next view reports.
    outside_peer: Option<String>,
}

impl NetProbe {
    /// A network request of a thread of process `pid` was granted (or timed out).
    /// Called before the thread runs: a UDP send's receiver is looked up now.
    pub fn granted(&mut self, thread: ThreadId, pid: u32, request: Request, timed_out: bool) {
        if request.op() == Op::NetEpollWait {
            self.epolls.wait_ended(thread);
        }
        let datagram_to = match (request, timed_out) {
            (R::NetSend { fd, dest_port, .. }, false) => self.datagram_receiver(pid, fd, dest_port),
            _ => None,
        };
        if let R::NetClose { fd, how: CloseHow::Close } = request {
            // The descriptor number may name another socket next time.
            self.probed.remove(&(pid, fd));
        }
        let sender = match (request, timed_out) {
            (R::NetSend { fd, .. }, false) => self.send_dups.remove(&(pid, fd)).or_else(|| self.dup(pid, fd).ok().flatten()),
            _ => None,
        };
        self.settles.push(Settle { pid, request, timed_out, datagram_to, sent_total: None, sender });
    }

    /// A thread of process `pid` sent on TCP socket `fd` without a post (coarse steps): settled
    /// at the next quiet point like a granted send. `total`: the socket's (local port, peer port,
    /// bytes sent in all) if the thread could tell.
    pub fn sent_unposted(&mut self, pid: u32, fd: i32, total: Option<(u16, u16, u64)>) {
        let request = R::NetSend { fd, len: 0, flags: NetFlags::default(), head: [0; 8], dest_port: 0 };
        self.settles.push(Settle { pid, request, timed_out: false, datagram_to: None, sent_total: total, sender: None });
    }

    /// The destination port of a UDP send on `fd` (`dest_port`, or the connected peer's), if a
    /// socket is bound to it now; None for other sockets and for a datagram the kernel will drop.
    fn datagram_receiver(&mut self, pid: u32, fd: i32, dest_port: u16) -> Option<u16> {
        if self.probed.get(&(pid, fd)).is_some_and(|ep| ep.kind != kind::UDP) {
            return None;
        }
        let dup = self.dup(pid, fd).ok()??;
        if socket_kind(&dup) != kind::UDP {
            return None;
        }
        let port = if dest_port != 0 { dest_port } else { inet_key(&dup, kind::UDP)?.2 };
        (port != 0 && crate::procfs::udp_port_bound(pid, port)).then_some(port)
    }

    /// Settles what the operations granted since the last call left in flight.
    pub fn settle(&mut self, own: OwnReceived) -> Result<(), ProbeError> {
        for s in std::mem::take(&mut self.settles) {
            let fd = s.request.fd().unwrap_or(-1);
            match (s.request.op(), s.timed_out) {
                (Op::NetSend, false) => match s.sent_total {
                    Some(total) if own_received_all(total, own)? => {}
                    _ => self.settle_send(s.pid, fd, s.sender, s.datagram_to, own)?,
                },
                (Op::NetConnect, false) => self.settle_connect(s.pid, fd)?,
                (Op::NetAccept, false) => self.pay_back(s.pid, fd, kind::TCP)?,
                // Only a datagram pays something back: a stream receive is settled already.
                (Op::NetRecv, false) if self.probed.get(&(s.pid, fd)).is_none_or(|ep| ep.kind == kind::UDP) => self.pay_back(s.pid, fd, kind::UDP)?,
                _ => {}
            }
        }
        self.no_outside_peer(|| "a traced process".to_string())
    }

    /// The model dropped its views (kernel state may have changed): the duplicates their send
    /// probes kept go too, so dara never keeps a socket alive the program closed.
    pub fn forget_views(&mut self) {
        self.send_dups.clear();
    }

    /// A process of the execution (kernel pid): its Unix sockets' peers are traced.
    pub fn add_traced(&mut self, pid: u32) {
        self.traced.insert(pid);
    }

    /// dara sends datagrams to the program from a socket with this port (the relay).
    pub fn add_relay_port(&mut self, port: u16) {
        self.relay_ports.insert(port);
    }

    /// Whether a datagram from this port comes from a traced thread's socket (or from dara).
    pub fn is_traced_datagram_source(&self, port: u16) -> bool {
        self.by_key.contains_key(&(kind::UDP, port, 0)) || self.relay_ports.contains(&port)
    }

    /// dara sent a datagram to the UDP socket bound to `port`: the next probe of it waits until
    /// the datagram shows.
    pub fn owe_datagram(&mut self, port: u16) {
        *self.owed.entry((kind::UDP, port, 0)).or_default() += 1;
    }

    /// Datagrams traced threads sent to dara's UDP socket bound to `port` that dara has not read
    /// yet; the caller reads them (waiting for each) and so pays them back.
    pub fn take_owed_datagrams(&mut self, port: u16) -> u32 {
        self.owed.remove(&(kind::UDP, port, 0)).unwrap_or(0)
    }

    /// Looks at `request` (pending in process `pid`) and says whether it can go on now. A peer
    /// outside dara behind the descriptor (a Unix socket connected by an untraced process, a
    /// datagram no traced thread sent) is an error: what it sends would be input dara neither
    /// controls nor records.
    pub fn view(&mut self, thread: ThreadId, process: ProcessId, pid: u32, request: &Request) -> Result<NetView, ProbeError> {
        let view = self.look(thread, process, pid, request);
        self.no_outside_peer(|| format!("process {process} (descriptor {})", request.fd().unwrap_or(-1)))?;
        view
    }

    /// Whether a pending `poll`/`epoll_wait` of process `pid` (`request`) watches a socket only a
    /// peer dara does not relay could wake: a UDP socket, or a Unix-domain listening socket.
    pub fn watches_unrelayed(&mut self, pid: u32, request: &Request) -> bool {
        let fds: Vec<i32> = match *request {
            R::NetEpollWait { epoll, .. } => epoll_targets(pid, epoll),
            R::NetPoll { fds, count, .. } => read_pollfds(pid, fds.0, (count as usize).min(MAX_POLL_ENTRIES)).unwrap_or_default().iter().map(|p| p.fd).filter(|&fd| fd >= 0).collect(),
            _ => Vec::new(),
        };
        fds.into_iter().any(|fd| {
            let Ok(Some(dup)) = self.dup(pid, fd) else { return false };
            match socket_kind(&dup) {
                kind::UDP => true,
                kind::UNIX_STREAM => sockopt(&dup, libc::SO_ACCEPTCONN) == Some(1),
                _ => false,
            }
        })
    }

    /// An error if identifying an endpoint found a peer outside dara (see [`NetProbe::view`]).
    /// `whom` names the receiver (made only for the error: views are taken by the thousand).
    fn no_outside_peer(&mut self, whom: impl FnOnce() -> String) -> Result<(), ProbeError> {
        match self.outside_peer.take() {
            Some(peer) => Err(ProbeError(format!("{peer} reached {}: what it sends would be input dara neither controls nor records; only TCP clients of a recorded server are relayed and recorded (docs/outside.md)", whom()))),
            None => Ok(()),
        }
    }

    fn look(&mut self, thread: ThreadId, process: ProcessId, pid: u32, request: &Request) -> Result<NetView, ProbeError> {
        let fd = request.fd().unwrap_or(-1);
        match *request {
            R::NetRecv { .. } | R::NetAccept { .. } => {
                let Some(dup) = self.dup(pid, fd)? else { return Ok(closed_view()) };
                let ep = self.endpoint(process, fd, &dup);
                self.probed.insert((pid, fd), ep);
                let revents = self.settled_poll(&dup, ep, libc::POLLIN)?;
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
                let avail = if ready { inq(&dup).max(peeked as i64) } else { -(libc::EAGAIN as i64) };
                let size = match *request {
                    R::NetRecv { len, .. } if avail >= 0 => avail.min(len as i64),
                    _ => i64::from(ready),
                };
                Ok(NetView { ready, ready_entries: u32::from(ready), size, obj: describe(ep.id, self.peer(ep), ep.kind, &preview[..peeked]) })
            }
            R::NetSend { len, head: first, dest_port, .. } => {
                let Some(dup) = self.dup(pid, fd)? else { return Ok(closed_view()) };
                let ep = self.endpoint(process, fd, &dup);
                self.probed.insert((pid, fd), ep);
                let dup = &*self.send_dups.entry((pid, fd)).insert_entry(dup).into_mut();
                let ready = poll_now(&dup, libc::POLLOUT) != 0;
                let peer = match (dest_port, ep.key) {
                    (0, _) | (_, None) => self.peer(ep),
                    (port, Some((k, local, _))) => self.lookup(&[(k, port, local), (k, port, 0)]),
                };
                Ok(NetView { ready, ready_entries: u32::from(ready), size: len as i64, obj: describe(ep.id, peer, ep.kind, &first[..(len as usize).min(4)]) })
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
            R::NetConnect { .. } | R::NetClose { .. } | R::NetListen { .. } => {
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
                        let tep = self.endpoint(process, target, &t);
                        self.settled_poll(&t, tep, libc::POLLIN)?;
                    }
                }
                let ready = poll_now(&dup, libc::POLLIN) != 0;
                self.epolls.keep(thread, pid, fd, dup);
                Ok(NetView { ready, ready_entries: u32::from(ready), size: i64::from(ready), obj: describe(id, NO_ENDPOINT, kind::EPOLL, &[]) })
            }
            R::NetPoll { fds, count, .. } => self.poll_view(process, pid, fds.0, count),
            _ => Ok(NetView::default()),
        }
    }

    /// Looks at the epoll sets `waits` ((thread, pid, descriptor) of threads parked in
    /// `epoll_wait`, about to be viewed) with one `poll` for all, instead of one each: their
    /// views, taken next, use what it said. Only when nothing is owed to any socket (else each
    /// view first waits for what its interest list is owed, see [`NetProbe::view`]); a set that
    /// cannot be duplicated now is left to its own view. Called at a quiet point, right before the
    /// views: nothing runs in between that could change what the sets show.
    pub fn poll_epoll_sets(&mut self, waits: &[(ThreadId, u32, i32)]) -> Result<(), ProbeError> {
        self.polled_epolls.clear();
        if waits.len() < 2 || self.owed.values().any(|&n| n > 0) {
            return Ok(());
        }
        let mut sets: Vec<(ThreadId, u32, i32, OwnedFd)> = Vec::with_capacity(waits.len());
        for &(thread, pid, fd) in waits {
            if sets.iter().any(|s| (s.1, s.2) == (pid, fd)) {
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
    fn poll_view(&mut self, process: ProcessId, pid: u32, fds: u64, count: u64) -> Result<NetView, ProbeError> {
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
            let revents = if e.events & libc::POLLIN != 0 { self.settled_poll(&dup, ep, e.events)? } else { poll_now(&dup, e.events) };
            if revents != 0 {
                ready += 1;
                if first == NO_ENDPOINT {
                    first = ep.id;
                }
            }
        }
        Ok(NetView { ready: ready > 0, ready_entries: ready, size: i64::from(ready), obj: describe(first, NO_ENDPOINT, kind::POLL, &[]) })
    }

    /// `poll` that first waits for anything owed to `ep` to show.
    fn settled_poll(&mut self, fd: &OwnedFd, ep: Endpoint, events: libc::c_short) -> Result<libc::c_short, ProbeError> {
        let keys = owed_keys(fd, ep);
        let owed = |me: &Self| keys.iter().flatten().filter_map(|k| me.owed.get(k)).sum::<u32>();
        let revents = poll_now(fd, events);
        if owed(self) == 0 || revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0 {
            return Ok(revents);
        }
        let started = Instant::now();
        while started.elapsed() < SETTLE_LIMIT {
            if ep.kind == kind::UDP {
                self.pay_back_drops(fd, ep);
                if owed(self) == 0 {
                    return Ok(poll_now(fd, events));
                }
            }
            std::thread::yield_now();
            let revents = poll_now(fd, events);
            if revents != 0 {
                return Ok(revents);
            }
        }
        Err(ProbeError(format!("loopback delivery to endpoint e{} did not arrive within {} ms although a traced thread sent it; the run was stopped rather than decided on a racy probe", ep.id, SETTLE_LIMIT.as_millis())))
    }

    /// `sender`: the socket the send was granted on, when known (else descriptor `fd` now).
    fn settle_send(&mut self, pid: u32, fd: i32, sender: Option<OwnedFd>, datagram_to: Option<u16>, own: OwnReceived) -> Result<(), ProbeError> {
        if let Some(port) = datagram_to {
            self.owe_datagram(port);
            // A socket's first send binds it: learn its port, which the datagram comes from (a
            // receiver's probe tells traced senders from outside ones by it).
            if self.probed.get(&(pid, fd)).is_some_and(|ep| ep.key.is_some_and(|k| k.1 == 0)) {
                if let Some(dup) = self.dup(pid, fd)? {
                    let ep = self.endpoint(0, fd, &dup);
                    self.probed.insert((pid, fd), ep);
                }
            }
            return Ok(());
        }
        if self.probed.get(&(pid, fd)).is_some_and(|ep| ep.kind != kind::TCP) {
            return Ok(());
        }
        let dup = match sender {
            Some(dup) => dup,
            None => match self.dup(pid, fd)? {
                Some(dup) => dup,
                None => return Ok(()),
            },
        };
        // A socket not probed yet is not named here: which sockets get endpoint ids, in which
        // order, is part of the trace, and whether a send takes this slower way depends on timing
        // (bytes Nagle held back), so naming it here made replays diverge ("close e4" / "close e5").
        let (k, addrs, name) = match self.probed.get(&(pid, fd)) {
            Some(ep) => (ep.kind, ep.addrs, format!("endpoint e{}", ep.id)),
            None => (socket_kind(&dup), addresses(&dup), format!("descriptor {fd} of pid {pid}")),
        };
        if k != kind::TCP {
            return Ok(());
        }
        let started = Instant::now();
        if self.diag.is_none() {
            self.diag = SockDiag::open();
        }
        while !sent_bytes_arrived(&dup, addrs, self.diag.as_ref(), false, own) {
            if started.elapsed() > SETTLE_LIMIT {
                return Err(ProbeError(format!("bytes sent on {name} were not acknowledged by the loopback peer within {} ms; the run was stopped", SETTLE_LIMIT.as_millis())));
            }
            std::thread::yield_now();
        }
        Ok(())
    }

    fn settle_connect(&mut self, pid: u32, fd: i32) -> Result<(), ProbeError> {
        let Some(dup) = self.dup(pid, fd)? else { return Ok(()) };
        let ep = self.endpoint(0, fd, &dup);
        if ep.kind != kind::TCP {
            return Ok(());
        }
        let started = Instant::now();
        loop {
            let revents = poll_now(&dup, libc::POLLOUT);
            if revents & libc::POLLERR != 0 {
                return Ok(()); // refused: nothing owed
            }
            if revents & libc::POLLOUT != 0 {
                break;
            }
            if started.elapsed() > SETTLE_LIMIT {
                return Err(ProbeError(format!("the loopback TCP handshake of endpoint e{} did not complete within {} ms; the run was stopped", ep.id, SETTLE_LIMIT.as_millis())));
            }
            std::thread::yield_now();
        }
        // A socket with no peer was refused (its error already taken by a second connect call);
        // one already counted is being checked again by a second connect call.
        if ep.key.or_else(|| inet_key(&dup, kind::TCP)).is_some_and(|k| k.2 != 0) {
            if let Some(server) = socket_address(&dup, true).filter(|_| self.connected.insert(ep.id)) {
                *self.owed.entry(owed_connection(server)).or_default() += 1;
                self.connections.push((pid, server));
            }
        }
        Ok(())
    }

    /// The connections made since the last call: (connecting pid, server address).
    pub fn take_connections(&mut self) -> Vec<(u32, std::net::SocketAddr)> {
        std::mem::take(&mut self.connections)
    }

    /// Drops the datagram at the head of `fd`'s receive queue in process `pid` (a `DropDatagram`
    /// fault), as if the network had lost it.
    pub fn drop_datagram(&mut self, pid: u32, fd: i32) -> Result<(), ProbeError> {
        let Some(dup) = self.dup(pid, fd)? else { return Ok(()) };
        let mut byte = 0u8;
        // SAFETY: reads at most one byte into a live local; MSG_TRUNC discards the rest of the
        // datagram, MSG_DONTWAIT never blocks.
        let n = unsafe { libc::recv(dup.as_raw_fd(), (&mut byte as *mut u8).cast(), 1, libc::MSG_DONTWAIT | libc::MSG_TRUNC) };
        if n >= 0 {
            self.pay_back(pid, fd, kind::UDP)?;
        }
        Ok(())
    }

    /// Datagrams the UDP socket `fd` dropped because its receive buffer was full (the kernel's
    /// per-socket drop count, `SO_MEMINFO`) will never show: each one pays back an owed datagram.
    fn pay_back_drops(&mut self, fd: &OwnedFd, ep: Endpoint) {
        let Some(key) = ep.key else { return };
        let mut meminfo = [0u32; libc::SK_MEMINFO_DROPS as usize + 1];
        let mut len = std::mem::size_of_val(&meminfo) as libc::socklen_t;
        // SAFETY: the kernel writes at most `len` bytes into `meminfo` and updates `len`.
        let rc = unsafe { libc::getsockopt(fd.as_raw_fd(), libc::SOL_SOCKET, SO_MEMINFO, meminfo.as_mut_ptr().cast(), &mut len) };
        if rc != 0 || (len as usize) < std::mem::size_of_val(&meminfo) {
            return;
        }
        let drops = meminfo[libc::SK_MEMINFO_DROPS as usize];
        let paid = self.paid_drops.entry(ep.id).or_default();
        let new = drops.saturating_sub(*paid);
        *paid = drops;
        if let Some(n) = self.owed.get_mut(&key) {
            *n = n.saturating_sub(new);
        }
    }

    /// An accept (TCP listener) or a datagram receive took one owed item.
    fn pay_back(&mut self, pid: u32, fd: i32, want: u64) -> Result<(), ProbeError> {
        let Some(dup) = self.dup(pid, fd)? else { return Ok(()) };
        let ep = self.endpoint(0, fd, &dup);
        if ep.kind == want {
            let keys = owed_keys(&dup, ep);
            let key = keys.iter().flatten().find(|k| self.owed.get(k).is_some_and(|&n| n > 0));
            if let Some(n) = key.and_then(|k| self.owed.get_mut(k)) {
                *n -= 1;
            }
        }
        Ok(())
    }

    /// A process was killed (a crash fault): what was owed to a port nobody listens on or is
    /// bound to any more died with its socket, and a node restarted on the same port must not
    /// wait for it.
    pub fn forget_owed_to_closed_ports(&mut self) {
        self.owed.retain(|&(k, port, _), _| port_bound(k & !OWED_V6, port));
    }

    /// Resets every TCP connection between a process of `a` and a process of `b` (a `ConnReset`
    /// or `Partition` fault): `connect(AF_UNSPEC)` on one end sends a reset, so both ends see
    /// ECONNRESET, as when a middlebox or a rebooted peer kills the connection. Waits until the
    /// other end has taken the reset in, so the next probe sees it. Returns how many.
    pub fn reset_between(&mut self, a: &[u32], b: &[u32]) -> Result<usize, ProbeError> {
        let theirs = self.connections(b)?;
        let mut count = 0;
        for (key, mine) in self.connections(a)? {
            let Some((_, other)) = theirs.iter().find(|(k, _)| *k == (key.0, key.2, key.1)) else { continue };
            reset(&mine);
            let started = Instant::now();
            while tcp_state(other).is_some_and(|s| s != TCP_CLOSE) {
                if started.elapsed() > SETTLE_LIMIT {
                    return Err(ProbeError(format!("a reset connection (ports {} and {}) did not close within {} s", key.1, key.2, SETTLE_LIMIT.as_secs())));
                }
                std::thread::yield_now();
            }
            count += 1;
        }
        Ok(count)
    }

    /// Established TCP connections of the processes `pids`: their address pair and our duplicate.
    fn connections(&mut self, pids: &[u32]) -> Result<Vec<(PortKey, OwnedFd)>, ProbeError> {
        let mut found = Vec::new();
        for &pid in pids {
            let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { continue };
            let mut fds: Vec<i32> = dir
                .flatten()
                .filter(|e| std::fs::read_link(e.path()).is_ok_and(|l| l.to_string_lossy().starts_with("socket:")))
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect();
            fds.sort_unstable();
            for fd in fds {
                let Some(dup) = self.dup(pid, fd)? else { continue };
                if socket_kind(&dup) != kind::TCP {
                    continue;
                }
                if let Some(key) = inet_key(&dup, kind::TCP).filter(|k| k.2 != 0 && tcp_state(&dup) != Some(TCP_CLOSE)) {
                    found.push((key, dup));
                }
            }
        }
        Ok(found)
    }

    /// Whether a traced process has a TCP endpoint with local port `local` connected to port
    /// `remote` (seen when its connect was settled): a client dara accepted on a public socket
    /// with that address pair is traced, not outside.
    pub fn is_traced_endpoint(&self, local: u16, remote: u16) -> bool {
        self.by_key.contains_key(&(kind::TCP, local, remote))
    }

    /// dara accepted a connection a traced client made to `server`: it is no longer owed there.
    pub fn connection_taken(&mut self, server: std::net::SocketAddr) {
        if let Some(n) = self.owed.get_mut(&owed_connection(server)) {
            *n = n.saturating_sub(1);
        }
    }

    /// The target's descriptor `fd` (process `pid`) as dara's own; `None` if it has no such
    /// descriptor. The caller decides how long to keep it.
    pub fn duplicate(&mut self, pid: u32, fd: i32) -> Result<Option<OwnedFd>, ProbeError> {
        self.dup(pid, fd)
    }

    /// The target's descriptor `fd` as our own, `None` if the target has no such descriptor.
    fn dup(&mut self, pid: u32, fd: i32) -> Result<Option<OwnedFd>, ProbeError> {
        if !self.pidfds.contains_key(&pid) {
            // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
            let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::c_long, 0 as libc::c_long) };
            if pidfd < 0 {
                return Err(ProbeError(format!("pidfd_open of pid {pid} failed ({}); dara needs Linux 5.6+ to look at the target's sockets", std::io::Error::last_os_error())));
            }
            // SAFETY: a descriptor pidfd_open just returned, owned by nobody else.
            self.pidfds.insert(pid, unsafe { OwnedFd::from_raw_fd(pidfd as i32) });
        }
        let pidfd = self.pidfds[&pid].as_raw_fd();
        // SAFETY: pidfd_getfd takes a pidfd, a descriptor number and flags; returns a new fd.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd as libc::c_long, fd as libc::c_long, 0 as libc::c_long) };
        if fd < 0 {
            let err = std::io::Error::last_os_error();
            return match err.raw_os_error() {
                Some(libc::EBADF) | Some(libc::ESRCH) => Ok(None),
                _ => Err(ProbeError(format!("cannot look at a descriptor of pid {pid} (pidfd_getfd: {err})"))),
            };
        }
        // SAFETY: a descriptor pidfd_getfd just returned, owned by nobody else.
        Ok(Some(unsafe { OwnedFd::from_raw_fd(fd as i32) }))
    }

    /// Identifies the endpoint behind `dup` (descriptor `fd` of `process`), naming it on first sight.
    fn endpoint(&mut self, process: ProcessId, fd: i32, dup: &OwnedFd) -> Endpoint {
        // SAFETY: fstat fills a plain struct for a descriptor we own.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let rc = unsafe { libc::fstat(dup.as_raw_fd(), &mut st) };
        if rc == 0 && matches!(st.st_mode & libc::S_IFMT, libc::S_IFSOCK | libc::S_IFIFO) {
            if let Some(ep) = self.stable.get(&st.st_ino) {
                return *ep;
            }
        }
        let (inode_key, k) = match st.st_mode & libc::S_IFMT {
            _ if rc != 0 => (ANON_INODE_KEY | (u64::from(process) << 32) | fd as u32 as u64, kind::UNKNOWN),
            libc::S_IFSOCK => (st.st_ino, socket_kind(dup)),
            libc::S_IFIFO => (st.st_ino, kind::PIPE),
            _ => (ANON_INODE_KEY | (u64::from(process) << 32) | fd as u32 as u64, anon_kind(dup)),
        };
        let id = self.id_of(inode_key);
        let key = if k == kind::TCP || k == kind::UDP { inet_key(dup, k) } else { None };
        if let Some(key) = key {
            self.by_key.insert(key, id);
            if k == kind::UDP {
                self.by_key.insert((k, key.1, 0), id);
            }
        }
        if k == kind::UNIX_STREAM {
            if let Some(peer) = unix_peer_pid(dup).filter(|p| !self.traced.contains(p) && *p != std::process::id()) {
                self.outside_peer = Some(format!("a Unix-socket connection from process {peer}, which dara does not trace,"));
            }
        }
        let addrs = if k == kind::TCP && key.is_some_and(|k| k.2 != 0) { addresses(dup) } else { None };
        let ep = Endpoint { id, kind: k, key: key.map(|(k, l, r)| if k == kind::UDP { (k, l, 0) } else { (k, l, r) }), addrs };
        if rc == 0 && ep.is_stable() {
            self.stable.insert(st.st_ino, ep);
        }
        ep
    }

    /// The logical id of the object with this key (an inode, or an anonymous inode's key), given
    /// on first sight.
    fn id_of(&mut self, key: u64) -> u64 {
        let next = self.ids.len() as u64;
        *self.ids.entry(key).or_insert(next)
    }

    fn peer(&self, ep: Endpoint) -> u64 {
        match ep.key {
            Some((k, l, r)) if r != 0 => self.lookup(&[(k, r, l), (k, r, 0)]),
            _ => NO_ENDPOINT,
        }
    }

    fn lookup(&self, keys: &[PortKey]) -> u64 {
        keys.iter().find_map(|k| self.by_key.get(k)).copied().unwrap_or(NO_ENDPOINT)
    }
}


fn closed_view() -> NetView {
    // A descriptor the target does not have: the real call fails at once (EBADF).
    NetView { ready: true, ready_entries: 1, size: -(libc::EBADF as i64), obj: describe(NO_ENDPOINT, NO_ENDPOINT, kind::UNKNOWN, &[]) }
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
